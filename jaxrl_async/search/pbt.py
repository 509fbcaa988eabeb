"""Search that spends the budget on what works, inside the compiled sweep: population-based
training (``jra.pbt``) and successive halving (``jra.successive_halving``).

A population is ``population`` members (configs drawn from ``space`` as ``jra.random_search``
draws them) for each of ``seeds``; all of them train together, ``vmap``-ed exactly as
``jra.sweep`` trains its runs (the same init and update, ``sweep.init_runs``/``step_runs``).
Training goes in *segments* of updates; after a segment, inside the program, each population
ranks its members by score (the mean return of the episodes that ended in the segment, or the
last evaluation in it) and the losers continue from a winner's learner state (params,
optimizer state, observation statistics), with new random keys (``exploit.py``):

- PBT: every ``ready_every`` updates the bottom ``fraction`` copies a member drawn from the top
  ``fraction`` and perturbs its hyperparameters (×``factor`` or ÷``factor``, or a fresh draw
  with probability ``resample_prob``), within the space's bounds.
- Successive halving: at rung ``j`` (after ``T / eta**(rungs-1-j)`` updates) the top
  ``population / eta**(j+1)`` members survive and the freed slots become copies of them (round
  robin): the budget goes to the survivors, with no new compile.

Shapes never change, so one compile serves the whole run; the host is not involved between
segments (unless ``checkpoint_every`` asks for checkpoints). The members of a population share
the seed, as the configs of a sweep do, and with no exploit the program is ``jra.sweep``'s: a
PBT run whose ``ready_every`` is longer than the run equals ``jra.random_search``.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_async.config.shared import hyper_fields
from jaxrl_async.run.compile_cache import default_compile_cache
from jaxrl_async.runners.common import compiler_options, with_moments
from jaxrl_async.search import exploit
from jaxrl_async.search import population_checkpoint as ckpt
from jaxrl_async.search.population import Schedule, Space
from jaxrl_async.search.population_result import PopulationResult
from jaxrl_async.search.sweep import _Progress, _stack, _wait, final_params, init_runs, step_runs

SCORES = ("return", "eval")


def pbt_schedule(cfg: Any, population: int, ready_every: int, fraction: float = 0.25,
                 resample_prob: float = 0.25, factor: float = 1.2,
                 score: str = "return") -> Schedule:
    """PBT's schedule: segments of ``ready_every`` updates, each but the last ending with an
    exploit step replacing the bottom ``fraction``; ``ValueError`` naming bad arguments."""
    _check_common(cfg, population, score)
    _check_int("ready_every", ready_every)
    if not 0 < fraction <= 0.5:
        raise ValueError(f"fraction must be in (0, 0.5] (the bottom fraction copies the top "
                         f"fraction), got {fraction!r}")
    if not 0 <= resample_prob <= 1:
        raise ValueError(f"resample_prob must be in [0, 1], got {resample_prob!r}")
    if not factor > 1:
        raise ValueError(f"factor must be > 1 (a perturbation multiplies or divides by it), "
                         f"got {factor!r}")
    full, rest = divmod(cfg.num_updates, ready_every)
    plan = Schedule("pbt", population, ready_every, (), rest, float(fraction),
                    float(resample_prob), float(factor), score)
    replaced = plan.replaced if population >= 2 else 0
    return dataclasses.replace(plan, keeps=tuple(
        population if (k == full - 1 and rest == 0) else population - replaced
        for k in range(full)))


def halving_schedule(cfg: Any, population: int, eta: int = 2, rungs: int = 3,
                     score: str = "return") -> Schedule:
    """Successive halving's schedule: ``eta**(rungs-1)`` segments, a cut after segments
    ``eta**j - 1`` (``j < rungs - 1``) keeping ``population // eta**(j+1)``; ``ValueError``
    naming bad arguments."""
    _check_common(cfg, population, score)
    _check_int("eta", eta, 2)
    _check_int("rungs", rungs)
    segments = eta ** (rungs - 1)
    if population < segments:
        raise ValueError(f"population must be at least eta**(rungs-1) = {segments} (one "
                         f"member survives the last rung), got {population}")
    if cfg.num_updates < segments:
        raise ValueError(f"rungs={rungs}, eta={eta}: the run has {cfg.num_updates} updates, "
                         f"fewer than eta**(rungs-1) = {segments}; lower rungs or eta")
    unit, rest = divmod(cfg.num_updates, segments)
    ends = {eta**j - 1: max(1, population // eta ** (j + 1)) for j in range(rungs - 1)}
    keeps = tuple(ends.get(k, population) for k in range(segments))
    return Schedule("halving", population, unit, keeps, rest, score=score)


def _check_int(name: str, value: Any, least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


def _check_common(cfg: Any, population: int, score: str) -> None:
    _check_int("population", population)
    if score not in SCORES:
        raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
    if score == "eval" and not cfg.eval_every:
        raise ValueError("score='eval' ranks by the in-training evaluation: set eval_every")


# --------------------------------------------------------------------------- in the program
def _scores(schedule: Schedule, metrics: dict) -> jax.Array:
    """``[R]`` score of each run from one segment's metrics ``[L, R]``."""
    if schedule.score == "eval":
        values = metrics["eval_return"]
        finite = jnp.isfinite(values)
        last = values.shape[0] - 1 - jnp.argmax(finite[::-1], axis=0)
        return jnp.where(finite.any(0), jnp.take_along_axis(values, last[None], 0)[0], jnp.nan)
    total = metrics["episode_return_sum"].sum(0)
    count = metrics["episodes"].sum(0)
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def _exploit(schedule: Schedule, space: Space, key: jax.Array, k: jax.Array, keep: jax.Array,
             halving: jax.Array, cfgs: Any, states: Any, scores: jax.Array
             ) -> tuple[Any, Any, dict]:
    """After segment ``k``: every population's exploit step over the flat runs ``[R]`` (run
    ``m * S + s`` is member ``m`` of population ``s``). ``keep``: the members kept (the
    population: nobody is replaced); ``halving`` (traced, so PBT and halving share one
    compile): survivors copied round robin and not perturbed, instead of PBT's truncation."""
    n = schedule.population
    per_pop = scores.reshape(n, -1).T  # [S, N]
    s = per_pop.shape[0]
    keep = jnp.where(jnp.isnan(per_pop).all(1), n, keep)  # nothing to rank by: no exploit
    keys = jax.random.split(jax.random.fold_in(key, k), s + 1)
    top = schedule.replaced

    def select(key, scores, keep):
        order, ranks = exploit.rank(scores)
        choice = jax.random.randint(key, (n,), 0, top, dtype=jnp.int32)
        return jnp.where(halving, exploit.halving(scores, keep),
                         exploit.sources(order, ranks, n - keep, choice))

    source = jax.vmap(select)(keys[1:], per_pop, keep)
    flat = (source.T * s + jnp.arange(s, dtype=jnp.int32)).reshape(-1)  # [R]
    replaced = flat != jnp.arange(flat.shape[0], dtype=jnp.int32)
    learner, moments = exploit.copy((states.learner, states.obs_moments), flat)
    hypers = exploit.copy({f: getattr(cfgs, f) for f in hyper_fields(cfgs)}, flat)
    hypers = exploit.explore(keys[0], space, hypers, replaced & ~halving,
                             schedule.resample_prob, schedule.factor)
    cfgs = jax.tree.unflatten(jax.tree.structure(cfgs), [hypers[f] for f in hyper_fields(cfgs)])
    data = jax.random.key_data(states.key)
    renewed = jax.random.key_data(jax.vmap(jax.random.fold_in)(
        states.key, (k + 1) * flat.shape[0] + jnp.arange(flat.shape[0])))
    new_keys = jax.random.wrap_key_data(
        jnp.where(replaced.reshape(-1, *([1] * (data.ndim - 1))), renewed, data),
        impl=jax.random.key_impl(states.key))
    env = states.env
    if moments != ():  # normalize_obs: a copy acts with its source's statistics from now on
        acting = jax.vmap(with_moments)(env, moments, cfgs.obs_clip)
        env = jax.tree.map(lambda a, b: jnp.where(
            replaced.reshape(-1, *([1] * (a.ndim - 1))), a, b), acting, env)
    states = states._replace(learner=learner, obs_moments=moments, key=new_keys, env=env)
    record = {"source": source, "score": per_pop,
              **{f: getattr(cfgs, f).reshape(n, -1).T for f in space.names}}
    return cfgs, states, record


