"""The two ways to train: ``make_train(cfg)`` (a pure function to jit/vmap) and ``train(cfg)``
(the host-level convenience: progress bar, run directory, checkpoints, resume)."""

from __future__ import annotations

import datetime
import json
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async import runners
from jaxrl_async.algos import from_dict
from jaxrl_async.config.fields import check_seed
from jaxrl_async.config.shared import to_dict
from jaxrl_async.envs import env_spec
from jaxrl_async.run import checkpoint, compile_cache, config_files, sinks
from jaxrl_async.run.checkpoint import CheckpointError
from jaxrl_async.run.distributed import broadcast_text
from jaxrl_async.runners import sync
from jaxrl_async.runners.state import (
    Callbacks,
    StopOnInterrupt,
    TrainingDiverged,
    TrainingInterrupted,
    TrainResult,
)


def make_train(cfg: Any) -> Callable[[jax.Array], TrainResult]:
    """``train(key) -> TrainResult``: all of training as one pure function (sync runner)."""
    if cfg.runner.name != "sync":
        raise ValueError(
            f"{type(cfg).__name__}.runner: make_train builds a pure on-device function, which "
            "needs SyncConfig(...); use jra.train(cfg) for the async runner"
        )
    warn_partial_update(cfg)
    return sync.make_train(cfg)


class PartialUpdateWarning(UserWarning):
    """``total_timesteps`` is not a whole number of updates: the remainder is not trained."""


def partial_update_note(cfg: Any) -> str | None:
    """What is trained of a budget that is not a whole number of updates (``None`` if it is)."""
    spu, total = cfg.steps_per_update, cfg.total_timesteps
    if not total % spu:
        return None
    n, trained = cfg.num_updates, cfg.num_updates * spu
    return (f"{type(cfg).__name__}.total_timesteps={total:,} is not a whole number of updates of "
            f"num_envs * num_steps = {spu:,} steps: training {n:,} update{'s' * (n != 1)} = "
            f"{trained:,} steps (whole budgets nearby: {trained:,} or {trained + spu:,})")


def warn_partial_update(cfg: Any) -> None:
    """Warn (a ``PartialUpdateWarning``, once per config and place) when ``total_timesteps`` is
    not a whole number of updates: the remainder is not trained, and the warning says what is.
    The command line prints it as one note instead."""
    note = partial_update_note(cfg)
    if note:
        warnings.warn(note, PartialUpdateWarning, stacklevel=3)


def no_episode_note(cfg: Any, whole_run: bool = False) -> str:
    """Why a return is NaN: no episode ended in the final return's window
    (``sinks.final_window``; ``whole_run``: in the run); with the steps each env took, and an
    episode's time limit where the env knows it."""
    window = cfg.num_updates if whole_run else sinks.final_window(cfg)
    steps = cfg.num_updates * cfg.num_steps
    note = (f"no episode ended in the run (each env took {steps:,} steps)"
            if window == cfg.num_updates else
            f"no episode ended in the last {window} updates (each env took "
            f"{window * cfg.num_steps:,} steps in them, {steps:,} in all)")
    limit = env_spec(cfg.env).max_episode_steps
    if limit:
        note += f"; a {cfg.env} episode ends by its time limit of {limit:,} steps, or earlier"
    return note + ": train for longer (total_timesteps)"


def default_run_dir(cfg: Any, root: str = "runs") -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{cfg.name}_{cfg.env}_{cfg.runner.name}_{stamp}"


def load_config(run_dir: str | Path) -> Any:
    """The config a run directory was trained with (from its ``config.json``), or the one a
    YAML or JSON config file or a preset describes (``config_files``; a run's ``config.json``
    is one; ``load_config("pendulum_ppo")``)."""
    if not Path(run_dir).is_dir() and (Path(run_dir).suffix in config_files.SUFFIXES
                                       or config_files.is_preset(run_dir)):
        return config_files.load_config_file(run_dir)[0]
    path = Path(run_dir) / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{run_dir} is not a run directory: it has no config.json") from None
    except OSError as e:
        raise CheckpointError(f"{run_dir} is not a run directory: {e}") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path} cannot be read: {e}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} does not hold a config: a JSON object with '_type' "
                              f"expected, got {type(data).__name__}")
    if config_files.is_sweep_file(data):
        raise CheckpointError(config_files.sweep_note(run_dir))
    try:
        return from_dict(data, ignore=("seed",))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path} does not hold a valid config: {e}") from None


