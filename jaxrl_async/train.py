"""The two ways to train: ``make_train(cfg)`` (a pure function to jit/vmap) and ``train(cfg)``
(the host-level convenience with a progress bar and sinks)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from jaxrl_async import logging as sinks
from jaxrl_async.config import to_dict
from jaxrl_async.runners import sync
from jaxrl_async.runners.common import TrainResult


def make_train(cfg: Any) -> Callable[[jax.Array], TrainResult]:
    """``train(key) -> TrainResult``: all of training as one pure function (sync runner)."""
    if cfg.runner.name != "sync":
        raise ValueError(
            f"{type(cfg).__name__}.runner: make_train builds a pure on-device function, which "
            "needs SyncConfig(...); use jra.train(cfg) for the async runner"
        )
    return sync.make_train(cfg)


def default_run_dir(cfg: Any, root: str = "runs") -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{cfg.name}_{cfg.env}_{cfg.runner.name}_{stamp}"


def _runner(cfg: Any):
    if cfg.runner.name == "sync":
        return sync.run
    from jaxrl_async.runners import async_

    return async_.run


def train(
    cfg: Any,
    seed: int = 0,
    *,
    run_dir: str | Path | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train ``cfg`` with its runner from ``seed``; returns what ``make_train`` returns, plus
    ``timing``. With ``run_dir``, writes ``config.json``, ``metrics.jsonl``,
    ``learning_curve.png`` and ``summary.json`` there (the main process only, in a
    distributed run)."""
    writers: list[Any] = []
    if jax.process_index() != 0:  # in a distributed run only the main process writes
        run_dir, progress = None, False
    if run_dir is not None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        sinks.write_json(run_dir / "config.json", {"seed": seed, **to_dict(cfg)})
        writers.append(sinks.JsonlSink(run_dir / "metrics.jsonl"))
    if progress:
        writers.append(sinks.ProgressBar(cfg.num_updates * cfg.steps_per_update,
                                         cfg.steps_per_update, desc=f"{cfg.name} {cfg.env}"))

    try:
        result = _runner(cfg)(cfg, jax.random.key(seed), sinks.Fanout(writers))
    finally:
        for writer in writers:
            writer.close()
    if run_dir is not None:
        sinks.plot_learning_curve(result.metrics, run_dir / "learning_curve.png",
                                  f"{cfg.name.upper()} on {cfg.env}")
        sinks.write_json(run_dir / "summary.json", summary(cfg, result))
    return result


def summary(cfg: Any, result: TrainResult) -> dict[str, Any]:
    """The figures printed at the end of a run."""
    timing = result.timing or {}
    return {
        "algo": cfg.name,
        "env": cfg.env,
        "runner": cfg.runner.name,
        "total_timesteps": cfg.num_updates * cfg.steps_per_update,
        "final_return": sinks.final_return(result.metrics),
        "sps": timing.get("sps"),
        "compile_s": timing.get("compile_s"),
        "train_s": timing.get("train_s"),
    }
