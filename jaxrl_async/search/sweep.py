"""Hyperparameter sweeps in one compile: ``jra.sweep(cfg, grid={...}, seeds=4)``.

A config is a pytree whose leaves are exactly its ``hyper`` fields, so stacking many configs
(leaves with a leading axis) and ``vmap``-ing the sync runner's per-run program over that axis
trains them all in one compiled program (``sweep_program``); ``static`` fields (shapes,
structure) cannot vary inside it, so the runs are grouped by their static values, one program
per group, and come back as one ``SweepResult``. The configs × seeds runs are spread over all
devices, of every process under ``jax.distributed`` (``jax.shard_map``; padded to a multiple of
the device count), each device ``vmap``-ing its share; ``runs_per_chunk`` trains them a chunk
at a time through the same compiled program, and ``checkpoint_dir`` saves each finished chunk
(``sweep_chunks``; ``jra.resume_sweep`` continues).

Run ``(config c, seed s)`` uses ``jax.random.key(s)`` exactly like ``jra.train(cfg_c, seed=s)``
and ``jra.make_train(cfg_c)(jax.random.key(s))``, so every row can be reproduced alone (to float
tolerance: batched kernels may round differently), and all configs see the same seeds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async.config.fields import check_seed
from jaxrl_async.config.shared import static_fields
from jaxrl_async.run.compile_cache import default_compile_cache
from jaxrl_async.run.distributed import is_main_process
from jaxrl_async.run.train import warn_partial_update
from jaxrl_async.runners.common import compiler_options, xla_option_probe
from jaxrl_async.search import sweep_chunks as chunks
from jaxrl_async.search.held_out import check_test_seeds, retrain
from jaxrl_async.search.points import (  # noqa: F401 - jra.Uniform etc., imported from here too
    LogUniform,
    Uniform,
    check_fields,
    check_sweepable,
    grid_points,
    sample_points,
)
from jaxrl_async.search.sweep_program import (  # noqa: F401 - imported from here by pbt, optuna
    AXIS,
    _program,
    _Progress,
    _stack,
    _wait,
    fetch,
    final_params,
    init_runs,
    local_positions,
    local_runs,
    place,
    step_runs,
    vmap_runs,
    wait_local,
)
from jaxrl_async.search.sweep_result import SweepResult, speed


# --------------------------------------------------------------------------- entry points
def sweep(
    cfg: Any,
    grid: Mapping[str, Sequence[Any]],
    seeds: int | Sequence[int] = 1,
    *,
    num_devices: int | None = None,
    test_seeds: int | Sequence[int] | None = None,
    progress: bool = True,
    runs_per_chunk: int | None = None,
    checkpoint_dir: str | Path | None = None,
) -> SweepResult:
    """Train every point of ``grid`` (dict: field -> values) for every seed in ONE compiled
    program, spread over ``num_devices`` (default: all devices, of all processes under
    ``jax.distributed``). ``test_seeds``: the best config re-trained on them too
    (``result.test``, ``jra.test_on_seeds``). ``runs_per_chunk``: train that many runs at a
    time (rounded up to a multiple of the devices), each chunk a call of the same compiled
    program; ``checkpoint_dir``: save each finished chunk there, and skip the chunks found
    there (``jra.resume_sweep``).

        result = jra.sweep(cfg, grid={"lr": [1e-4, 3e-4, 1e-3], "ent_coef": [0.0, 0.01]},
                           seeds=4)
        result.best()["cfg"], result.to_csv("sweep.csv"), result.plot()
    """
    points = grid_points(grid)
    check_fields(cfg, list(grid))
    return with_test(run_points(cfg, points, seeds, num_devices=num_devices, progress=progress,
                                grid={k: list(v) for k, v in grid.items()},
                                test_seeds=test_seeds, runs_per_chunk=runs_per_chunk,
                                checkpoint_dir=checkpoint_dir), test_seeds, progress)


def random_search(
    cfg: Any,
    space: Mapping[str, Any],
    num_samples: int,
    seeds: int | Sequence[int] = 1,
    *,
    seed: int = 0,
    num_devices: int | None = None,
    test_seeds: int | Sequence[int] | None = None,
    progress: bool = True,
    runs_per_chunk: int | None = None,
    checkpoint_dir: str | Path | None = None,
) -> SweepResult:
    """Like ``sweep`` for ``num_samples`` points drawn from ``space`` (field ->
    ``jra.LogUniform(lo, hi)``, ``jra.Uniform(lo, hi)`` or a list), drawn with ``seed``."""
    check_fields(cfg, list(space))
    return with_test(run_points(cfg, sample_points(space, num_samples, seed), seeds,
                                num_devices=num_devices, progress=progress,
                                test_seeds=test_seeds, runs_per_chunk=runs_per_chunk,
                                checkpoint_dir=checkpoint_dir), test_seeds, progress)


def resume_sweep(checkpoint_dir: str | Path, *, num_devices: int | None = None,
                 progress: bool = True) -> SweepResult:
    """Continue the sweep (or random search) checkpointed in ``checkpoint_dir``: its saved
    chunks are loaded, the others trained; the result equals the sweep never stopped."""
    from jaxrl_async.algos import from_dict

    meta = chunks.read_meta(checkpoint_dir)
    if meta is None:
        raise ValueError(f"{checkpoint_dir} holds no sweep checkpoint: no {chunks.META}")
    cfg = from_dict(meta["base"])

    def typed(name: str, value: Any) -> Any:  # JSON lists back to tuple fields' tuples
        return tuple(value) if isinstance(getattr(cfg, name), tuple) else value

    points = [{k: typed(k, v) for k, v in p.items()} for p in meta["points"]]
    grid = meta["grid"] and {k: [typed(k, v) for v in vs] for k, vs in meta["grid"].items()}
    return with_test(run_points(cfg, points, meta["seeds"], num_devices=num_devices,
                                progress=progress, grid=grid,
                                test_seeds=meta["test_seeds"],
                                runs_per_chunk=meta["runs_per_chunk"],
                                checkpoint_dir=checkpoint_dir), meta["test_seeds"], progress)


def test_on_seeds(result: Any, test_seeds: int | Sequence[int], *,
                  progress: bool = True) -> dict:
    """The best config of a search's ``result`` re-trained from scratch on ``test_seeds`` (a
    count: that many seeds after the tuning seeds; a list: disjoint from them), one compiled
    program: ``{"tuning_score", "test_score", "test_std", "test_per_seed", ...}``
    (``held_out``; why: docs/sweeps.md)."""
    seeds = check_test_seeds(test_seeds, result.seeds)
    return retrain(result, seeds, run_points, progress=progress)


def with_test(result: Any, test_seeds: Any, progress: bool) -> Any:
    """``result`` with ``test`` (``test_on_seeds``) when ``test_seeds`` is given."""
    if test_seeds is None:
        return result
    return dataclasses.replace(result, test=test_on_seeds(result, test_seeds,
                                                          progress=progress))


def seed_list(seeds: int | Sequence[int]) -> tuple[int, ...]:
    """``seeds`` as a tuple: a count ``n`` is the seeds ``0 .. n-1``; ``ValueError`` naming
    anything else than a positive count or a non-empty list of valid seeds."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        if not 1 <= seeds <= 2**31:
            raise ValueError(f"seeds must be a positive count (the seeds 0, 1, ...) or a "
                             f"non-empty list of seeds, got {seeds}")
        return tuple(range(seeds))
    if isinstance(seeds, (bool, str)) or not isinstance(seeds, (Sequence, np.ndarray)) or \
            not len(seeds):
        raise ValueError(f"seeds must be a positive count or a non-empty list of seeds, "
                         f"got {seeds!r}")
    return tuple(check_seed(s, "each of seeds") for s in seeds)