def train(
    cfg: Any = None,
    seed: int = 0,
    *,
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    extend: bool = False,
    progress: bool = True,
    callbacks: Sequence[Callbacks] = (),
) -> TrainResult:
    """Train ``cfg`` with its runner from ``seed``; returns what ``make_train`` returns, plus
    ``timing``.

    With ``run_dir``, writes there ``config.json``, ``metrics.jsonl``, ``metrics.csv``,
    TensorBoard events (``cfg.tensorboard``), checkpoints (every ``cfg.checkpoint_every``
    updates and at the end), ``learning_curve.png`` and ``summary.json``. In a multi-process
    run the main process's ``run_dir`` and ``resume`` count (the others' are ignored); the
    main process writes the files, and every process writes its part of each checkpoint there
    (a file system all hosts share).

    ``resume=RUN_DIR`` continues that run from its newest checkpoint, in that directory
    (``cfg`` defaults to the run's own; only its ``io_fields`` and ``total_timesteps`` may
    differ). The result, files and final state are those of the same run uninterrupted. A
    larger ``total_timesteps`` trains the run for longer; where the config plans a schedule
    over the budget (``cfg.budget_schedules()``: learning-rate annealing, epsilon decay) it
    needs ``extend=True``, which re-plans them over the new budget. Every resume failure (a
    missing, corrupt or incompatible checkpoint or config) raises ``CheckpointError`` before
    any file is changed.

    Ctrl-C or SIGTERM (a scheduler's preemption notice), at any time in the run, finishes the
    chunk in flight, writes a final checkpoint (with ``run_dir``) and raises
    ``TrainingInterrupted`` (a ``KeyboardInterrupt``) holding the partial result, its
    ``signal`` saying which. In a multi-process run a signal to any process stops every
    process after the same update, and they write one checkpoint together. A multi-process run
    resumes on the process x device layout that wrote it (``CheckpointError`` otherwise).

    A NaN or inf in an update's loss metrics, params or optimizer state stops the run at the
    end of that log chunk with ``TrainingDiverged`` (the update, what went non-finite, the
    partial result, ``run_dir`` and the newest checkpoint, all from before the divergence: the
    diverged state is never saved).
    """
    check_seed(seed)
    # Signals from here to the last checkpoint write stop the run cleanly (the runner's own
    # StopOnInterrupt is this one): one that comes while it restores or compiles stops it
    # after its first chunk.
    with StopOnInterrupt():
        return _train(cfg, seed, run_dir, resume, extend, progress, callbacks)


def _train(cfg: Any, seed: int, run_dir: str | Path | None, resume: str | Path | None,
           extend: bool, progress: bool, callbacks: Sequence[Callbacks]) -> TrainResult:
    resume, run_dir = _main_process_dirs(resume, run_dir)
    state, earlier = None, {}
    if resume is not None:
        saved = load_config(resume)
        cfg = saved if cfg is None else cfg
        if type(saved) is not type(cfg):
            raise CheckpointError(f"{resume / 'config.json'} is a {saved.name} run "
                                  f"({type(saved).__name__}); it cannot be resumed as "
                                  f"{cfg.name} ({type(cfg).__name__})")
        checkpoint.check_resume(resume, saved, cfg, extend)
        if run_dir is not None and Path(run_dir).resolve() != resume.resolve():
            raise CheckpointError(f"a resumed run writes to its own directory {resume}, "
                                  f"not {run_dir}")
        run_dir = resume
        state = checkpoint.restore(resume, cfg, budget_may_differ=True,  # writes nothing
                                   same_layout=True)
        seed = json.loads((resume / "config.json").read_text()).get("seed", seed)
        done = int(state.update)  # at most cfg.num_updates (check_resume)
        earlier = sinks.read_metrics(resume / "metrics.jsonl", up_to=done)
        if jax.process_index() == 0:
            sinks.truncate_metrics(resume, done)
    elif cfg is None:
        raise ValueError("train() needs a config, or resume=RUN_DIR")

    warn_partial_update(cfg)
    compile_cache.default_compile_cache()  # compiled programs kept across processes
    writers: list[Any] = []
    checkpoints_to = run_dir  # every process writes its part of each checkpoint
    if jax.process_index() != 0:  # in a distributed run only the main process writes files
        run_dir, progress = None, False
    if run_dir is not None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        sinks.write_json(run_dir / "config.json", {"seed": seed, **to_dict(cfg)})
        writers += [sinks.JsonlSink(run_dir / "metrics.jsonl"),
                    sinks.CsvSink(run_dir / "metrics.csv")]
        if cfg.tensorboard:
            writers.append(sinks.TensorBoardSink(run_dir / "tensorboard"))
    if checkpoints_to is not None:
        writers.append(checkpoint.CheckpointSink(checkpoints_to, cfg))
    if progress:
        writers.append(sinks.ProgressBar(cfg.num_updates * cfg.steps_per_update,
                                         cfg.steps_per_update, desc=f"{cfg.name} {cfg.env}"))
    writers += list(callbacks)
    fanout = sinks.Fanout(writers)

    interrupted = diverged = None
    try:
        fanout.on_run(cfg, seed, run_dir)
        try:
            result = runners.run(cfg, jax.random.key(seed), fanout, state=state)
        except TrainingInterrupted as e:
            interrupted, result = e, e.result
        except TrainingDiverged as e:  # no checkpoint of the diverged state was written
            diverged, result = e, e.result
        result = result._replace(metrics=_concat(earlier, result.metrics))
        if run_dir is not None and result.metrics:
            sinks.plot_learning_curve(result.metrics, run_dir / "learning_curve.png",
                                      f"{cfg.title} on {cfg.env}")
            sinks.write_json(run_dir / "summary.json",
                             {**summary(cfg, result), "interrupted": interrupted is not None,
                              "diverged": None if diverged is None else
                              {"update": diverged.update, "metric": diverged.what}})
        fanout.on_end(result, run_dir)
    finally:
        fanout.close()  # waits for checkpoint writes, also when interrupted or failed
    if interrupted is not None:
        raise TrainingInterrupted(result, interrupted.signal) from None
    if diverged is not None:
        diverged.result = result
        if run_dir is not None:
            diverged.run_dir = run_dir
            finite = [s for s in checkpoint.steps(run_dir) if s < diverged.update]
            diverged.last_checkpoint = finite[-1] if finite else None
        raise diverged
    return result


