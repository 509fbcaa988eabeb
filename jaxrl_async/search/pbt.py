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
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async.run.compile_cache import default_compile_cache
from jaxrl_async.runners.common import compiler_options
from jaxrl_async.search import population_checkpoint as ckpt
from jaxrl_async.search import population_program as program
from jaxrl_async.search.population import Schedule, Space
from jaxrl_async.search.population_result import PopulationResult
from jaxrl_async.search.sweep import _Progress, _stack

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


# the compiled pieces (population_program); under their old names for callers
_scores, _exploit, _updates = program.scores_of, program.exploit_step, program.updates


def _init(options: tuple) -> Any:
    """``init(cfgs, seeds)`` on one device, jitted (cached)."""
    return program.init_program(options)


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
    num_devices: int | None = None,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    test_seeds: int | Sequence[int] | None = None,
    progress: bool = True,
) -> PopulationResult:
    """Population-based training in one compiled program: ``population`` members drawn from
    ``space`` (with ``seed``) for each of ``seeds``; every ``ready_every`` updates the bottom
    ``fraction`` of each population copies a top member and perturbs its hyperparameters.
    The members are sharded over ``num_devices`` devices (default: all, of every process).

        result = jra.pbt(cfg, space={"lr": jra.LogUniform(1e-4, 3e-3)}, population=16,
                         ready_every=10, seeds=3)
        result.best()["cfg"], result.lineage, result.plot()
    """
    space = Space.of(cfg, space)
    schedule = pbt_schedule(cfg, population, ready_every, fraction, resample_prob, factor, score)
    return run_population(cfg, space, schedule, seeds, seed=seed, progress=progress,
                          num_devices=num_devices, checkpoint_dir=checkpoint_dir,
                          checkpoint_every=checkpoint_every, test_seeds=test_seeds)


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
    num_devices: int | None = None,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    test_seeds: int | Sequence[int] | None = None,
    progress: bool = True,
) -> PopulationResult:
    """Successive halving in one compiled program: at each of ``rungs - 1`` rungs the top
    ``1/eta`` of each population survives and the freed slots continue as copies of the
    survivors (new random keys), so the compute goes to the promising configs. The members
    are sharded over ``num_devices`` devices (default: all, of every process)."""
    space = Space.of(cfg, space)
    schedule = halving_schedule(cfg, population, eta, rungs, score)
    return run_population(cfg, space, schedule, seeds, seed=seed, progress=progress,
                          num_devices=num_devices, checkpoint_dir=checkpoint_dir,
                          checkpoint_every=checkpoint_every, test_seeds=test_seeds)


