"""The Pythons the project supports and how CI finds them (README, Requirements).

- ``.ci/find_python`` finds a 3.12/3.13 the way pyenv lays them out (the newest patch release,
  whether or not ``pyenv global`` selects it), and fails naming what it looked for;
- ``requires-python`` is what jax declares at our pin's floor (jax 0.10: >=3.11), the running
  jax declares what the table below says, and the interpreters CI uses satisfy it.

Fast: runs the script with fake interpreters, reads metadata; nothing compiles.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import metadata
from pathlib import Path

import jax
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
FIND = ROOT / ".ci" / "find_python"
# What each jax minor version declares (its wheel's Requires-Python).
JAX_REQUIRES_PYTHON = {"0.10": ">=3.11", "0.11": ">=3.12"}


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def fake_pyenv(root: Path, *versions: str) -> None:
    for version in versions:
        minor = ".".join(version.split(".")[:2])
        exe = root / "versions" / version / "bin" / f"python{minor}"
        exe.parent.mkdir(parents=True)
        exe.write_text(f"#!/bin/sh\necho {version}\n")
        exe.chmod(0o755)


def find(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """find_python with only the fake pyenv root (no pyenv command, no python3.x on PATH)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"),
           "PYENV_ROOT": str(tmp_path / "pyenv")}
    return subprocess.run([str(FIND), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_find_python_picks_the_newest_patch_release_in_pyenvs_layout(tmp_path):
    fake_pyenv(tmp_path / "pyenv", "3.11.7", "3.12.9", "3.12.10", "3.13.0")
    out = find(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{tmp_path}/pyenv/versions/3.12.10/bin/python3.12\n"
    assert find(tmp_path, "3.13").stdout.endswith("/3.13.0/bin/python3.13\n")


def test_find_python_without_one_fails_naming_what_it_looked_for(tmp_path):
    fake_pyenv(tmp_path / "pyenv", "3.11.7")
    out = find(tmp_path)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("find_python: no Python 3.12 3.13 found")
    assert "versions/<version>.*/bin/python<version>" in out.stderr
    assert "PYTHON_LATEST" in out.stderr


def test_make_and_ci_find_it_the_same_way():
    makefile = (ROOT / "Makefile").read_text()
    assert "$$(.ci/find_python)" in makefile
    ci = [line.removeprefix("timed ") for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.removeprefix("timed ").startswith("make ")]
    assert ci.index("make test-latest") > ci.index("make test")


def test_requires_python_is_what_jax_declares_at_our_floor():
    ours = SpecifierSet(project()["requires-python"])
    running = ".".join(jax.__version__.split(".")[:2])
    assert metadata("jax")["Requires-Python"] == JAX_REQUIRES_PYTHON[running]
    floor = next(r for r in project()["dependencies"] if r.startswith("jax>="))
    floor = floor.split(">=")[1].split(",")[0]
    assert str(ours) == JAX_REQUIRES_PYTHON[floor]
    assert "3.10" not in ours and "3.11.7" in ours


def test_the_interpreters_ci_uses_satisfy_requires_python():
    ours = SpecifierSet(project()["requires-python"])
    assert Version(".".join(map(str, sys.version_info[:3]))) in ours
    found = subprocess.run([str(FIND)], capture_output=True, text=True, timeout=60)
    if found.returncode != 0:
        pytest.skip(f"no Python 3.12/3.13 here: {found.stderr.strip()}")
    version = subprocess.run([found.stdout.strip(), "-c", "import platform; "
                              "print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version in ours and version.startswith(("3.12.", "3.13."))
