"""experiments/accelerator_check.sh without a GPU: it stops at once with a message saying no GPU
is visible, installing nothing; with a (faked) GPU, ``--dry-run`` shows where jax would come
from. The GPU path itself needs a GPU (docs/results.md)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "accelerator_check.sh"
BASH = "/bin/bash"


def fake_nvidia_smi(folder: Path, listing: str, rc: int = 0) -> Path:
    folder.mkdir(exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nprintf '%s' '{listing}'\nexit {rc}\n")
    tool.chmod(0o755)
    return folder


def fake_python(folder: Path, gpu_jax: bool) -> Path:
    """A 'python' whose jax sees a GPU (exit 0) or not (exit 1), as the script asks it."""
    tool = folder / f"python_{'gpu' if gpu_jax else 'cpu'}"
    tool.write_text(f"#!/bin/sh\ncat > /dev/null\nexit {0 if gpu_jax else 1}\n")
    tool.chmod(0o755)
    return tool


def check(tmp_path: Path, *args: str, path: str | None = None, **env: str):
    venv = tmp_path / "venv"
    environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    environ.update({"JAXRL_ACCEL_VENV": str(venv), "JAXRL_WHEELS": str(tmp_path / "wheels"),
                    "PYTHON": str(fake_python(tmp_path, gpu_jax=False)), **env})
    if path is not None:
        environ["PATH"] = path
    out = subprocess.run([BASH, str(SCRIPT), *args], env=environ, capture_output=True,
                         text=True, timeout=120)
    return out, venv


@pytest.mark.parametrize("case", ["no-driver", "none-listed", "hidden"])
def test_without_a_gpu_it_stops_at_once_and_says_so(tmp_path, case):
    if case == "no-driver":  # only dirname on PATH: no nvidia-smi
        tools = tmp_path / "tools"
        tools.mkdir()
        (tools / "dirname").symlink_to(subprocess.check_output(
            ["sh", "-c", "command -v dirname"], text=True).strip())
        out, venv = check(tmp_path, path=str(tools))
        reason = "nvidia-smi is not on PATH"
    elif case == "none-listed":  # a driver that finds no device
        bin_dir = fake_nvidia_smi(tmp_path / "bin", "No devices were found", rc=6)
        out, venv = check(tmp_path, path=f"{bin_dir}:{os.environ['PATH']}")
        reason = "nvidia-smi -L lists none"
    else:
        bin_dir = fake_nvidia_smi(tmp_path / "bin", "GPU 0: NVIDIA H200 (UUID: GPU-1)")
        out, venv = check(tmp_path, path=f"{bin_dir}:{os.environ['PATH']}",
                          CUDA_VISIBLE_DEVICES="-1")
        reason = "CUDA_VISIBLE_DEVICES='-1' hides every GPU"
    assert out.returncode == 3, out
    assert out.stderr.startswith(f"accelerator_check: no GPU visible: {reason}")
    assert out.stderr.endswith("(nothing was installed or run)\n") and out.stdout == ""
    assert not venv.exists()


def test_with_a_gpu_the_dry_run_names_where_jax_comes_from(tmp_path):
    listing = "GPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU 1: NVIDIA H200 (UUID: GPU-2)\n"
    bin_dir = fake_nvidia_smi(tmp_path / "bin", listing)
    path = f"{bin_dir}:{os.environ['PATH']}"
    # A Python whose jax is a CPU build, and no wheels: the package index.
    out, venv = check(tmp_path, "--dry-run", path=path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"gpus": 2, "gpu": "NVIDIA H200", "install": "index",
                                      "venv": str(venv), "jax": "0.10.2"}
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "jax_cuda12_plugin-0.10.2-py3-none-any.whl").write_bytes(b"")
    out, _ = check(tmp_path, "--dry-run", path=path, CUDA_VISIBLE_DEVICES="1")
    plan = json.loads(out.stdout)
    assert plan["install"] == f"wheels:{tmp_path / 'wheels'}" and plan["gpus"] == 1
    # A Python whose jax sees the GPU comes first.
    out, _ = check(tmp_path, "--dry-run", path=path,
                   PYTHON=str(fake_python(tmp_path, gpu_jax=True)))
    assert json.loads(out.stdout)["install"] == "preinstalled"
    assert not venv.exists()