def check_runner(cfg: Any) -> None:
    """``ValueError`` unless ``cfg`` trains on the sync runner on one device (a sweep spreads
    whole runs over the devices)."""
    if cfg.runner.name != "sync" or cfg.runner.num_devices != 1:
        raise ValueError(f"{type(cfg).__name__}.runner: a sweep spreads whole runs over the "
                         "devices, one device per run; use runner=SyncConfig(num_devices=1)")


def run_points(
    cfg: Any,
    points: Sequence[Mapping[str, Any]],
    seeds: int | Sequence[int] = 1,
    *,
    num_devices: int | None = None,
    progress: bool = True,
    grid: dict[str, list] | None = None,
    test_seeds: Any = None,
    runs_per_chunk: int | None = None,
    checkpoint_dir: str | Path | None = None,
) -> SweepResult:
    """Train ``cfg`` updated with each of ``points`` for every seed: one compiled program per
    group of points that share their static fields' values (``test_seeds``: only checked
    here, against ``seeds``, and recorded in a checkpoint)."""
    if not points:
        raise ValueError("a sweep needs at least one point")
    fields = tuple(dict.fromkeys(k for p in points for k in p))
    check_fields(cfg, fields)
    check_runner(cfg)
    seeds = seed_list(seeds)
    if test_seeds is not None:
        check_test_seeds(test_seeds, seeds)
    chunks.check_runs_per_chunk(runs_per_chunk)
    configs = [dataclasses.replace(cfg, **p) for p in points]  # validates every point now
    statics = [f for f in fields if f in static_fields(cfg)]
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(tuple(repr(getattr(c, f)) for f in statics), []).append(i)
    layouts = [chunks.plan(len(idx) * len(seeds), num_devices, runs_per_chunk, configs[idx[0]])
               for idx in groups.values()]
    done: list[dict] = [{} for _ in layouts]
    if checkpoint_dir is not None:  # the same sweep or none, before anything compiles
        chunks.start(checkpoint_dir, chunks.meta_of(cfg, points, seeds, grid, runs_per_chunk,
                                                    layouts, test_seeds))
        done = [chunks.load_done(checkpoint_dir, g, lay) for g, lay in enumerate(layouts)]
        chunks.agree(done, layouts, checkpoint_dir)
    warn_partial_update(cfg)
    if len(groups) == 1:
        return _run_group(cfg, configs, points, seeds, layouts[0], progress, grid,
                          store=(checkpoint_dir, 0, done[0]))
    # each group's own base: its static values (curves of more envs per update are shorter)
    firsts = [configs[idx[0]] for idx in groups.values()]
    bar = _bar(sum(chunks.local_steps(lay, local_positions(lay.devices),
                                      c.num_updates * c.steps_per_update)
                   for lay, c in zip(layouts, firsts)),
               f"sweep {len(configs)} configs x {len(seeds)} seeds, {len(groups)} static groups",
               progress)
    try:
        parts = [(idx, _run_group(configs[idx[0]], [configs[i] for i in idx],
                                  [points[i] for i in idx], seeds, lay, progress, None,
                                  bar, (checkpoint_dir, g, done[g])))
                 for g, (idx, lay) in enumerate(zip(groups.values(), layouts))]
    finally:
        if bar is not None:
            bar.close()
    return SweepResult.of_groups(cfg, list(points), parts, grid)


