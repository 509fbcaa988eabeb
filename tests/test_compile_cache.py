"""The persistent compilation cache (``jaxrl_async.run.compile_cache``): a second process reads the
programs the first compiled, a changed config or library version compiles anew, ``off``
writes nothing, a user's own ``JAX_COMPILATION_CACHE_DIR`` is left alone. Each case runs in
fresh processes (jax opens its cache once per process) with ``XDG_CACHE_HOME`` in a temporary
folder: nothing is written to the user's cache. About 40 s on two busy cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Trains a tiny PPO run per config given (JSON list of field overrides), or jits a one-op
# program ("tiny"); prints the cache's hits and misses (jax's monitoring events) per call.
WORKER = """
import json, sys
import jax
import jaxrl_async as jra
import jaxrl_async.version
from jaxrl_async.search.sweep import count_compiles
events = []
jax.monitoring.register_event_listener(lambda e, **k: events.append(e))
if sys.argv[2]:
    jaxrl_async.version.__version__ = sys.argv[2]  # as if another release
out = []
for change in json.loads(sys.argv[1]):
    events.clear()
    with count_compiles() as names:
        if change == "tiny":
            jra.use_compile_cache()
            jax.jit(lambda x: x * 3 + 1)(jax.numpy.float32(2)).block_until_ready()
        else:
            fields = dict(env="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=32,
                          update_epochs=1, num_minibatches=1, hidden_sizes=(8,))
            cfg = jra.PPOConfig(**{**fields, **change})
            jra.train(cfg, progress=False)
    out.append({"hits": events.count("/jax/compilation_cache/cache_hits"),
                "misses": events.count("/jax/compilation_cache/cache_misses"),
                "compiles": len(names)})
print("RESULT " + json.dumps(out))
"""


def run(tmp_path: Path, changes: list, version: str = "", **env: str) -> list[dict]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                    "JAXRL_ASYNC_COMPILE_CACHE"))}
    environ.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), JAX_PLATFORMS="cpu", **env)
    environ["XLA_FLAGS"] = ""  # one device: what a user's process has
    proc = subprocess.run([sys.executable, "-c", WORKER, json.dumps(changes), version],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def cache_files(tmp_path: Path) -> list[Path]:
    root = tmp_path / "xdg" / "jaxrl_async" / "xla"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_second_process_hits_the_cache_and_a_changed_config_misses(tmp_path):
    cold, = run(tmp_path, [{}])
    assert cold["misses"] > 0 and cold["hits"] == 0, cold
    written = cache_files(tmp_path)
    assert written, "the first process wrote no program into the default cache folder"
    assert all(p.parent.name.startswith("jax-") for p in written)  # the version subfolder
    warm, changed = run(tmp_path, [{}, {"num_steps": 16}])
    assert warm["hits"] >= cold["misses"] and warm["misses"] == 0, warm
    assert changed["misses"] > 0, changed  # another program: compiled, not read back
    assert len(cache_files(tmp_path)) > len(written)


def test_another_library_version_never_reads_the_old_programs(tmp_path):
    first, = run(tmp_path, ["tiny"])
    again, = run(tmp_path, ["tiny"])
    other, = run(tmp_path, ["tiny"], version="99.0")
    assert first["misses"] > 0 and first["hits"] == 0, first
    assert again == {**first, "hits": first["misses"], "misses": 0}, again
    assert other == first, other  # compiled anew, as the first time
    assert len({p.parent for p in cache_files(tmp_path)}) == 2  # one folder per version


def test_off_writes_nothing_and_a_folder_moves_it(tmp_path):
    off, = run(tmp_path, ["tiny"], JAXRL_ASYNC_COMPILE_CACHE="off")
    assert off["hits"] == off["misses"] == 0, off
    assert not (tmp_path / "xdg" / "jaxrl_async").exists()
    moved, = run(tmp_path, ["tiny"], JAXRL_ASYNC_COMPILE_CACHE=str(tmp_path / "elsewhere"))
    assert moved["misses"] > 0 and not cache_files(tmp_path)
    assert [p.name for p in (tmp_path / "elsewhere").iterdir()][0].startswith("jax-")


def test_a_users_jax_cache_folder_is_left_as_it_is(tmp_path):
    mine = tmp_path / "mine"
    run(tmp_path, ["tiny"], JAX_COMPILATION_CACHE_DIR=str(mine),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    assert any(mine.iterdir()) and not cache_files(tmp_path)


def test_bad_folder_value_is_a_clear_error():
    from jaxrl_async.run.compile_cache import resolve

    with pytest.raises(ValueError, match="JAXRL_ASYNC_COMPILE_CACHE"):
        resolve("  ")
    assert resolve("OFF") is None
