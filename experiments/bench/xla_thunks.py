"""The XLA:CPU thunks one call runs, from a ``jax.profiler`` trace (profile_ppo.py and
profile_peers.py read their traces through it)."""

from __future__ import annotations

import glob
import gzip
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable

import jax

CONTAINERS = ("while", "conditional", "call")  # thunks that hold the thunks of their bodies


def traced_thunks(run: Callable[[], object]) -> tuple[list[tuple[str, float]], float]:
    """``(thunk name, ms)`` of every thunk ``run()`` executes (container thunks left out), and
    the traced wall time of ``run()`` in seconds, its result waited for."""
    folder = tempfile.mkdtemp(prefix="xla_thunks_")
    try:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            start = time.perf_counter()
            jax.block_until_ready(run())
            wall = time.perf_counter() - start
        path = glob.glob(f"{folder}/plugins/profile/*/perfetto_trace.json.gz")[0]
        with gzip.open(path) as f:
            events = json.load(f)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [(e["name"], e.get("dur", 0) / 1e3) for e in events
            if e.get("ph") == "X" and "name" in e
            and re.sub(r"\.\d+$", "", e["name"]) not in CONTAINERS], wall