@functools.cache
def _init(options: tuple) -> Any:
    return jax.jit(init_runs, compiler_options=dict(options) or None)


def _updates(cfgs: Any, states: Any, first: Any, n: int, kw: dict) -> tuple[Any, dict]:
    """``n`` updates of every run from update ``first + 1`` (``sweep.step_runs``)."""
    if n == 0:  # no loop to compile
        shapes = jax.eval_shape(lambda s: step_runs(cfgs, s, first, **kw)[1], states)
        return states, jax.tree.map(lambda x: jnp.zeros((0, *x.shape), x.dtype), shapes)
    return lax.scan(lambda st, i: step_runs(cfgs, st, i, **kw), states,
                    first + jnp.arange(n, dtype=jnp.int32))


@functools.cache
def _segments(static: Schedule, space: Space, num_updates: int, log_every: int,
              progress: bool, options: tuple) -> Any:
    """``segments(carry, key, ks, keeps, halving)``, jitted: a scan of whole segments, each
    ending with its exploit step. Cached by ``Schedule.static``: PBT and halving runs whose
    segments are as long share one compile."""
    kw = dict(num_devices=1, num_updates=num_updates, log_every=log_every, progress=progress)

    def segments(carry, key, ks, keeps, halving):
        def one(carry, xs):
            cfgs, states = carry
            k, keep = xs
            states, metrics = _updates(cfgs, states, k * static.segment, static.segment, kw)
            cfgs, states, record = _exploit(static, space, key, k, keep, halving, cfgs,
                                            states, _scores(static, metrics))
            return (cfgs, states), (metrics, record)

        return lax.scan(one, carry, (ks, keeps))

    return jax.jit(segments, compiler_options=dict(options) or None)


