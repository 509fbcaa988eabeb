"""The container image's files, without building it (``make test-image`` builds and runs it):
the Containerfile's stages, user, volumes and build arguments, the requirements step run as it
runs in the build (the CUDA choice, the extras), the ignore files, and image_check.sh."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTAINERFILE = ROOT / "Containerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for line in CONTAINERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]  # as the builder joins them: the backslash and newline go
            continue
        text = pending + line
        pending = ""
        word, _, rest = text.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for word, rest in instructions():
        if word == "FROM":
            out.append([])
        if out:
            out[-1].append((word, rest))
    return out


def test_three_stages_on_one_base_argument():
    top = instructions()[:1]
    assert top == [("ARG", "BASE=python:3.12-slim")]  # the CPU default, from a registry
    froms = [r for w, r in instructions() if w == "FROM"]
    assert froms == ["${BASE} AS python-base", "python-base AS build", "python-base"]


def test_the_image_runs_as_a_non_root_user_with_runs_and_caches_on_volumes():
    final = stages()[-1]
    users = [r for w, r in final if w == "USER"]
    assert users == ["jra"]
    useradd = next(r for w, r in final if w == "RUN" and "useradd" in r)
    uid = int(re.search(r"--uid (\d+)", useradd).group(1))
    assert uid >= 1000  # neither root nor a system account (and not Ubuntu's user 1000)
    assert [r for w, r in final if w == "VOLUME"] == ['["/app/runs", "/cache"]']
    env = " ".join(r for w, r in final if w == "ENV")
    assert "XDG_CACHE_HOME=/cache" in env and "JAX_COMPILATION_CACHE_DIR=/cache/jax" in env
    assert ("WORKDIR", "/app") in final


def test_no_build_tools_reach_the_final_stage():
    final = stages()[-1]
    copies = [r for w, r in final if w in ("COPY", "ADD")]
    assert copies == ["--from=build /opt/venv /opt/venv"]  # the venv, no sources or wheels
    text = CONTAINERFILE.read_text()
    for tool in ("build-essential", "gcc", "g++", "clang", "cmake", "python3-dev"):
        assert not re.search(rf"(?<![\w-]){re.escape(tool)}(?![\w-])", text), tool


def requirements(tmp_path: Path, **args: str) -> subprocess.CompletedProcess:
    """The build's requirements step, run by sh as in the build, with build args as env."""
    step = next(r for w, r in stages()[1] if w == "RUN" and "requirements.txt" in r
                and "pip install" not in r)
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    defaults = dict(r.partition("=")[::2] for w, r in stages()[1] if w == "ARG")
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **defaults, **args}
    return subprocess.run(["sh", "-c", step], cwd=tmp_path, env=env, capture_output=True,
                          text=True)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the step reads pyproject with tomllib")
@pytest.mark.parametrize("args, plugin", [
    ({}, None),                                          # the CPU default
    ({"CUDA_VERSION": "12.8.1"}, "jax[cuda12]"),         # an nvidia/cuda:12.x base
    ({"CUDA_VERSION": "13.0.1"}, "jax[cuda13]"),
    ({"CUDA_VERSION": "12.8.1", "JAX_CUDA": "cpu"}, None),
    ({"JAX_CUDA": "cuda13"}, "jax[cuda13]"),
])
def test_jax_cuda_picks_the_plugin_from_the_base(tmp_path, args, plugin):
    done = requirements(tmp_path, **args)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "requirements.txt").read_text().splitlines()
    assert [line for line in lines if line.startswith("jax[")] == ([plugin] if plugin else [])
    assert any(line.startswith("jax>=") for line in lines)
    assert any(line.startswith("wandb") for line in lines)  # EXTRAS=wandb,envpool
    assert any(line.startswith("envpool") for line in lines)
    assert not any(line.startswith(("pytest", "nbclient")) for line in lines)  # no test extra


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the step reads pyproject with tomllib")
@pytest.mark.parametrize("args, message", [
    ({"JAX_CUDA": "rocm"}, "JAX_CUDA must be auto, cpu, cuda12 or cuda13, got 'rocm'"),
    ({"EXTRAS": "wandb,atari"}, "EXTRAS: no extra ['atari']; allowed: ["),
])
def test_bad_build_arguments_stop_the_build_naming_them(tmp_path, args, message):
    done = requirements(tmp_path, **args)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_the_ignore_files_keep_venv_runs_and_caches_out_of_the_context():
    docker = (ROOT / ".dockerignore").read_text().split("\n")
    for entry in (".venv", "runs", ".git", "**/__pycache__", ".pytest_cache", "wandb"):
        assert entry in docker, entry
    assert (ROOT / ".containerignore").read_text() == (ROOT / ".dockerignore").read_text()


def test_image_check_is_an_executable_valid_script_behind_make_test_image():
    script = ROOT / "experiments" / "checks" / "image_check.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-image:\n\tbash experiments/checks/image_check\.sh", makefile, re.M)
    assert "make test-image" in (ROOT / ".ci" / "run").read_text()


def test_the_cuda_base_named_in_the_docs_is_the_one_everywhere():
    """The one --build-arg that makes the CUDA image, as the Containerfile, the Makefile,
    docs/scaling.md and accelerator_check.sh print it, names the same base."""
    pattern = re.compile(r"BASE=(nvidia/cuda:[\w.-]+)")
    named = {path: set(pattern.findall((ROOT / path).read_text()))
             for path in ("Containerfile", "Makefile", "docs/scaling.md",
                          "experiments/checks/accelerator_check.sh")}
    assert set.union(*named.values()) == {"nvidia/cuda:12.8.1-base-ubuntu24.04"}, named
    assert all(named.values()), named
