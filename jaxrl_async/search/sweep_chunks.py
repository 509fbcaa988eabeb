"""A sweep's runs in chunks, and the chunks' checkpoints.

``plan`` lays the runs of one static group out over the devices: the devices used, the runs
per chunk (``runs_per_chunk`` rounded up to a multiple of the devices; default: all the runs
at once) and the padding (repeats of the last run, in the last chunk, never reported). Every
chunk is one call of the same compiled program.

With a ``checkpoint_dir``, ``sweep.json`` (the base config, the points, the seeds, the chunk
layout) is written first and each finished chunk's outputs to ``g<group>_c<chunk>.npz``, by
process 0 only, each to a temporary name and then renamed, so a file under its final name is
whole (a half-written temporary one is never read, and is removed on the next start). A sweep
started again on the directory checks that it is the same sweep before anything compiles,
loads the chunks found and trains only the others (``jra.resume_sweep``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async.config.shared import to_dict
from jaxrl_async.run.distributed import is_main_process
from jaxrl_async.run.sinks import to_json
from jaxrl_async.runners.common import check_devices

META = "sweep.json"


def check_runs_per_chunk(runs_per_chunk: Any) -> None:
    """``ValueError`` unless ``runs_per_chunk`` is ``None`` (all runs at once) or an int >= 1."""
    if runs_per_chunk is None:
        return
    if isinstance(runs_per_chunk, bool) or not isinstance(runs_per_chunk, (int, np.integer)) \
            or runs_per_chunk < 1:
        raise ValueError("runs_per_chunk must be an int >= 1 (runs trained at once, rounded up "
                         f"to a multiple of the devices) or None (all at once), got "
                         f"{runs_per_chunk!r}")


@dataclasses.dataclass(frozen=True)
class Layout:
    """``runs`` real runs over ``devices`` devices, ``chunk`` runs (a multiple of ``devices``)
    per call of the program."""

    runs: int
    devices: int
    chunk: int

    @property
    def chunks(self) -> int:
        return -(-self.runs // self.chunk)

    @property
    def padded(self) -> int:
        return self.chunks * self.chunk

    def per_device(self, k: int) -> list[int]:
        """The real (not padding) runs of chunk ``k`` on each mesh position."""
        share = self.chunk // self.devices
        first = k * self.chunk
        return [min(max(self.runs - first - p * share, 0), share) for p in range(self.devices)]


def plan(num_runs: int, num_devices: int | None, runs_per_chunk: int | None,
         cfg: Any) -> Layout:
    """The layout of ``num_runs`` runs over ``num_devices`` (default: every device of every
    process); ``ValueError`` for a bad count, before anything compiles."""
    check_runs_per_chunk(runs_per_chunk)
    processes = jax.process_count()
    wanted = num_devices or jax.device_count()
    if not isinstance(wanted, (int, np.integer)) or isinstance(wanted, bool) or wanted < 1:
        raise ValueError(f"num_devices must be an int >= 1 or None (all devices), got "
                         f"{num_devices!r}")
    check_devices("num_devices", wanted, cfg, local=processes == 1)
    if wanted % processes:
        raise ValueError(f"num_devices must be a multiple of the {processes} processes (each "
                         f"trains the runs on its own devices), got {wanted}")
    at_once = min(runs_per_chunk or num_runs, num_runs)
    devices = min(wanted, -(-at_once // processes) * processes)
    return Layout(num_runs, devices, -(-at_once // devices) * devices)


def local_steps(layout: Layout, positions: Sequence[int], steps_per_run: int,
                chunks: Sequence[int] | None = None) -> int:
    """The environment steps of the real runs on ``positions`` (this process's devices) over
    ``chunks`` (default: all): what this process's progress bar counts."""
    ks = range(layout.chunks) if chunks is None else chunks
    return sum(layout.per_device(k)[p] for k in ks for p in positions) * steps_per_run


# --------------------------------------------------------------------------- checkpoints
def meta_of(cfg: Any, points: Sequence[dict], seeds: Sequence[int], grid: dict | None,
            runs_per_chunk: int | None, layouts: Sequence[Layout],
            test_seeds: Any = None) -> dict:
    """What identifies a sweep, as ``sweep.json`` holds it (JSON types)."""
    return json.loads(to_json({
        "base": to_dict(cfg), "points": [dict(p) for p in points], "seeds": list(seeds),
        "grid": grid, "runs_per_chunk": runs_per_chunk,
        "chunk_runs": [lay.chunk for lay in layouts],
        "devices": [lay.devices for lay in layouts], "test_seeds": test_seeds}))


def read_meta(directory: str | Path) -> dict | None:
    path = Path(directory) / META
    return json.loads(path.read_text()) if path.exists() else None


def check_same(saved: dict, meta: dict, directory: str | Path) -> None:
    """``ValueError`` naming what differs when ``directory``'s sweep is not this one."""
    names = {"base": "the base config", "points": "the points (grid or samples)",
             "seeds": "the seeds", "runs_per_chunk": "runs_per_chunk"}
    differ = [names[k] for k in names if saved.get(k) != meta[k]]
    if differ:
        raise ValueError(f"checkpoint_dir {directory} holds another sweep ({', '.join(differ)} "
                         "differ); give another checkpoint_dir, or continue that sweep with "
                         f"jra.resume_sweep({str(directory)!r})")
    if saved["chunk_runs"] != meta["chunk_runs"]:
        raise ValueError(f"checkpoint_dir {directory}: its chunks hold {saved['chunk_runs']} "
                         f"runs (on {saved['devices']} devices), this sweep's {meta['chunk_runs']}"
                         f" (runs_per_chunk rounded up to a multiple of {meta['devices']} "
                         f"devices); resume it with num_devices={saved['devices'][0]}")


def chunk_path(directory: str | Path, group: int, k: int) -> Path:
    return Path(directory) / f"g{group}_c{k}.npz"


def start(directory: str | Path, meta: dict) -> None:
    """Check ``directory`` holds this sweep or none; process 0 writes ``sweep.json`` and
    removes temporary files a killed sweep left."""
    saved = read_meta(directory)
    if saved is not None:
        check_same(saved, meta, directory)
    if is_main_process():
        Path(directory).mkdir(parents=True, exist_ok=True)
        for leftover in Path(directory).glob("*.tmp*"):
            leftover.unlink(missing_ok=True)
        if saved is None:
            _write_atomic(Path(directory) / META, (to_json(meta, indent=1) + "\n").encode())


def load_done(directory: str | Path, group: int, layout: Layout) -> dict[int, dict]:
    """The chunks of ``group`` already saved: chunk index -> its arrays. A file that cannot be
    read (or holds another layout) is warned about and trained again."""
    done = {}
    for k in range(layout.chunks):
        path = chunk_path(directory, group, k)
        if not path.exists():
            continue
        try:
            with np.load(path) as data:
                arrays = {name: data[name] for name in data.files}
            if int(arrays["chunk_runs"]) != layout.chunk:
                raise ValueError(f"{int(arrays['chunk_runs'])} runs, not {layout.chunk}")
        except Exception as e:  # noqa: BLE001 - any unreadable file: train the chunk again
            warnings.warn(f"{path}: not a whole chunk ({e}); training it again", stacklevel=2)
            continue
        done[k] = arrays
    return done


def agree(done: Sequence[dict], layouts: Sequence[Layout], directory: str | Path) -> None:
    """Under ``jax.distributed``: ``ValueError`` in every process unless all found the same
    chunks of every group (``checkpoint_dir`` must be one directory all processes see)."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    flags = np.array([k in d for d, lay in zip(done, layouts) for k in range(lay.chunks)],
                     np.int32)
    seen = multihost_utils.process_allgather(flags)
    if not (seen == seen[0]).all():
        raise ValueError(f"checkpoint_dir {directory}: the processes found different saved "
                         "chunks; it must be one directory all processes see (a shared file "
                         "system)")


def save_chunk(directory: str | Path, group: int, k: int, layout: Layout, out: Any,
               train_s: float) -> None:
    """Process 0 writes chunk ``k``'s outputs ``(params, metrics)`` (host arrays) and the
    seconds it trained for (a resumed sweep's speed counts it at that time)."""
    if not is_main_process():
        return
    params, metrics = out
    arrays = {"chunk_runs": np.int64(layout.chunk), "train_s": np.float64(train_s)}
    arrays.update({f"p/{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(params))})
    arrays.update({f"m/{name}": np.asarray(x) for name, x in metrics.items()})
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    _write_atomic(chunk_path(directory, group, k), buffer.getvalue())


def saved_train_s(arrays: dict) -> float:
    """The seconds a saved chunk trained for (NaN in a file written before they were kept)."""
    return float(arrays["train_s"]) if "train_s" in arrays else float("nan")


def unpack(arrays: dict, treedef: Any) -> tuple[Any, dict]:
    """A saved chunk's ``(params, metrics)``, the params rebuilt with ``treedef``."""
    count = sum(name.startswith("p/") for name in arrays)
    params = jax.tree.unflatten(treedef, [arrays[f"p/{i}"] for i in range(count)])
    return params, {name[2:]: x for name, x in arrays.items() if name.startswith("m/")}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
