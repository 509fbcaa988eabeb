"""What a checkpoint is checked against before anything is restored: its format, the config
that wrote it, the shapes of its state, the process x device layout it was written on; and
why a run directory holds none. Read-only helpers of ``checkpoint`` (which re-exports them)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax

from jaxrl_async.config.shared import to_dict

CHECKPOINTS = "checkpoints"
INCOMPLETE = ".orbax-checkpoint-tmp"
"""In the name of a checkpoint directory whose write has not finished (orbax's)."""

# The layout of a checkpoint (``meta["format"]``); restoring refuses any other. 1: the first
# numbered layout (checkpoints written before it have no ``format`` and are refused as older).
FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be restored: missing, corrupt, or made by another config."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def incomplete(run_dir: str | Path) -> list[Path]:
    """The directories of checkpoint writes that did not finish (the process died or the disk
    filled while writing): never restored from; removed by the next write."""
    where = checkpoint_dir(run_dir)
    return sorted(p for p in where.iterdir() if INCOMPLETE in p.name) if where.is_dir() else []


def layout() -> dict[str, int]:
    """The process x device layout a run trains on (saved with every checkpoint)."""
    return {"processes": jax.process_count(), "local_devices": jax.local_device_count()}


def _layout_text(found: dict) -> str:
    n, d = found.get("processes", 1), found.get("local_devices")
    return (f"{n} process{'es' * (n != 1)}" + (f" x {d} device{'s' * (d != 1)}" if d else "")
            + (" each" if d and n > 1 else ""))


def _check_format(where: Path, meta: dict) -> None:
    """``CheckpointError`` unless ``meta`` is of this version's checkpoint ``FORMAT``."""
    found = meta.get("format", 0) if isinstance(meta, dict) else 0
    if found != FORMAT:
        by = "an older" if isinstance(found, int) and found < FORMAT else "another"
        raise CheckpointError(
            f"checkpoint {where} was written by {by} version of jaxrl_async (checkpoint format "
            f"{found!r}{', unnumbered' if found == 0 else ''}); this version reads format "
            f"{FORMAT}: restore it with the version that wrote it, or train anew")


def check_layout(where: Path, meta: dict) -> None:
    """``CheckpointError`` naming both layouts when the checkpoint was written on another
    process x device layout than this run's and either is multi-process (a one-process run
    keeps its devices in its config; checkpoints written before layouts were saved are
    one-process ones)."""
    saved, now = meta.get("layout", {"processes": 1}), layout()
    if saved.get("processes", 1) == now["processes"] == 1:
        return
    if (saved.get("processes", 1), saved.get("local_devices")) != (now["processes"],
                                                                   now["local_devices"]):
        raise CheckpointError(
            f"checkpoint {where} was written by {_layout_text(saved)}; this run has "
            f"{_layout_text(now)}: resume it on the layout that wrote it (the same number of "
            "processes, each with the same number of devices)")


def config_differences(saved: dict, cfg: Any, *, budget_may_differ: bool = False) -> list[str]:
    """``field: saved -> now`` for every training field where ``saved`` (a ``to_dict``) and
    ``cfg`` differ; the ``io_fields`` (where and how often to write) may differ, and
    ``total_timesteps`` with ``budget_may_differ``."""
    now = to_dict(cfg)
    ignore = set(getattr(cfg, "io_fields", ())) | ({"total_timesteps"} if budget_may_differ
                                                    else set())
    # a field newer than the saved config held its default there (as the run trained)
    defaults = {f.name: list(f.default) if isinstance(f.default, tuple) else f.default
                for f in dataclasses.fields(cfg) if f.name not in saved}
    saved = {**defaults, **saved}
    keys = (saved.keys() | now.keys()) - ignore
    return [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(keys)
            if saved.get(k) != now.get(k)]


def no_checkpoint(run_dir: str | Path) -> str:
    """``no checkpoint in RUN_DIR/checkpoints: <why>``, the why read off the run directory."""
    import json

    run_dir = Path(run_dir)
    where = f"no checkpoint in {checkpoint_dir(run_dir)}"
    partial = incomplete(run_dir)
    if partial:
        return (f"{where}: the only write was interrupted before it was complete "
                f"({partial[-1].name}); train the run anew")
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    try:
        every = json.loads((run_dir / "config.json").read_text()).get("checkpoint_every", 0)
    except (OSError, ValueError, AttributeError):
        every = None
    if isinstance(summary, dict) and summary.get("diverged"):
        update = summary["diverged"].get("update")
        return (f"{where}: the run diverged at update {update} before its first checkpoint (a "
                "diverged state is never saved); train it anew, e.g. with a smaller lr")
    if isinstance(summary, dict):
        return (f"{where}: the run ended without writing one (so did host-env and "
                "multi-process runs of earlier versions); train it anew")
    if (run_dir / "metrics.jsonl").exists():
        first = (f"the first was due after update {every}" if every else
                 "with checkpoint_every=0 the only one is written at the end of training or on "
                 "Ctrl-C")
        return (f"{where}: the run stopped (killed, or it is still running) before its first "
                f"checkpoint ({first}); train it anew, with checkpoint_every=N to keep some")
    return f"{where}: the run has written nothing yet"