@functools.cache
def _finish(rest: int, num_updates: int, log_every: int, progress: bool, options: tuple) -> Any:
    """``finish(carry)``, jitted: the last ``rest`` updates (no exploit), the final params."""
    kw = dict(num_devices=1, num_updates=num_updates, log_every=log_every, progress=progress)

    def finish(carry):
        cfgs, states = carry
        states, metrics = _updates(cfgs, states, num_updates - rest, rest, kw)
        return final_params(cfgs, states), metrics

    return jax.jit(finish, compiler_options=dict(options) or None)


# --------------------------------------------------------------------------- entry points
def pbt(
    cfg: Any,
    space: Mapping[str, Any] | Space,
    population: int = 16,
    ready_every: int = 10,
    seeds: int | Sequence[int] = 1,
    *,
    seed: int = 0,
    fraction: float = 0.25,
    resample_prob: float = 0.25,
    factor: float = 1.2,
    score: str = "return",
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    test_seeds: int | Sequence[int] | None = None,
    progress: bool = True,
) -> PopulationResult:
    """Population-based training in one compiled program: ``population`` members drawn from
    ``space`` (with ``seed``) for each of ``seeds``; every ``ready_every`` updates the bottom
    ``fraction`` of each population copies a top member and perturbs its hyperparameters.

        result = jra.pbt(cfg, space={"lr": jra.LogUniform(1e-4, 3e-3)}, population=16,
                         ready_every=10, seeds=3)
        result.best()["cfg"], result.lineage, result.plot()
    """
    space = Space.of(cfg, space)
    schedule = pbt_schedule(cfg, population, ready_every, fraction, resample_prob, factor, score)
    return run_population(cfg, space, schedule, seeds, seed=seed, progress=progress,
                          checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
                          test_seeds=test_seeds)


def successive_halving(
    cfg: Any,
    space: Mapping[str, Any] | Space,
    population: int = 16,
    eta: int = 2,
    rungs: int = 3,
    seeds: int | Sequence[int] = 1,
    *,
    seed: int = 0,
    score: str = "return",
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    test_seeds: int | Sequence[int] | None = None,
    progress: bool = True,
) -> PopulationResult:
    """Successive halving in one compiled program: at each of ``rungs - 1`` rungs the top
    ``1/eta`` of each population survives and the freed slots continue as copies of the
    survivors (new random keys), so the compute goes to the promising configs."""
    space = Space.of(cfg, space)
    schedule = halving_schedule(cfg, population, eta, rungs, score)
    return run_population(cfg, space, schedule, seeds, seed=seed, progress=progress,
                          checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
                          test_seeds=test_seeds)


