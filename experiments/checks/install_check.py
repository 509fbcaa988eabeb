"""Build the package and install it into a fresh virtual environment outside the repository,
then smoke-test it there: ``jaxrl-async train --help`` and a 1-update ``jra.train``, run from a
folder that holds no source, so a file missing from the wheel fails.

    python experiments/checks/install_check.py           # deps from the index (make check-install)
    python experiments/checks/install_check.py --lowest  # deps at their floors (make check-floors)
    python experiments/checks/install_check.py --share-deps  # no downloads: this Python's deps

``--share-deps`` (what the test suite does, ``tests/test_packaging.py``) installs the wheel with
``--no-deps`` and lets the fresh environment see this environment's site-packages through a
``.pth`` line (a plain path: the ``.pth`` files there, such as an editable install of the source
tree, are not run). ``--lowest`` pins each dependency with a floor (``pkg>=X``) to ``X``, so a
floor that is not true fails the smoke test. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "jaxrl_async")

SMOKE = """
import importlib.metadata, importlib.util, json, os, sys
from pathlib import Path
import jaxrl_async as jra
where = Path(jra.__file__).resolve()
Path("run.yaml").write_text("algo: ppo\\nenv: CartPole-v1\\nnum_envs: 2\\nnum_steps: 8\\n"
                            "total_timesteps: 16\\nnum_minibatches: 1\\nupdate_epochs: 1\\n"
                            "hidden_sizes: [8]\\nfast_compile: true\\ntensorboard: true\\n")
cfg = jra.load_config("run.yaml")  # pyyaml
tracked = importlib.util.find_spec("wandb") is not None  # the [wandb] extra, if installed
os.environ.setdefault("WANDB_MODE", "offline")
out = jra.train(cfg, seed=0, progress=False, run_dir="run",  # orbax, matplotlib, tensorboardX
                callbacks=[jra.WandbSink(project="smoke")] if tracked else [])
print(json.dumps({"file": str(where), "version": jra.__version__,
                  "metadata_version": importlib.metadata.version("jaxrl_async"),
                  "py_typed": (where.parent / "py.typed").exists(),
                  "updates": int(out.state.update), "prefix": sys.prefix,
                  "checkpoint": (Path("run") / "checkpoints" / "1").exists(),
                  "wandb": tracked and (Path("run") / "wandb.json").exists()}))
"""

def clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH: the subprocesses see the installed package only."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def build(out: Path) -> tuple[Path, Path]:
    """The sdist and the wheel (built from the sdist, as ``python -m build`` does), from a copy
    of the package's sources (the checkout stays clean)."""
    src = out / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    dist = out / "dist"
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation",
                           "--skip-dependency-check", "--outdir", str(dist), str(src)],
                          capture_output=True, text=True, env=clean_env())
    if done.returncode:  # the backend's own words, not only an exit status
        raise RuntimeError(f"python -m build failed (exit {done.returncode}):\n"
                           f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return next(dist.glob("*.tar.gz")), next(dist.glob("*.whl"))


def make_venv(path: Path, wheel: Path, mode: str) -> Path:
    """A fresh venv at ``path`` with the wheel installed; ``mode``: ``share-deps``, ``full``
    (deps from the index) or ``lowest`` (deps at their floors). Returns its python."""
    env = clean_env()
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if mode == "share-deps"
                                                    else []), str(path)], check=True, env=env)
    python = path / "bin" / "python"
    if mode == "share-deps":
        purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                                  "print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True, env=env
                                 ).stdout.strip()
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                        "--quiet", "--no-deps", "--no-index", str(wheel)], check=True, env=env)
        shared = sysconfig.get_paths()["purelib"]
        Path(purelib, "_jaxrl_async_shared_deps.pth").write_text(shared + "\n")
        return python
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, env=env)
    if mode == "lowest":
        floors = path / "floors.txt"
        floors.write_text("\n".join(lowest_versions()) + "\n")
        pip += ["-c", str(floors)]
    subprocess.run([*pip, f"{wheel}[wandb,optuna]"], check=True, env=env)
    return python


def lowest_versions() -> list[str]:
    """``pkg==X`` for every dependency (and the wandb and optuna extras') declared
    ``pkg>=X``."""
    import tomllib  # Python 3.11+

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = []
    extras = project["optional-dependencies"]
    for spec in [*project["dependencies"], *extras["wandb"], *extras["optuna"]]:
        match = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)", spec)
        if match:
            pins.append(f"{match.group(1)}=={match.group(3)}")
    return pins


def smoke(python: Path, workdir: Path) -> dict:
    """``jaxrl-async train --help`` and a 1-update ``jra.train`` in the venv of ``python``,
    from ``workdir``, with no PYTHONPATH: the installed package or nothing."""
    env = clean_env()
    script = python.parent / "jaxrl-async"
    helped = subprocess.run([str(script), "train", "--help"], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=300)
    if helped.returncode != 0:
        raise RuntimeError(f"jaxrl-async train --help failed:\n{helped.stderr}")
    ran = subprocess.run([str(python), "-c", SMOKE], cwd=workdir, env=env, capture_output=True,
                         text=True, timeout=600)
    if ran.returncode != 0:
        raise RuntimeError(f"1-update jra.train failed:\n{ran.stderr}")
    return {**json.loads(ran.stdout.strip().splitlines()[-1]),
            "help_has_config": "--config" in helped.stdout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--lowest", action="store_true", help="dependencies at their floors")
    mode.add_argument("--share-deps", action="store_true",
                      help="no downloads: see this environment's dependencies")
    args = parser.parse_args()
    kind = "lowest" if args.lowest else "share-deps" if args.share_deps else "full"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jra_install_") as tmp:
        tmp = Path(tmp)
        sdist, wheel = build(tmp)
        python = make_venv(tmp / "venv", wheel, kind)
        (tmp / "work").mkdir()
        result = smoke(python, tmp / "work")
        if kind == "lowest":
            result["pins"] = lowest_versions()
        print(json.dumps({"mode": kind, "wheel": wheel.name, "sdist": sdist.name, **result,
                          "seconds": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