def _main_process_dirs(resume: str | Path | None, run_dir: str | Path | None
                       ) -> tuple[Path | None, str | Path | None]:
    """(resume, run_dir): the main process's, in every process of a multi-process run (each
    process writes its part of a checkpoint there; they may have been handed other paths, e.g.
    a default run directory stamped with another second). ``ValueError`` in every process when
    the main process's ``run_dir`` already holds a run (only it looks: the others may see what
    it writes on a shared disk)."""
    refusal = None
    if (resume is None and run_dir is not None and jax.process_index() == 0
            and _holds_a_run(Path(run_dir))):
        refusal = (f"{run_dir} already holds a run; continue it with resume={str(run_dir)!r} "
                   "or choose another run directory")
    if jax.process_count() > 1:
        text = json.dumps([None if x is None else str(x) for x in (resume, run_dir)]
                          + [refusal])
        resume, run_dir, refusal = json.loads(broadcast_text(text))
    if refusal:
        raise ValueError(refusal)
    return (None if resume is None else Path(resume)), run_dir


def _holds_a_run(run_dir: Path) -> bool:
    return (run_dir / "metrics.jsonl").exists() or bool(checkpoint.steps(run_dir))


def _concat(earlier: dict[str, np.ndarray], later: dict[str, np.ndarray]) -> dict:
    if not earlier:
        return later
    if not later:
        return earlier
    return {k: np.concatenate([earlier[k].astype(v.dtype), v]) if k in earlier else v
            for k, v in later.items()}


def collected_steps(cfg: Any, result: TrainResult) -> dict[str, int]:
    """An async run's env steps collected, trained on, dropped (staler than
    ``max_staleness``, the free-running schedule) and left queued or in flight at the end;
    ``{}`` for the sync runner (it trains on every step it collects)."""
    timing = result.timing or {}
    if "env_steps_collected" not in timing:
        return {}
    collected, trained = int(timing["env_steps_collected"]), int(timing["env_steps_trained"])
    batches = result.metrics.get("dropped_batches")
    per_batch = cfg.num_envs // cfg.runner.num_streams * cfg.num_steps
    dropped = int(batches[-1]) * per_batch if batches is not None and len(batches) else 0
    return {"env_steps_collected": collected, "env_steps_trained": trained,
            "env_steps_dropped": dropped,
            "env_steps_queued": max(collected - trained - dropped, 0)}


def summary(cfg: Any, result: TrainResult) -> dict[str, Any]:
    """The figures printed at the end of a run."""
    timing = result.timing or {}
    return {
        "algo": cfg.name,
        "env": cfg.env,
        "runner": cfg.runner.name,
        "total_timesteps": cfg.num_updates * cfg.steps_per_update,  # trained: whole updates
        "total_timesteps_requested": cfg.total_timesteps,  # the config's (config.json's)
        "updates_done": int(result.state.update),
        "final_return": sinks.final_return(result.metrics, sinks.final_window(cfg)),
        "final_return_updates": sinks.final_window(cfg),  # the updates it averages over
        "final_eval_return": sinks.last_eval_return(result.metrics),  # eval_every; else NaN (null)
        "sps": timing.get("sps"),  # env steps trained on per second
        "sps_collected": timing.get("sps_collected"),  # async: env steps collected per second
        **collected_steps(cfg, result),
        "compile_s": timing.get("compile_s"),
        "train_s": timing.get("train_s"),
    }