def run_population(cfg: Any, space: Space, schedule: Schedule, seeds: int | Sequence[int], *,
                   seed: int = 0, progress: bool = True, num_devices: int | None = None,
                   checkpoint_dir: str | Path | None = None,
                   checkpoint_every: int | None = None, resume: Any = None,
                   test_seeds: Any = None) -> PopulationResult:
    """Train a population by ``schedule`` (``pbt_schedule``/``halving_schedule``), its
    members sharded over ``num_devices`` (``population_program``); every check is done
    before anything compiles. ``resume``: a checkpoint's ``(segments done, carry, outputs)``
    on the host to continue from (``resume_population``); ``test_seeds``: the best member's
    final config re-trained on them (``result.test``). Under ``jax.distributed`` every process
    calls it alike and gets the whole result; only process 0 writes files."""
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
    devices = program.population_devices(num_devices, schedule.population, len(seeds))
    points = space.sample(schedule.population, seed)
    configs = [dataclasses.replace(cfg, **p) for p in points]
    warn_partial_update(cfg)
    stacked = _stack([c for c in configs for _ in seeds])
    seed_array = np.asarray([s for _ in configs for s in seeds], np.int32)
    runs, total = len(configs) * len(seeds), len(schedule.keeps)
    group = min(checkpoint_every or total, total) or 1
    options = tuple(sorted(compiler_options(cfg).items()))
    init = program.init_program(options, devices)
    segments = program.segments_program(schedule.static, space, cfg.num_updates, cfg.log_every,
                                        progress, options, devices)
    finish = program.finish_program(schedule.rest, cfg.num_updates, cfg.log_every, progress,
                                    options, devices)
    halving = np.bool_(schedule.kind == "halving")
    ks, keeps = np.arange(total, dtype=np.int32), np.asarray(schedule.keeps, np.int32)
    main = jax.process_index() == 0
    if checkpoint_dir is not None and main:
        ckpt.write_meta(checkpoint_dir, cfg, space, schedule, seeds, seed, checkpoint_every,
                        _layout(devices))

    first = 0 if resume is None else resume[0]  # segments done before this call
    local = [d for d in devices if d.process_index == jax.process_index()]
    mine = runs // len(devices)
    bar = None
    if progress and main and first < total:  # a finished population has nothing to show
        from tqdm.auto import tqdm

        here = "" if len(local) == len(devices) else " (this process's)"
        bar = tqdm(total=mine * len(local) * cfg.num_updates * cfg.steps_per_update,
                   unit="step", unit_scale=True, dynamic_ncols=True, mininterval=0.5,
                   desc=f"{schedule.kind} {schedule.population} members x {len(seeds)} seeds"
                        f"{here}")
    default_compile_cache()  # compiled programs kept across processes (compile_cache)
    try:
        start = time.perf_counter()
        if resume is None:
            cfgs = program.to_devices(stacked, devices)
            done, carry, outputs = 0, (cfgs, init(cfgs, program.to_devices(seed_array,
                                                                           devices))), []
        else:
            done, carry, outputs = resume
            carry = program.to_devices(carry, devices)
        carry = jax.block_until_ready(carry)
        seed_arg = np.int32(seed)
        compiled = (segments.lower(carry, seed_arg, ks[:group], keeps[:group], halving)
                    .compile() if total else None)
        compiled_finish = finish.lower(carry).compile()
        if jax.process_count() > 1:  # the clock starts when every process has compiled
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("population compiled")
        compile_s = time.perf_counter() - start
        if bar is not None:
            bar.reset()
            _Progress.active = _Progress(bar, [mine] * len(devices), cfg.steps_per_update)
        start = time.perf_counter()
        pending = []  # the outputs still on the devices
        while done < total:
            n = min(group, total - done)
            run = compiled if n == group else segments
            carry, out = run(carry, seed_arg, ks[done:done + n], keeps[done:done + n], halving)
            done += n
            if checkpoint_every is not None:
                host_carry, host_out = program.to_host((carry, out))
                outputs.append(host_out)
                _save(checkpoint_dir, done, host_carry, outputs)
            else:
                pending.append(out)
        finished = program.wait((compiled_finish(carry), pending))
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        (params, rest), pending = program.to_host(finished)  # on every process
        outputs += pending
        gather_s = time.perf_counter() - start
    finally:
        _Progress.active = None
        if bar is not None:
            bar.close()
    if checkpoint_dir is not None:
        _save(checkpoint_dir, total, program.to_host(carry), outputs)
    steps = runs * cfg.num_updates * cfg.steps_per_update
    if total:  # what this call trained: the segments left (a resumed run's), in steps
        steps = steps * (total - first) // total
    timing = {"compile_s": compile_s, "train_s": train_s, "gather_s": gather_s,
              "sps": steps / max(train_s, 1e-9),
              "runs": runs, "exploits": schedule.exploits, "steps_trained": steps,
              "devices": len(devices), "processes": jax.process_count(),
              "runs_per_device": program.local_runs(jax.tree.leaves(carry[1])[0])}
    return with_test(PopulationResult.assemble(cfg, space, schedule, seeds, points, outputs,
                                               rest, params, timing), test_seeds, progress)


def _layout(devices: tuple) -> dict[str, int]:
    return {"devices": len(devices), "processes": jax.process_count()}


def _save(directory: str | Path, done: int, carry: Any, outputs: list) -> None:
    """The checkpoint after ``done`` segments (``carry`` and ``outputs`` on the host, every
    process holding them whole): written by process 0 alone; every process returns once the
    file is there."""
    if jax.process_index() == 0:
        ckpt.save(directory, done, carry, outputs)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"population checkpoint {done}")


def _check_seed(seed: Any) -> int:
    from jaxrl_async.config.fields import check_seed

    return check_seed(seed, "seed")


def resume_population(directory: str | Path, *, num_devices: int | None = None,
                      progress: bool = True) -> PopulationResult:
    """Continue the population checkpointed in ``directory`` (``checkpoint_dir=``) from its
    latest checkpoint; a finished one is only assembled again. On the device layout it was
    checkpointed on (default: the same number of devices) the result equals the run that was
    not stopped, bit for bit; another ``num_devices`` re-shards the members (the checkpoint
    holds them all), equal to float rounding."""
    cfg, space, schedule, seeds, seed, every = ckpt.read_meta(directory)
    layout = ckpt.read_layout(directory)
    if num_devices is None and layout.get("devices", 1) <= jax.device_count():
        num_devices = layout.get("devices", 1)
    points = space.sample(schedule.population, seed)
    stacked = _stack([dataclasses.replace(cfg, **p) for p in points for _ in seeds])
    init = program.init_program(tuple(sorted(compiler_options(cfg).items())))
    runs = schedule.population * len(seeds)
    template = (stacked, jax.eval_shape(init, stacked, np.zeros(runs, np.int32)))
    resume = ckpt.load(directory, template)
    return run_population(cfg, space, schedule, seeds, seed=seed, progress=progress,
                          num_devices=num_devices, checkpoint_dir=directory,
                          checkpoint_every=every, resume=resume)
