"""The documentation stays inside the repository and in step with the code.

- every relative link in README.md and docs/*.md resolves to a file or folder of the repository;
- no tracked text file names a path outside the repository (a sibling folder, a design document
  that is not committed here, an absolute path of some machine);
- docs/cli.md is what ``experiments/checks/gen_cli_docs.py`` generates from the configs today.

Fast: reads files and imports the CLI's parsers; nothing compiles.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CHECKED_TOP = ("README.md", "docs", "jaxrl_async", "tests", "experiments", "notebooks",
               "Makefile", "pyproject.toml", "Containerfile", ".dockerignore", ".ci")
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".txt", ".cfg", ".ini", ".yaml", ".yml", ""}
# Spelled in pieces so that this file does not name them itself.
OUTSIDE = [re.compile(p) for p in (
    r"\.\./" + "shared",
    r"\bshared/" + "DESIGN",
    "DESIGN" + r"\.md",
    r"(?<![\w.])/" + "work/",
    r"(?<![\w.])/" + "home/",
)]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "--", *CHECKED_TOP], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        files = [ROOT / line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = [p for top in CHECKED_TOP for p in
                 ([ROOT / top] if (ROOT / top).is_file() else (ROOT / top).rglob("*"))]
    # Files written since the last commit (a new docs page) are checked too.
    files += [p for p in (ROOT / "docs").glob("*.md")]
    return sorted({p for p in files if p.is_file() and p.suffix in TEXT_SUFFIXES})


def _links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    return LINK.findall(text)


def test_docs_folder_has_the_pages():
    names = {p.name for p in DOC_FILES}
    for page in ("design.md", "algorithms.md", "results.md", "scaling.md", "sweeps.md",
                 "cli.md", "checkpoints.md", "envs.md"):
        assert page in names, f"docs/{page} is missing"


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = []
    for target in _links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the same page
        file_part = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (doc.parent / file_part).resolve()
        if not resolved.is_relative_to(ROOT):
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(f"{target} (no such file)")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links: {broken}"


def test_no_path_outside_the_repository():
    found = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for pattern in OUTSIDE:
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:100]}")
    assert not found, "paths outside the repository:\n" + "\n".join(found)


def test_cli_reference_is_current():
    script = ROOT / "experiments" / "checks" / "gen_cli_docs.py"
    spec = importlib.util.spec_from_file_location("gen_cli_docs", script)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    committed = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == gen.render(), (
        "docs/cli.md is out of date with the configs: run `make docs` "
        "(python experiments/checks/gen_cli_docs.py)")
