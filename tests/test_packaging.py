"""The package as pip installs it: ``python -m build`` makes an sdist and a wheel; the wheel,
installed into a fresh venv outside the repository, runs ``jaxrl-async train --help`` and a
1-update ``jra.train`` from a folder without sources (a module or file left out of the wheel
fails here); ``py.typed`` ships; the version has one source."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

import jaxrl_async

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_the_wheel_installs_and_trains_outside_the_repository(installed_package, tmp_path):
    python, sdist, wheel, install_check = installed_package
    assert REPO not in python.parents
    result = install_check.smoke(python, tmp_path)
    venv = python.parent.parent
    assert Path(result["file"]).is_relative_to(venv), result  # not the source tree
    assert result["updates"] == 1 and result["help_has_config"] and result["checkpoint"]
    assert result["wandb"]  # make test installs the [wandb] extra: WandbSink ran offline
    assert result["version"] == result["metadata_version"] == jaxrl_async.__version__
    assert result["py_typed"]


def test_wheel_and_sdist_hold_every_module(installed_package):
    _, sdist, wheel, _ = installed_package
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "jaxrl_async").rglob("*.py")}
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert modules | {"jaxrl_async/py.typed"} <= in_wheel
    top = sdist.name.removesuffix(".tar.gz")
    in_sdist = {n.removeprefix(top + "/") for n in tarfile.open(sdist).getnames()}
    assert modules | {"pyproject.toml", "README.md"} <= in_sdist
    assert wheel.name.startswith(f"jaxrl_async-{jaxrl_async.__version__}-")
    assert "version =" not in (REPO / "pyproject.toml").read_text().split("[project]")[1] \
        .split("\n[")[0].replace("dynamic", "")  # the version is written in one place


def test_dependency_floors_are_the_ones_checked():
    """The floors ``make check-floors`` installs are parsed from pyproject.toml; gymnax's is
    1.0.1 (0.0.9's step returns five values, the env wrappers unpack six; 1.0.0 needs jax<0.7)."""
    spec = __import__("importlib.util").util.spec_from_file_location(
        "install_check", REPO / "experiments" / "checks" / "install_check.py")
    module = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pins = module.lowest_versions()
    assert "gymnax==1.0.1" in pins and "jax==0.10" in pins and any(
        p.startswith("wandb==") for p in pins)
