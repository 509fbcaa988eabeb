"""Can the newest jax install beside this project's dependencies? (``make try-newest``)

pyproject.toml caps jax (``jax>=0.10,<0.12``) because a dependency does: gymnax 1.0.1 declares
``jax<0.12``. This script asks pip's resolver, in ``--dry-run`` mode (nothing is installed, the
running environment is left as it is), three questions for this Python:

1. which jax is the newest the index offers for this interpreter;
2. whether it resolves together with every dependency in pyproject.toml, our own jax cap lifted
   (and the ``--extras`` named);
3. if not, which of those dependencies refuses it, asked one at a time (``jax==NEWEST dep``),
   with the line of pip's report that says why (``gymnax 1.0.1 depends on jax<0.12``).

    python experiments/checks/try_newest.py                     # core dependencies
    python experiments/checks/try_newest.py --extras suites,wandb
    python experiments/checks/try_newest.py --jax 0.12.0.1      # a given version, not the newest

Prints the verdict in words on stderr and one JSON line on stdout. Exit status 0 whatever the
verdict (a blocked jax is information, not a failure); 2 when pip itself cannot be asked.
Needs the package index (or the folders pip is configured with).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIP = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
       "--disable-pip-version-check"]


def requirements(extras: list[str]) -> list[str]:
    """pyproject's dependencies (and those of ``extras``, expanded one level), jax left out."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = sorted(set(extras) - set(optional))
    if unknown:
        raise SystemExit(f"try_newest: --extras {','.join(unknown)} not in pyproject.toml; "
                         f"allowed: {', '.join(sorted(optional))}")
    found = list(project["dependencies"])
    for extra in extras:
        for req in optional[extra]:
            inner = re.fullmatch(r"jaxrl_async\[(.*)\]", req.replace(" ", ""))
            found += ([r for e in inner.group(1).split(",") for r in optional[e]]
                      if inner else [req])
    return [r for r in found if name_of(r) != "jax"]


def name_of(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def resolve(reqs: list[str]) -> tuple[dict[str, str] | None, str]:
    """The versions pip would install for ``reqs`` (None when it cannot), and why not."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        out = subprocess.run([*PIP, "--report", str(report), *reqs], capture_output=True,
                             text=True)
        if out.returncode != 0:  # pip's "The conflict is caused by" lines are on stdout
            return None, out.stdout + out.stderr
        installs = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installs}, ""


def why(stderr: str) -> list[str]:
    """The lines of pip's ResolutionImpossible report that name a dependency's jax cap."""
    lines = [line.strip() for line in stderr.splitlines()]
    named = [line for line in lines if re.search(r"depends on jax[<>=!~]", line)]
    return named or [line for line in lines if line.startswith("ERROR")][:3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", default="",
                        help="comma-separated extras of pyproject.toml to include")
    parser.add_argument("--jax", default=None, help="the jax version to try (default: newest)")
    args = parser.parse_args()
    extras = [e for e in args.extras.split(",") if e]
    reqs = requirements(extras)
    python = ".".join(map(str, sys.version_info[:2]))

    newest = args.jax
    if newest is None:
        alone, err = resolve(["jax"])
        if alone is None:
            print(f"try_newest: pip could not resolve jax alone:\n{err}", file=sys.stderr)
            sys.exit(2)
        newest = alone["jax"]
    pin = next(r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
               ["dependencies"] if name_of(r) == "jax")
    together, err = resolve([f"jax=={newest}", *reqs])
    result = {"python": python, "newest_jax": newest, "our_pin": pin, "extras": extras,
              "installs": together is not None, "blocked_by": {}}
    if together is not None:
        result["versions"] = {k: together[k] for k in sorted(together) if k in
                              {name_of(r) for r in reqs} | {"jax", "jaxlib"}}
        print(f"try_newest: jax {newest} installs beside every dependency on Python {python}"
              f" ({', '.join(f'{k} {v}' for k, v in result['versions'].items())}); only our "
              f"own pin ({pin}) keeps it out: raise it and run make test-latest.",
              file=sys.stderr)
    else:
        for req in reqs:
            alone, err_one = resolve([f"jax=={newest}", req])
            if alone is None:
                result["blocked_by"][name_of(req)] = why(err_one)
        if not result["blocked_by"]:  # only the combination fails: pip's own words
            result["blocked_by"]["(together)"] = why(err)
        print(f"try_newest: jax {newest} does not install beside this project's dependencies on "
              f"Python {python}; blocked by:", file=sys.stderr)
        for name, lines in result["blocked_by"].items():
            print(f"  {name}: {'; '.join(lines) or '(no reason in pip output)'}",
                  file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