def run_population(cfg: Any, space: Space, schedule: Schedule, seeds: int | Sequence[int], *,
                   seed: int = 0, progress: bool = True, checkpoint_dir: str | Path | None = None,
                   checkpoint_every: int | None = None, resume: Any = None,
                   test_seeds: Any = None) -> PopulationResult:
    """Train a population by ``schedule`` (``pbt_schedule``/``halving_schedule``); every
    check is done before anything compiles. ``resume``: a checkpoint's ``(segments done,
    carry, outputs)`` to continue from (``resume_population``); ``test_seeds``: the best
    member's final config re-trained on them (``result.test``)."""
    from jaxrl_async.run.train import warn_partial_update
    from jaxrl_async.search.held_out import check_test_seeds
    from jaxrl_async.search.sweep import check_runner, seed_list, with_test

    check_runner(cfg)
    seeds = seed_list(seeds)
    if test_seeds is not None:
        check_test_seeds(test_seeds, seeds)
    seed = int(np.int32(_check_seed(seed)))
    if checkpoint_every is not None:
        _check_int("checkpoint_every", checkpoint_every)
        if checkpoint_dir is None:
            raise ValueError("checkpoint_every needs a checkpoint_dir to write to")
    points = space.sample(schedule.population, seed)
    configs = [dataclasses.replace(cfg, **p) for p in points]
    warn_partial_update(cfg)
    stacked = _stack([c for c in configs for _ in seeds])
    seed_array = np.asarray([s for _ in configs for s in seeds], np.int32)
    runs, total = len(configs) * len(seeds), len(schedule.keeps)
    group = min(checkpoint_every or total, total) or 1
    options = tuple(sorted(compiler_options(cfg).items()))
    init = _init(options)
    segments = _segments(schedule.static, space, cfg.num_updates, cfg.log_every, progress,
                         options)
    finish = _finish(schedule.rest, cfg.num_updates, cfg.log_every, progress, options)
    halving = np.bool_(schedule.kind == "halving")
    key = jax.random.key(seed)
    ks, keeps = np.arange(total, dtype=np.int32), np.asarray(schedule.keeps, np.int32)
    if checkpoint_dir is not None:
        ckpt.write_meta(checkpoint_dir, cfg, space, schedule, seeds, seed, checkpoint_every)

    first = 0 if resume is None else resume[0]  # segments done before this call
    bar = None
    if progress and first < total:  # a finished population has nothing to show
        from tqdm.auto import tqdm

        bar = tqdm(total=runs * cfg.num_updates * cfg.steps_per_update, unit="step",
                   unit_scale=True, dynamic_ncols=True, mininterval=0.5,
                   desc=f"{schedule.kind} {schedule.population} members x {len(seeds)} seeds")
    default_compile_cache()  # compiled programs kept across processes (compile_cache)
    try:
        start = time.perf_counter()
        if resume is None:
            done, carry, outputs = 0, (stacked, init(stacked, seed_array)), []
        else:
            done, carry, outputs = resume
        # on the device, committed and strongly typed, fresh or restored alike (a checkpoint
        # keeps no weak types): one compile serves both
        carry = jax.block_until_ready(jax.tree.map(
            lambda x: x if ckpt.is_key(x) else jnp.asarray(x, x.dtype),
            jax.device_put(carry, jax.local_devices()[0])))
        compiled = (segments.lower(carry, key, ks[:group], keeps[:group], halving).compile()
                    if total else None)
        compiled_finish = finish.lower(carry).compile()
        compile_s = time.perf_counter() - start
        if bar is not None:
            bar.reset()
            _Progress.active = _Progress(bar, [runs], cfg.steps_per_update)
        start = time.perf_counter()
        while done < total:
            n = min(group, total - done)
            run = compiled if n == group else segments
            carry, out = run(carry, key, ks[done:done + n], keeps[done:done + n], halving)
            outputs.append(out)
            done += n
            if checkpoint_every is not None:
                ckpt.save(checkpoint_dir, done, jax.device_get(carry), [_get(o) for o in outputs])
        params, rest = _wait(compiled_finish(carry))
        outputs = [_get(o) for o in outputs]
        train_s = time.perf_counter() - start
    finally:
        _Progress.active = None
        if bar is not None:
            bar.close()
    if checkpoint_dir is not None:
        ckpt.save(checkpoint_dir, total, jax.device_get(carry), outputs)
    steps = runs * cfg.num_updates * cfg.steps_per_update
    if total:  # what this call trained: the segments left (a resumed run's), in steps
        steps = steps * (total - first) // total
    timing = {"compile_s": compile_s, "train_s": train_s, "sps": steps / max(train_s, 1e-9),
              "runs": runs, "exploits": schedule.exploits, "steps_trained": steps}
    return with_test(PopulationResult.assemble(cfg, space, schedule, seeds, points, outputs,
                                               rest, params, timing), test_seeds, progress)


def _get(tree: Any) -> Any:
    """``tree`` on the host (restored outputs are there already)."""
    if all(hasattr(x, "is_ready") for x in jax.tree.leaves(tree)):
        return _wait(tree)
    return jax.device_get(tree)


def _check_seed(seed: Any) -> int:
    from jaxrl_async.config.fields import check_seed

    return check_seed(seed, "seed")


def resume_population(directory: str | Path, *, progress: bool = True) -> PopulationResult:
    """Continue the population checkpointed in ``directory`` (``checkpoint_dir=``) from its
    latest checkpoint; a finished one is only assembled again. The result equals the run
    that was not stopped, bit for bit."""

    cfg, space, schedule, seeds, seed, every = ckpt.read_meta(directory)
    points = space.sample(schedule.population, seed)
    stacked = _stack([dataclasses.replace(cfg, **p) for p in points for _ in seeds])
    init = _init(tuple(sorted(compiler_options(cfg).items())))
    runs = schedule.population * len(seeds)
    template = (stacked, jax.eval_shape(init, stacked, np.zeros(runs, np.int32)))
    resume = ckpt.load(directory, template)
    return run_population(cfg, space, schedule, seeds, seed=seed, progress=progress,
                          checkpoint_dir=directory, checkpoint_every=every, resume=resume)