def _bar(total: int, desc: str, progress: bool) -> Any:
    """A progress bar over ``total`` steps, in process 0 only (which counts its own devices'
    runs); ``None`` without ``progress``."""
    if not progress or not is_main_process():
        return None
    from tqdm.auto import tqdm

    if jax.process_count() > 1:
        desc += f" (process 0's {jax.local_device_count()} of {jax.device_count()} devices)"
    return tqdm(total=total, unit="step", unit_scale=True, dynamic_ncols=True,
                mininterval=0.5, desc=desc)


def _run_group(base: Any, configs: list, points: Sequence[Mapping[str, Any]], seeds: tuple,
               layout: chunks.Layout, progress: bool, grid: dict | None,
               shared_bar: Any = None, store: tuple = (None, 0, {})) -> SweepResult:
    """The configs of one static group in one program, a call per chunk of ``layout`` (the
    result's base: ``base``); ``shared_bar``: the progress bar of all groups, counted on from
    where it stands; ``store``: (checkpoint_dir or None, group index, chunks already saved)."""
    cfg = configs[0]  # the group's static values: shapes, number of updates
    directory, group, done = store
    num_runs, devices, size = layout.runs, layout.devices, layout.chunk
    run_cfgs = [c for c in configs for _ in seeds]
    run_seeds = [s for _ in configs for s in seeds]
    run_cfgs += run_cfgs[-1:] * (layout.padded - num_runs)  # padding: repeats of the last run
    run_seeds += run_seeds[-1:] * (layout.padded - num_runs)
    stacked, seed_array = _stack(run_cfgs), np.asarray(run_seeds, np.int32)

    def inputs(k: int) -> tuple:  # chunk k, split over the devices of every process
        return place(jax.tree.map(lambda x: x[k * size:(k + 1) * size], (stacked, seed_array)),
                     devices)

    default_compile_cache()  # compiled programs kept across processes (compile_cache)
    program = _program(devices, cfg.num_updates, cfg.log_every, progress,
                       tuple(sorted(compiler_options(cfg).items())))
    steps_per_run = cfg.num_updates * cfg.steps_per_update
    mine, todo = local_positions(devices), [k for k in range(layout.chunks) if k not in done]
    bar = shared_bar or _bar(chunks.local_steps(layout, mine, steps_per_run),
                             f"sweep {len(configs)} configs x {len(seeds)} seeds (compiling)",
                             progress)
    outs, compile_s, train_s, gather_s, trained = [], 0.0, 0.0, 0.0, 0
    try:
        start = time.perf_counter()
        lowered = program.lower(*inputs(0))
        compiled = lowered.compile() if todo else None
        compile_s = time.perf_counter() - start
        if bar is not None and shared_bar is None:
            bar.set_description(f"sweep {len(configs)} configs x {len(seeds)} seeds")
            bar.reset()  # rates and ETA count from here, not from the compile
        for k in range(layout.chunks):
            if k in done:  # saved by an earlier start: loaded, not trained
                outs.append(chunks.unpack(done[k], jax.tree.structure(lowered.out_info[0])))
                if bar is not None:
                    bar.update(chunks.local_steps(layout, mine, steps_per_run, [k]))
                continue
            if bar is not None:
                _Progress.active = _Progress(bar, layout.per_device(k), cfg.steps_per_update,
                                             bar.n)
            start = time.perf_counter()
            out = compiled(*inputs(k))
            trained += local_runs(out)
            wait_local(out)  # this process's share trained
            chunk_s = time.perf_counter() - start
            train_s += chunk_s
            start = time.perf_counter()
            outs.append(fetch(out))  # every process's shares, in every process
            gather_s += time.perf_counter() - start
            _Progress.active = None
            if directory is not None:
                chunks.save_chunk(directory, group, k, layout, outs[-1], chunk_s)
    finally:
        _Progress.active = None
        if bar is not None and shared_bar is None:
            bar.close()
    params, metrics = jax.tree.map(lambda *xs: np.concatenate(xs), *outs)

    def per_run(x: np.ndarray) -> np.ndarray:
        return np.asarray(x)[:num_runs].reshape(len(configs), len(seeds), *np.shape(x)[1:])

    # the speed over every chunk, each at the time it trained (a resumed chunk: when saved)
    all_s = train_s + sum(chunks.saved_train_s(done[k]) for k in done)
    steps = num_runs * steps_per_run
    timing = {"compile_s": compile_s, "train_s": train_s, "gather_s": gather_s,
              **speed(steps, all_s, num_runs), "runs": num_runs,
              "devices": devices, "padded_runs": layout.padded - num_runs,
              "processes": jax.process_count(), "local_runs": trained,
              "chunks": layout.chunks, "chunk_runs": size, "resumed_chunks": len(done)}
    return SweepResult(
        base=base, fields=tuple(dict.fromkeys(k for p in points for k in p)),
        points=[dict(p) for p in points], configs=configs,
        seeds=seeds, curves={k: per_run(v) for k, v in metrics.items()},
        params=jax.tree.map(per_run, params), timing=timing, grid=grid,
    )


def use_cpu_cores() -> bool:
    """On a CPU, make one XLA device per core this process may run on (``taskset``), so a
    sweep's runs spread over all cores (XLA:CPU runs one small program on one core; ``vmap``
    alone does not use more). Call it right after
    ``import jax``, before anything runs; returns False (and changes nothing) when it is too
    late or ``XLA_FLAGS`` already sets a device count. Harmless on GPU/TPU machines."""
    import os

    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return False
    try:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        jax.config.update("jax_num_cpu_devices", cores or os.cpu_count() or 1)
    except RuntimeError:  # the backends have started
        return False
    return True


@contextlib.contextmanager
def count_compiles() -> Iterator[list[str]]:
    """Collect the names of the XLA programs compiled inside the block (via
    ``jax.monitoring``), e.g. ``with count_compiles() as names: ...; len(names)``; the one-op
    probe of an XLA option (``xla_option_known``) is not counted."""
    names: list[str] = []
    probe = f"jit({xla_option_probe.__name__})"

    def listener(event: str, duration: float, **kwargs: Any) -> None:
        name = str(kwargs.get("fun_name", "?"))
        if event == "/jax/core/compile/backend_compile_duration" and name != probe:
            names.append(name)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
