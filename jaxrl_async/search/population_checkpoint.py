"""Checkpoints of a population (``jra.pbt(..., checkpoint_dir=..., checkpoint_every=K)``):
``population.json`` (the base config, the space, the schedule, the seeds) and, after every
``K`` segments, ``checkpoint.npz``: the whole carry (configs and run states of every member,
keys as key data) and the metrics and lineage so far. Written to a temporary file and renamed,
so a crash leaves the previous checkpoint whole. ``jra.resume_population(dir)`` continues it.
A population over several processes is gathered to every process and written by process 0
alone, so a resume needs the directory on a file system all processes see."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async.algos import from_dict
from jaxrl_async.config.shared import to_dict
from jaxrl_async.run.checkpoint import CheckpointError
from jaxrl_async.run.sinks import to_json
from jaxrl_async.search.population import Schedule, Space

META, DATA = "population.json", "checkpoint.npz"


def is_key(x: Any) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def write_meta(directory: str | Path, cfg: Any, space: Space, schedule: Any,
               seeds: tuple[int, ...], seed: int, every: int | None,
               layout: dict[str, int] | None = None) -> None:
    """``population.json``; ``layout``: the devices and processes the members were sharded
    over (a resume takes as many devices by default)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / META).write_text(to_json({
        "base": to_dict(cfg), "space": space.to_json(), "schedule": dataclasses.asdict(schedule),
        "seeds": list(seeds), "seed": seed, "checkpoint_every": every,
        "layout": layout or {"devices": 1, "processes": 1}}, indent=1) + "\n")


def read_meta(directory: str | Path) -> tuple[Any, Space, Any, tuple[int, ...], int, int | None]:
    path = Path(directory) / META
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{directory} holds no population checkpoint: no {META}") from None
    cfg = from_dict(data["base"])
    schedule = data["schedule"]
    schedule = Schedule(**{**schedule, "keeps": tuple(schedule["keeps"])})
    return (cfg, Space.from_json(cfg, data["space"]), schedule, tuple(data["seeds"]),
            data["seed"], data["checkpoint_every"])


def read_layout(directory: str | Path) -> dict[str, int]:
    """The layout the population was trained on (one device for a checkpoint without one)."""
    return json.loads((Path(directory) / META).read_text()).get(
        "layout", {"devices": 1, "processes": 1})


def save(directory: str | Path, done: int, carry: Any, outputs: list) -> None:
    """Write the carry after ``done`` segments and the outputs of those segments."""
    arrays = {"done": np.int64(done)}
    for i, x in enumerate(jax.tree.leaves(carry)):
        arrays[f"carry/{i}"] = np.asarray(jax.random.key_data(x) if is_key(x) else x)
    metrics, records = (jax.tree.map(lambda *xs: np.concatenate(xs), *parts)
                        for parts in zip(*outputs))
    arrays.update({f"metrics/{k}": v for k, v in metrics.items()})
    arrays.update({f"record/{k}": v for k, v in records.items()})
    path = Path(directory) / DATA
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load(directory: str | Path, template: Any) -> tuple[int, Any, list]:
    """``(segments done, carry, outputs)`` from ``directory``'s checkpoint, the carry shaped
    like ``template`` (abstract arrays)."""
    path = Path(directory) / DATA
    if not path.exists():
        raise CheckpointError(f"{directory} holds no checkpoint yet ({DATA}): start the run "
                              "again")
    with np.load(path) as data:
        leaves, treedef = jax.tree.flatten(template)
        restored = []
        for i, like in enumerate(leaves):
            value = data[f"carry/{i}"]
            if is_key(like):
                value = jax.random.wrap_key_data(value, impl=like.dtype._impl)
            elif value.shape != like.shape or value.dtype != like.dtype:
                raise CheckpointError(f"{path}: carry leaf {i} is {value.shape} {value.dtype}, "
                                      f"expected {like.shape} {like.dtype}")
            restored.append(value)
        metrics = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("metrics/")}
        record = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("record/")}
        done = int(data["done"])
    return done, jax.tree.unflatten(treedef, restored), [(metrics, record)]
