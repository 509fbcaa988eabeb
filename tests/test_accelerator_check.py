"""experiments/checks/accelerator_check.sh without a GPU: it stops at once with a message saying
no GPU is visible, installing nothing; with a (faked) GPU, ``--dry-run`` shows where jax would come
from; its steps are one ``step NAME SECONDS ...`` line each, picked by JAXRL_ACCEL_STEPS and held
to the budget (JAXRL_ACCEL_PLATFORM=cpu with this Python as it is: a few seconds). The GPU path
itself needs a GPU; its offline install path is experiments/checks/accelerator_offline_check.sh
(docs/results.md)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "checks" / "accelerator_check.sh"
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
                                      "venv": str(venv), "jax": "0.11.2"}
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "gymnax-1.0.1-py3-none-any.whl").write_bytes(b"")
    out, _ = check(tmp_path, "--dry-run", path=path)  # wheels without a jax: still the index
    assert json.loads(out.stdout)["install"] == "index"
    (tmp_path / "wheels" / "jax_cuda12_plugin-0.11.2-py3-none-any.whl").write_bytes(b"")
    out, _ = check(tmp_path, "--dry-run", path=path, CUDA_VISIBLE_DEVICES="1")
    plan = json.loads(out.stdout)
    assert plan["install"] == f"wheels:{tmp_path / 'wheels'}" and plan["gpus"] == 1
    # A Python whose jax sees the GPU comes first.
    out, _ = check(tmp_path, "--dry-run", path=path,
                   PYTHON=str(fake_python(tmp_path, gpu_jax=True)))
    assert json.loads(out.stdout)["install"] == "preinstalled"
    assert not venv.exists()


def test_the_steps_are_one_line_each_and_list_parses(tmp_path):
    text = SCRIPT.read_text()
    body = text[text.index("\nsteps() {\n"):]
    body = body[:body.index("\n}\n")]
    lines = [line.strip() for line in body.splitlines()[2:]]
    assert lines and all(re.fullmatch(r"step [a-z0-9_]+ [0-9]+ .+", line) for line in lines), lines
    out, _ = check(tmp_path, "--list")
    assert out.returncode == 0, out.stderr
    listed = [line.split() for line in out.stdout.splitlines()]
    assert [[line.split()[1], line.split()[2]] for line in lines] == listed
    names = [name for name, _ in listed]
    assert len(set(names)) == len(names) and "versions" in names


def run_here(tmp_path, **env):
    """The check on the CPU with this Python as it is (nothing installed)."""
    return check(tmp_path, PYTHON=sys.executable, JAXRL_ACCEL_PLATFORM="cpu",
                 JAXRL_ACCEL_INSTALL="skip", **env)[0]


def test_the_steps_asked_for_run_and_others_do_not(tmp_path):
    out = run_here(tmp_path, JAXRL_ACCEL_STEPS="versions")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["versions"]["jax"] == jax.__version__ == result["jax"]
    assert result["jax_from"] == "as is" and result["gpus"] == 0
    assert not {"sync", "async_1gpu", "sweep"} & set(result)


def test_a_step_past_the_budget_is_skipped_and_says_so(tmp_path):
    out = run_here(tmp_path, JAXRL_ACCEL_STEPS="versions", JAXRL_ACCEL_BUDGET_S="0")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["versions"] == {
        "skipped": "budget of 0s spent"}
    assert "versions skipped: the budget of 0s is spent" in out.stderr


@pytest.mark.parametrize("setting,value,allowed", [
    ("JAXRL_ACCEL_STEPS", "versions,nope", "versions peers reproduce_breakout"),
    ("JAXRL_ACCEL_PLATFORM", "tpu", "gpu (default) and cpu"),
    ("JAXRL_ACCEL_BUDGET_S", "7m", "a whole number of seconds"),
])
def test_a_bad_setting_names_it_and_the_allowed_values(tmp_path, setting, value, allowed):
    out, venv = check(tmp_path, **{setting: value})
    assert out.returncode == 2 and setting in out.stderr and allowed in out.stderr, out.stderr
    assert not venv.exists()
