"""Hyperparameter sweeps in one compile: ``jra.sweep(cfg, grid={...}, seeds=4)``.

A config is a pytree whose leaves are exactly its ``hyper`` fields, so stacking many configs
(leaves with a leading axis) and ``vmap``-ing the sync runner's per-run program over that axis
trains them all in one compiled program; ``static`` fields (shapes, structure) cannot vary
inside it, so the runs are grouped by their static values, one program per group, and come
back as one ``SweepResult``. The configs × seeds runs are spread over all local devices
with ``jax.shard_map`` (``pmap``'s successor; padded to a multiple of the device count), each
device ``vmap``-ing its share.

Run ``(config c, seed s)`` uses ``jax.random.key(s)`` exactly like ``jra.train(cfg_c, seed=s)``
and ``jra.make_train(cfg_c)(jax.random.key(s))``, so every row can be reproduced alone (to float
tolerance: batched kernels may round differently), and all configs see the same seeds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxrl_async.config.fields import check_seed
from jaxrl_async.config.shared import hyper_fields, static_fields
from jaxrl_async.run.compile_cache import default_compile_cache
from jaxrl_async.run.sinks import format_return
from jaxrl_async.run.train import warn_partial_update
from jaxrl_async.runners import sync
from jaxrl_async.runners.common import (
    build,
    check_devices,
    compiler_options,
    with_evaluation,
    xla_option_probe,
)
from jaxrl_async.search.held_out import check_test_seeds, retrain
from jaxrl_async.search.points import (  # noqa: F401 - jra.Uniform etc., imported from here too
    LogUniform,
    Uniform,
    check_fields,
    check_sweepable,
    grid_points,
    sample_points,
)
from jaxrl_async.search.sweep_result import SweepResult

AXIS = "runs"


# --------------------------------------------------------------------------- the program
def _stack(configs: Sequence[Any]) -> Any:
    """One config whose hyper leaves carry a leading run axis: float32 for fields declared
    ``float`` (so ``ent_coef=[0, 1]`` traces like ``[0.0, 1.0]``), int32 for integers."""
    types = {f.name: str(f.type) for f in dataclasses.fields(configs[0])}

    def column(name: str) -> np.ndarray:
        x = np.asarray([getattr(c, name) for c in configs])
        if types[name] in ("float", "<class 'float'>") or x.dtype.kind == "f":
            return x.astype(np.float32)
        return x.astype(np.int32) if x.dtype.kind in "iu" else x

    leaves = [column(name) for name in hyper_fields(configs[0])]
    return jax.tree.unflatten(jax.tree.structure(configs[0]), leaves)


class _Progress:
    """Host side of the in-program progress report (one device callback per log chunk): steps
    done, SPS, and the best return so far (the highest mean return any run reported in an
    update; never goes down, whichever device reports last)."""

    active: _Progress | None = None
    lock = threading.Lock()

    def __init__(self, bar: Any, runs_per_device: list[int], steps_per_update: int,
                 offset: int = 0):
        self.bar, self.runs, self.spu, self.offset = bar, runs_per_device, steps_per_update, offset
        self.done = [0] * len(runs_per_device)
        self.best = -math.inf
        self.start = time.perf_counter()

    @staticmethod
    def tick(device: Any, update: Any, best: Any) -> None:
        with _Progress.lock:
            self = _Progress.active
            if self is None:
                return
            self.done[int(device)] = int(update)
            steps = sum(u * r for u, r in zip(self.done, self.runs)) * self.spu
            self.bar.update(max(self.offset + steps - self.bar.n, 0))
            sps = steps / max(time.perf_counter() - self.start, 1e-9)
            self.best = max(self.best, float(best)) if math.isfinite(best) else self.best
            shown = format_return(self.best) if math.isfinite(self.best) else "n/a"
            self.bar.set_postfix_str(f"SPS={sps:,.0f}, best return={shown}")


def vmap_runs(fn: Callable) -> Callable:
    """``jax.vmap(fn)`` over the runs' leading axis, or for one run ``fn`` on it unbatched (the
    axis given back): one run per device is then ``jra.train``'s program, which XLA:CPU ran
    1.1-1.25x faster than a vmap of one (docs/results.md)."""

    def call(*args: Any) -> Any:
        if jax.tree.leaves(args)[0].shape[0] > 1:
            return jax.vmap(fn)(*args)
        return jax.tree.map(lambda x: x[None], fn(*jax.tree.map(lambda x: x[0], args)))

    return call


def init_runs(cfgs: Any, seeds: jax.Array) -> Any:
    """The run states of stacked configs and seeds ``[R]``, as ``jra.train`` starts them."""
    return vmap_runs(lambda cfg, seed: sync.program(cfg).init(jax.random.key(seed)))(cfgs, seeds)


def step_runs(cfgs: Any, states: Any, i: jax.Array, *, num_devices: int, num_updates: int,
              log_every: int, progress: bool) -> tuple[Any, dict]:
    """Update ``i + 1`` (``i`` an unbatched counter) of every run ``[R]``: the sync runner's
    update, the evaluation due after it and the progress report (one callback per log chunk)."""

    def update(cfg, state):
        return sync.program(cfg).update(state)

    def evaluate(runs):  # (cfgs, states) -> eval metrics [R]
        return vmap_runs(lambda c, s: sync.program(c).evaluate(s))(*runs)

    states, metrics = vmap_runs(update)(cfgs, states)
    if cfgs.eval_every:  # the cond outside the vmap: only the updates due evaluate
        metrics = with_evaluation(cfgs, evaluate, (cfgs, states), metrics, i + 1)
    if progress:
        done = states.update[0]
        device = lax.axis_index(AXIS) if num_devices > 1 else 0
        best = jnp.nanmax(metrics["episode_return"])
        report = (done % log_every == 0) | (done == num_updates)
        lax.cond(report, lambda: jax.debug.callback(_Progress.tick, device, done, best),
                 lambda: None)
    return states, metrics


def final_params(cfgs: Any, states: Any) -> Any:
    """The policy params of every run ``[R]``."""
    return vmap_runs(lambda c, s: build(c)[1].policy_params(s))(cfgs, states.learner)


@functools.cache
def _program(num_devices: int, num_updates: int, log_every: int, progress: bool,
             options: tuple) -> Any:
    """The jitted sweep: stacked configs and seeds ``[R]`` -> (final params, metrics
    ``[R, num_updates]``). Cached, so repeating a sweep of the same shape does not recompile."""

    def runs(cfgs: Any, seeds: jax.Array):
        def body(states, i):
            return step_runs(cfgs, states, i, num_devices=num_devices, num_updates=num_updates,
                             log_every=log_every, progress=progress)

        states = init_runs(cfgs, seeds)
        states, metrics = lax.scan(body, states, jnp.arange(num_updates, dtype=jnp.int32))
        params = final_params(cfgs, states)
        return params, jax.tree.map(lambda m: jnp.swapaxes(m, 0, 1), metrics)

    if num_devices > 1:
        mesh = Mesh(np.array(jax.local_devices()[:num_devices]), (AXIS,))
        runs = jax.shard_map(runs, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                             check_vma=False)
    return jax.jit(runs, compiler_options=dict(options) or None)


def _wait(tree: Any) -> Any:
    """Block until ``tree`` is computed, in short sleeps, so Ctrl-C is not held off."""
    for leaf in jax.tree.leaves(tree):
        while not leaf.is_ready():
            time.sleep(0.02)
    return jax.device_get(tree)


# --------------------------------------------------------------------------- entry points
def sweep(
    cfg: Any,
    grid: Mapping[str, Sequence[Any]],
    seeds: int | Sequence[int] = 1,
    *,
    num_devices: int | None = None,
    test_seeds: int | Sequence[int] | None = None,
    progress: bool = True,
) -> SweepResult:
    """Train every point of ``grid`` (dict: field -> values) for every seed in ONE compiled
    program, spread over ``num_devices`` (default: all local devices). ``test_seeds``: the
    best config re-trained on them too (``result.test``, ``jra.test_on_seeds``).

        result = jra.sweep(cfg, grid={"lr": [1e-4, 3e-4, 1e-3], "ent_coef": [0.0, 0.01]},
                           seeds=4)
        result.best()["cfg"], result.to_csv("sweep.csv"), result.plot()
    """
    points = grid_points(grid)
    check_fields(cfg, list(grid))
    return with_test(run_points(cfg, points, seeds, num_devices=num_devices, progress=progress,
                                grid={k: list(v) for k, v in grid.items()},
                                test_seeds=test_seeds), test_seeds, progress)


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
) -> SweepResult:
    """Like ``sweep`` for ``num_samples`` points drawn from ``space`` (field ->
    ``jra.LogUniform(lo, hi)``, ``jra.Uniform(lo, hi)`` or a list), drawn with ``seed``."""
    check_fields(cfg, list(space))
    return with_test(run_points(cfg, sample_points(space, num_samples, seed), seeds,
                                num_devices=num_devices, progress=progress,
                                test_seeds=test_seeds), test_seeds, progress)


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
) -> SweepResult:
    """Train ``cfg`` updated with each of ``points`` for every seed: one compiled program per
    group of points that share their static fields' values (``test_seeds``: only checked
    here, against ``seeds``)."""
    if not points:
        raise ValueError("a sweep needs at least one point")
    fields = tuple(dict.fromkeys(k for p in points for k in p))
    check_fields(cfg, fields)
    check_runner(cfg)
    seeds = seed_list(seeds)
    if test_seeds is not None:
        check_test_seeds(test_seeds, seeds)
    configs = [dataclasses.replace(cfg, **p) for p in points]  # validates every point now
    warn_partial_update(cfg)
    statics = [f for f in fields if f in static_fields(cfg)]
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(tuple(repr(getattr(c, f)) for f in statics), []).append(i)
    if len(groups) == 1:
        return _run_group(cfg, configs, points, seeds, num_devices, progress, grid)
    # each group's own base: its static values (curves of more envs per update are shorter)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(c.num_updates * c.steps_per_update for c in configs) * len(seeds),
                   unit="step", unit_scale=True, dynamic_ncols=True, mininterval=0.5,
                   desc=f"sweep {len(configs)} configs x {len(seeds)} seeds, {len(groups)} "
                        f"static groups")
    try:
        parts = [(idx, _run_group(configs[idx[0]], [configs[i] for i in idx],
                                  [points[i] for i in idx], seeds, num_devices, progress, None,
                                  bar)) for idx in groups.values()]
    finally:
        if bar is not None:
            bar.close()
    return SweepResult.of_groups(cfg, list(points), parts, grid)


def _run_group(base: Any, configs: list, points: Sequence[Mapping[str, Any]], seeds: tuple,
               num_devices: int | None, progress: bool, grid: dict | None,
               shared_bar: Any = None) -> SweepResult:
    """The configs of one static group in one program (the result's base: ``base``);
    ``shared_bar``: the progress bar of all groups, counted on from where it stands."""
    cfg = configs[0]  # the group's static values: shapes, number of updates
    num_runs = len(configs) * len(seeds)
    devices = min(num_devices or jax.local_device_count(), num_runs)
    check_devices("num_devices", devices, cfg)
    padded = -(-num_runs // devices) * devices
    run_cfgs = [c for c in configs for _ in seeds]
    run_seeds = [s for _ in configs for s in seeds]
    run_cfgs += run_cfgs[-1:] * (padded - num_runs)  # padding: repeats of the last run
    run_seeds += run_seeds[-1:] * (padded - num_runs)
    stacked, seed_array = _stack(run_cfgs), np.asarray(run_seeds, np.int32)

    default_compile_cache()  # compiled programs kept across processes (compile_cache)
    program = _program(devices, cfg.num_updates, cfg.log_every, progress,
                       tuple(sorted(compiler_options(cfg).items())))
    bar = shared_bar
    if progress and bar is None:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_runs * cfg.num_updates * cfg.steps_per_update, unit="step",
                   unit_scale=True, dynamic_ncols=True, mininterval=0.5,
                   desc=f"sweep {len(configs)} configs x {len(seeds)} seeds (compiling)")
    try:
        start = time.perf_counter()
        compiled = program.lower(stacked, seed_array).compile()
        compile_s = time.perf_counter() - start
        if bar is not None:
            if shared_bar is None:
                bar.set_description(f"sweep {len(configs)} configs x {len(seeds)} seeds")
                bar.reset()  # rates and ETA count from here, not from the compile
            per_device = [padded // devices] * devices
            per_device[-1] -= padded - num_runs
            _Progress.active = _Progress(bar, per_device, cfg.steps_per_update, bar.n)
        start = time.perf_counter()
        params, metrics = _wait(compiled(stacked, seed_array))
        train_s = time.perf_counter() - start
    finally:
        _Progress.active = None
        if bar is not None and shared_bar is None:
            bar.close()

    def per_run(x: np.ndarray) -> np.ndarray:
        return np.asarray(x)[:num_runs].reshape(len(configs), len(seeds), *np.shape(x)[1:])

    steps = num_runs * cfg.num_updates * cfg.steps_per_update
    timing = {"compile_s": compile_s, "train_s": train_s, "sps": steps / max(train_s, 1e-9),
              "sps_per_run": steps / num_runs / max(train_s, 1e-9), "runs": num_runs,
              "devices": devices, "padded_runs": padded - num_runs}
    return SweepResult(
        base=base, fields=tuple(dict.fromkeys(k for p in points for k in p)),
        points=[dict(p) for p in points], configs=configs,
        seeds=seeds, curves={k: per_run(v) for k, v in metrics.items()},
        params=jax.tree.map(per_run, params), timing=timing, grid=grid,
    )


def use_cpu_cores() -> bool:
    """On a CPU, make one XLA device per core, so a sweep's runs spread over all cores (XLA:CPU
    runs one small program on one core; ``vmap`` alone does not use more). Call it right after
    ``import jax``, before anything runs; returns False (and changes nothing) when it is too
    late or ``XLA_FLAGS`` already sets a device count. Harmless on GPU/TPU machines."""
    import os

    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return False
    try:
        jax.config.update("jax_num_cpu_devices", os.cpu_count() or 1)
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
