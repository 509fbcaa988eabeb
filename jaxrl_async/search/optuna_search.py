"""Optuna's samplers over batches of vmapped trials: ``jra.optuna_search(cfg, space, trials=64,
batch=16)``.

Optuna run the usual way calls a trainer once per trial and pays a whole run per point. Here
each batch of ``batch`` trials (``study.ask()``; TPE, CMA-ES, random or any sampler Optuna has,
which sees the batch's running trials) trains as ONE program, vmapped over trials × seeds as
``jra.sweep`` trains its runs, in segments of ``report_every`` updates. After each segment
every trial reports its score (``trial.report``: the mean return of the episodes that ended in
the segment, over its seeds) and the study's pruner may stop it; at the end each trial is told
its final return (``study.tell``; ``SweepResult.final_return`` averaged over seeds). Shapes do
not change from batch to batch (a short last batch is padded), so the program compiles once
for the whole search; a static field in the space (``hidden_sizes``, ``num_envs``) makes one
program per static value within a batch.

The study lives in Optuna's own storage: in memory by default, ``"sqlite:///study.db"`` or any
SQLAlchemy URL (Optuna's ``RDBStorage``), or ``"journal:study.log"`` (``JournalFileBackend``).
Several processes or hosts may work on one study through it: ``trials`` is the number of
finished (complete or pruned) trials the study should hold, so the same call run again, after a
crash or in another process, goes on to the same total. With an RDB storage a trial asked but
never told (its process killed) is failed by Optuna's heartbeat after ``grace_s`` without one
and asked again with the same values (``RetryHeartbeatStaleTrialCallback``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxrl_async.config.shared import static_fields
from jaxrl_async.run.compile_cache import default_compile_cache
from jaxrl_async.runners.common import check_devices, compiler_options
from jaxrl_async.search.held_out import check_test_seeds
from jaxrl_async.search.optuna_study import (
    Heartbeat,
    distributions,
    fail_stale,
    finished,
    make_sampler,
    open_study,
    point_of,
    quiet,
    require_optuna,
)
from jaxrl_async.search.pbt import _check_int, _updates
from jaxrl_async.search.sweep import (
    AXIS,
    _stack,
    _wait,
    check_runner,
    final_params,
    init_runs,
    seed_list,
    with_test,
)
from jaxrl_async.search.sweep_result import SweepResult, _pad_front, quiet_nan


# --------------------------------------------------------------------------- one group
@functools.cache
def _programs(n: int, num_updates: int, log_every: int, options: tuple, devices: int) -> tuple:
    """``(init, segment, final)``, jitted and spread over ``devices`` local devices as a sweep
    is (``shard_map`` over the runs' axis, each device vmapping its share): ``segment(cfgs,
    states, first)`` is ``n`` updates of every run from ``first + 1`` (``first`` traced, so
    every segment of a length shares the compile)."""
    kw = dict(num_devices=devices, num_updates=num_updates, log_every=log_every,
              progress=False)

    def segment(cfgs: Any, states: Any, first: jax.Array) -> tuple[Any, dict]:
        return _updates(cfgs, states, first, n, kw)

    init, final = init_runs, final_params
    if devices > 1:
        mesh = Mesh(np.array(jax.local_devices()[:devices]), (AXIS,))
        runs = P(AXIS)
        init = jax.shard_map(init, mesh=mesh, in_specs=(runs, runs), out_specs=runs,
                             check_vma=False)
        segment = jax.shard_map(segment, mesh=mesh, in_specs=(runs, runs, P()),
                                out_specs=(runs, P(None, AXIS)), check_vma=False)
        final = jax.shard_map(final, mesh=mesh, in_specs=(runs, runs), out_specs=runs,
                              check_vma=False)
    opts = dict(options) or None
    return (jax.jit(init, compiler_options=opts), jax.jit(segment, compiler_options=opts),
            jax.jit(final, compiler_options=opts))


def segment_scores(metrics: dict, trials: int, seeds: int) -> np.ndarray:
    """``[trials]`` mean return of the episodes that ended in a segment (metrics ``[L, R]``),
    over each trial's seeds; NaN where none ended."""
    total = np.asarray(metrics["episode_return_sum"], np.float64).sum(0)[:trials * seeds]
    count = np.asarray(metrics["episodes"], np.float64).sum(0)[:trials * seeds]
    total, count = total.reshape(trials, seeds).sum(1), count.reshape(trials, seeds).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def train_group(study: Any, cfg: Any, trials: list, points: list[dict], seeds: tuple,
                pad_to: int, report_every: int, devices: int) -> tuple[dict, Any, list[int]]:
    """Train one static group's trials ``[T]`` × seeds as one vmapped program, segment by
    segment, reporting to the pruner; returns the curves ``[T, S, updates]`` (NaN after a
    trial's pruning), the final params and the update each trial stopped at."""
    from optuna.trial import TrialState


    configs = [dataclasses.replace(cfg, **p) for p in points]
    runs = len(configs) * len(seeds)
    devices = min(devices, max(pad_to, len(configs)) * len(seeds))
    padded = -(-max(pad_to, len(configs)) * len(seeds) // devices) * devices
    run_cfgs = [c for c in configs for _ in seeds]
    run_seeds = [s for _ in configs for s in seeds]
    run_cfgs += run_cfgs[-1:] * (padded - runs)  # padding: repeats of the last run, not told
    run_seeds += run_seeds[-1:] * (padded - runs)
    stacked, seed_array = _stack(run_cfgs), np.asarray(run_seeds, np.int32)
    options = tuple(sorted(compiler_options(cfg).items()))
    init, _, final = _programs(1, cfg.num_updates, cfg.log_every, options, devices)
    states = init(stacked, seed_array)
    stopped = [cfg.num_updates] * len(trials)
    alive = np.ones(len(trials), bool)
    chunks, first = [], 0
    while first < cfg.num_updates and alive.any():
        n = min(report_every, cfg.num_updates - first)
        segment = _programs(n, cfg.num_updates, cfg.log_every, options, devices)[1]
        states, metrics = segment(stacked, states, np.int32(first))
        metrics = _wait(metrics)
        chunks.append(metrics)
        first += n
        scores = segment_scores(metrics, len(trials), len(seeds))
        for t in np.flatnonzero(alive):
            if math.isfinite(scores[t]):
                trials[t].report(float(scores[t]), first)
            if first < cfg.num_updates and trials[t].should_prune():
                study.tell(trials[t], state=TrialState.PRUNED)
                alive[t], stopped[t] = False, first
    params = _wait(final(stacked, states))

    def per_trial(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)[:, :runs]  # [L, R] -> [T, S, L]
        return np.moveaxis(x, 0, -1).reshape(len(trials), len(seeds), x.shape[0])

    curves = {k: np.concatenate([per_trial(c[k]) for c in chunks], -1) for k in chunks[0]}
    curves = {k: _blank_after(_pad_updates(v, cfg.num_updates), stopped)
              for k, v in curves.items()}
    params = jax.tree.map(lambda x: np.asarray(x)[:runs].reshape(
        len(trials), len(seeds), *np.shape(x)[1:]), params)
    return curves, params, stopped


def stack_curves(curves: list[dict]) -> dict[str, np.ndarray]:
    """Each trial's curves ``[S, updates]`` as ``[T, S, updates]``; a static group with fewer
    updates (more envs per update) padded at the start, as a sweep's groups are."""
    length = max(c["env_steps"].shape[-1] for c in curves)
    return {k: np.stack([_pad_front(c[k], length, k) for c in curves]) for k in curves[0]}


def _pad_updates(x: np.ndarray, num_updates: int) -> np.ndarray:
    missing = num_updates - x.shape[-1]
    if missing <= 0:
        return x
    fill = np.full((*x.shape[:-1], missing), np.nan if x.dtype.kind == "f" else 0, x.dtype)
    return np.concatenate([x, fill], -1)


def _blank_after(x: np.ndarray, stopped: list[int]) -> np.ndarray:
    """The updates after a trial was pruned: NaN (a count: 0); its slot computed on."""
    x = x.astype(np.float64) if x.dtype.kind == "f" else x.copy()
    for t, at in enumerate(stopped):
        x[t, :, at:] = np.nan if x.dtype.kind == "f" else 0
    return x


# --------------------------------------------------------------------------- the search
@dataclasses.dataclass(frozen=True)
class OptunaResult(SweepResult):
    """A ``SweepResult`` of the trials this call trained (one config per trial, in the order
    they were asked; ``best()``, ``to_csv``, ``plot`` as a sweep's), with the study (all its
    trials, also other processes'), each trial's number and state, and ``test`` (the best
    config re-trained on the test seeds, ``jra.test_seeds``) when ``test_seeds`` was given."""

    study: Any = None
    numbers: tuple[int, ...] = ()
    states: tuple[str, ...] = ()  # "COMPLETE", "PRUNED" or "FAIL" (no episode ended)
    test: dict | None = None
    decode: dict | None = None  # a sampled value -> the field's (optuna_study.point_of)

    def best(self, metric: str = "final_return", maximize: bool = True) -> dict[str, Any]:
        """The study's best trial (this call's or any other's: the study is shared) by its
        told score, the final return averaged over seeds: its values, ``final_return``,
        ``trial`` and ``cfg``; other metrics: the best of this call's trials."""
        if metric != "final_return" or not maximize:
            return super().best(metric, maximize)
        if not any(t.value is not None for t in self.study.get_trials(deepcopy=False)):
            return super().best(metric, maximize)  # says why none is best
        trial = self.study.best_trial
        point = point_of(trial, self.decode or {})
        mine = self.numbers.index(trial.number) if trial.number in self.numbers else None
        return {"config": mine, **point, "final_return": float(trial.value),
                "trial": trial.number, "cfg": dataclasses.replace(self.base, **point)}


def optuna_search(
    cfg: Any,
    space: Mapping[str, Any],
    trials: int,
    batch: int = 16,
    seeds: int | Sequence[int] = 1,
    *,
    storage: str | None = None,
    study_name: str | None = None,
    study: Any = None,
    sampler: str | Any = "tpe",
    pruner: Any = None,
    report_every: int | None = None,
    seed: int = 0,
    test_seeds: int | Sequence[int] | None = None,
    heartbeat_s: int = 60,
    grace_s: int = 180,
    num_devices: int | None = None,
    progress: bool = True,
) -> OptunaResult:
    """Optuna's ``sampler`` (``"tpe"``, ``"cmaes"``, ``"random"``, ``"qmc"`` or an Optuna
    sampler) picks ``batch`` trials at a time from ``space``; each batch trains as one vmapped
    program over trials × ``seeds``, until the study holds ``trials`` finished trials.

        result = jra.optuna_search(cfg, {"lr": jra.LogUniform(1e-4, 3e-3)}, trials=64,
                                   batch=16, storage="sqlite:///tune.db", study_name="ppo")
        result.best()["cfg"], result.study.best_params

    ``pruner``: an Optuna pruner (``optuna.pruners.MedianPruner()``...), asked after every
    ``report_every`` updates (default: a tenth of the run); ``study``: an Optuna study to use
    instead of ``storage``/``study_name``/``sampler``/``pruner``; ``num_devices``: the local
    devices a batch's runs spread over (default: all). Every check runs before anything
    compiles."""
    from jaxrl_async.run.train import warn_partial_update

    optuna = require_optuna()
    check_runner(cfg)
    seeds = seed_list(seeds)
    _check_int("trials", trials)
    _check_int("batch", batch)
    _check_int("heartbeat_s", heartbeat_s)
    _check_int("grace_s", grace_s)
    devices = num_devices or jax.local_device_count()
    check_devices("num_devices", min(devices, batch * len(seeds)), cfg)
    report_every = -(-cfg.num_updates // 10) if report_every is None else report_every
    _check_int("report_every", report_every)
    test_seeds = check_test_seeds(test_seeds, seeds)
    dists, decode = distributions(cfg, space)
    statics = [n for n in dists if n in static_fields(cfg)]
    if pruner is not None and not isinstance(pruner, optuna.pruners.BasePruner):
        raise ValueError(f"pruner must be an Optuna pruner (optuna.pruners.MedianPruner(), ...), "
                         f"got {pruner!r}")
    if study is None:  # a bad sampler name fails before anything is opened
        study = open_study(storage, study_name, make_sampler(sampler, seed), pruner,
                           heartbeat_s, grace_s)
    warn_partial_update(cfg)
    default_compile_cache()
    heart = Heartbeat(study, heartbeat_s)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=trials, initial=min(finished(study), trials), unit="trial",
                   dynamic_ncols=True, desc=f"optuna {type(study.sampler).__name__}, batches "
                                            f"of {batch} x {len(seeds)} seeds")
    worker = f"{socket.gethostname()}:{os.getpid()}"  # who trained a trial, as the dashboard shows
    points, configs, curves, params, numbers, states = [], [], [], [], [], []
    start = time.perf_counter()
    try:
        while (left := trials - finished(study)) > 0:
            asked = []
            fail_stale(study, grace_s)  # killed workers' trials: asked again
            with quiet():
                for _ in range(min(batch, left)):
                    asked.append(study.ask(dists))
                    heart.watch(asked)  # at once: a trial with no heartbeat is never stale
                    asked[-1].set_user_attr("worker", worker)  # after it: fail_stale reads it
            groups: dict[tuple, list[int]] = {}
            for i, t in enumerate(asked):
                p = point_of(t, decode)
                groups.setdefault(tuple(repr(p[n]) for n in statics), []).append(i)
            for members in groups.values():
                found = [point_of(asked[i], decode) for i in members]
                base = dataclasses.replace(cfg, **{n: found[0][n] for n in statics})
                hyper = [{k: v for k, v in p.items() if k not in statics} for p in found]
                got, par, stopped = train_group(
                    study, base, [asked[i] for i in members], hyper, seeds,
                    batch if len(groups) == 1 else len(members), report_every, devices)
                group = SweepResult(base=base, fields=tuple(dists), points=found,
                                    configs=[dataclasses.replace(base, **h) for h in hyper],
                                    seeds=seeds, curves=got, params=par, timing={})
                for j, i in enumerate(members):
                    with quiet_nan():
                        value = float(np.nanmean(group.final_return[j]))
                    whole = stopped[j] == base.num_updates  # (num_envs changes the updates)
                    if whole and math.isfinite(value):
                        study.tell(asked[i], value)
                    elif whole:  # no episode ended: no score
                        asked[i].set_user_attr("no_episode", True)  # finished all the same
                        study.tell(asked[i], state=optuna.trial.TrialState.FAIL)
                    states.append("PRUNED" if not whole else
                                  "COMPLETE" if math.isfinite(value) else "FAIL")
                    numbers.append(asked[i].number)
                    points.append(found[j])
                    configs.append(group.configs[j])
                    curves.append({k: v[j] for k, v in got.items()})
                    params.append(jax.tree.map(lambda x, j=j: x[j], par))
                if bar is not None:
                    bar.update(len(members))
                    if any(s == "COMPLETE" for s in states):
                        bar.set_postfix_str(f"best={study.best_value:.4g}")
            heart.watch([])
    finally:
        heart.close()
        if bar is not None:
            bar.close()
    if not points:
        raise ValueError(f"the study already holds {finished(study)} finished trials, at "
                         f"least trials={trials}: ask for more trials to train more")
    train_s = time.perf_counter() - start
    steps = len(points) * len(seeds) * cfg.num_updates * cfg.steps_per_update
    same = len({jax.tree.structure(p) for p in params}) == 1 and len(
        {tuple(np.shape(x) for x in jax.tree.leaves(p)) for p in params}) == 1
    result = OptunaResult(
        base=cfg, fields=tuple(dists), points=points, configs=configs, seeds=seeds,
        curves=stack_curves(curves),
        params=jax.tree.map(lambda *x: np.stack(x), *params) if same else params,
        timing={"train_s": train_s, "sps": steps / max(train_s, 1e-9),
                "sps_per_run": steps / len(points) / len(seeds) / max(train_s, 1e-9),
                "runs": len(points) * len(seeds), "batches": -(-len(points) // batch)},
        study=study, numbers=tuple(numbers), states=tuple(states), decode=decode)
    return with_test(result, test_seeds, progress)
