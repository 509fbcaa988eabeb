"""Orbax checkpoints of the full training state, and resuming from them.

A checkpoint is the whole ``RunState`` (params, optimizer state, observation-normalisation
moments and env states, the run key, the update counter, the last episode figures), so a
resumed run continues exactly where the saved one was: ``jra.train(cfg, resume=RUN_DIR)``.

Layout: ``RUN_DIR/checkpoints/<update>/{state,meta}`` written by orbax's ``CheckpointManager``
(a checkpoint appears under its final name only once complete). ``state`` holds the arrays as a
nested dict keyed by their pytree path, typed PRNG keys as their ``key_data``; ``meta`` holds
the config, the key implementations and the update. Restoring checks both against what the
config builds and raises ``CheckpointError`` (naming what differs) before touching anything.

Faults (``tests/test_faults_checkpoint.py``): a process killed while it writes leaves at most a
``<update>.orbax-checkpoint-tmp*`` directory, which restoring ignores with a warning and the
next write removes; a write that fails (a full disk) raises ``CheckpointError`` and leaves the
checkpoints already written as they were.

Runner-independent: ``CheckpointSink`` only uses ``Callbacks.on_state``, and a runner resumes
by taking the restored state as ``run(cfg, key, callbacks, state=restored)``.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async import runners
from jaxrl_async.config.shared import to_dict
from jaxrl_async.run.checkpoint_checks import (  # noqa: F401 - importable from here as before
    CHECKPOINTS,
    FORMAT,
    INCOMPLETE,
    CheckpointError,
    _check_format,
    check_layout,
    checkpoint_dir,
    config_differences,
    incomplete,
    layout,
    no_checkpoint,
)
from jaxrl_async.runners import divergence
from jaxrl_async.runners.state import Callbacks, RunState


# --------------------------------------------------------------------------- state <-> arrays
def _name(entry: Any) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _is_key(x: Any) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _paths(tree: Any) -> list[tuple[str, ...]]:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [tuple(_name(e) for e in path) for path, _ in flat]


def _nest(flat: dict[tuple[str, ...], Any]) -> dict:
    out: dict = {}
    for path, value in flat.items():
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _flat(nested: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if not isinstance(nested, dict):
        return {prefix: nested}
    out = {}
    for k, v in nested.items():
        out.update(_flat(v, (*prefix, str(k))))
    return out


def to_arrays(state: RunState) -> tuple[dict, dict[str, str]]:
    """Every leaf as a nested dict keyed by pytree path, keys as key data; and the PRNG
    implementation of each key leaf. Host copies of the leaves this process holds whole; a
    multi-process run's global arrays (split over the processes, or replicated over them) stay
    jax arrays, which orbax writes shard by shard, each process its own (a replicated one
    once)."""
    leaves = jax.tree.leaves(state)
    impls = {"/".join(p): str(jax.random.key_impl(x))
             for p, x in zip(_paths(state), leaves) if _is_key(x)}
    data = [jax.random.key_data(x) if _is_key(x) else x for x in leaves]
    local = [not isinstance(x, jax.Array) or x.is_fully_addressable for x in data]
    host = iter(jax.device_get([x for x, here in zip(data, local) if here]))
    values = [np.array(next(host)) if here else x for x, here in zip(data, local)]
    return _nest(dict(zip(_paths(state), values))), impls


def abstract_state(cfg: Any) -> RunState:
    """Shapes and dtypes of the full (all devices) run state ``cfg`` trains: the template a
    checkpoint is checked against and restored into (``runners.abstract_state``)."""
    return runners.abstract_state(cfg)


def _template(cfg: Any) -> tuple[RunState, dict[tuple[str, ...], jax.ShapeDtypeStruct]]:
    abstract = abstract_state(cfg)

    def stored(x: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
        return jax.eval_shape(jax.random.key_data, x) if _is_key(x) else x

    leaves = [stored(x) for x in jax.tree.leaves(abstract)]
    return abstract, dict(zip(_paths(abstract), leaves))


# --------------------------------------------------------------------------- manager
_WRITERS = itertools.count()  # writing managers made by this process


def _manager(run_dir: str | Path, *, read_only: bool, keep: int | None = None):
    """An orbax manager; ``read_only`` ones are only used to read (orbax's own read-only mode
    logs warnings on every use, so it is not set). A writing one first removes the
    directories of interrupted writes.

    In a multi-process run every process makes the writing manager and saves with it, into
    the same directory (a file system all hosts share); orbax's barriers then go through the
    coordination service of ``jax.distributed`` (``active_processes``: all of them), not
    through a device collective that could interleave with the runner's own. A reading one
    belongs to its process alone (no barrier: one process may read while the others do not)."""
    import orbax.checkpoint as ocp

    me, count = jax.process_index(), jax.process_count()
    processes = {me} if read_only else set(range(count))
    # orbax names its barriers by step: a prefix of their own for each writing manager (every
    # process makes them in the same order), so two runs' "save 4" barriers never meet
    multi = ocp.options.MultiprocessingOptions(
        primary_host=me if read_only else 0, active_processes=processes if count > 1 else None,
        barrier_sync_key_prefix=None if read_only else f"jaxrl_async_{next(_WRITERS)}")
    create = not read_only
    if create and count > 1:  # orbax leaves this to the caller with ``active_processes``
        checkpoint_dir(run_dir).mkdir(parents=True, exist_ok=True)
        create = False
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=create, enable_async_checkpointing=not read_only,
        cleanup_tmp_directories=not read_only, multiprocessing_options=multi,
    )
    handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    return ocp.CheckpointManager(checkpoint_dir(run_dir).absolute(), options=options,
                                 item_handlers=handlers)


def steps(run_dir: str | Path) -> list[int]:
    """Updates at which ``run_dir`` holds a complete checkpoint (ascending)."""
    if not checkpoint_dir(run_dir).is_dir():
        return []
    manager = _manager(run_dir, read_only=True)
    try:
        return sorted(manager.all_steps())
    finally:
        manager.close()


def save(manager: Any, state: RunState, cfg: Any, update: int) -> None:
    """Write ``state`` as checkpoint ``update`` (orbax writes in the background; the arrays are
    copied to the host first, so the caller may donate ``state`` right after)."""
    import orbax.checkpoint as ocp

    arrays, impls = to_arrays(state)
    meta = {"format": FORMAT, "config": to_dict(cfg), "update": update, "key_impls": impls,
            "layout": layout()}
    manager.save(update, args=ocp.args.Composite(
        state=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)), force=True)


def restore(run_dir: str | Path, cfg: Any, step: int | None = None, *,
            budget_may_differ: bool = False, same_layout: bool = False) -> RunState:
    """The run state saved in ``run_dir`` (the newest checkpoint, or ``step``), checked against
    ``cfg`` (``budget_may_differ``: but for ``total_timesteps``, the state's shapes do not
    depend on it; ``same_layout``: and against this run's process x device layout, which a
    resumed multi-process run must keep). Reads only: on any problem it raises
    ``CheckpointError`` saying what is wrong. Every process reads the whole state (host
    arrays, all envs); the runner puts each process's part on its devices."""
    import orbax.checkpoint as ocp

    available = steps(run_dir)
    if not available:
        raise CheckpointError(no_checkpoint(run_dir))
    step = available[-1] if step is None else step
    for partial in incomplete(run_dir):
        warnings.warn(f"ignoring the incomplete checkpoint {partial} (its write was "
                      f"interrupted); restoring update {step}", stacklevel=2)
    if step not in available:
        raise CheckpointError(f"no checkpoint for update {step} in {checkpoint_dir(run_dir)}; "
                              f"there are: {available}")
    where = checkpoint_dir(run_dir) / str(step)
    abstract, expected = _template(cfg)
    manager = _manager(run_dir, read_only=True)
    try:
        try:
            meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
            meta = meta["meta"]
            stored = manager.item_metadata(step)["state"]
            stored = _flat(stored.tree if hasattr(stored, "tree") else stored)
        except Exception as e:  # noqa: BLE001 - orbax raises many kinds; say which file
            raise CheckpointError(f"checkpoint {where} is corrupt or unreadable: "
                                  f"{type(e).__name__}: {e}") from e
        _check_compatible(where, meta, stored, expected, cfg, budget_may_differ)
        if same_layout:
            check_layout(where, meta)
        template = _nest({p: np.empty(x.shape, x.dtype) for p, x in expected.items()})
        try:
            arrays = manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(template)))["state"]
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(f"checkpoint {where} is corrupt or unreadable: "
                                  f"{type(e).__name__}: {e}") from e
    finally:
        manager.close()

    flat = _flat(arrays)
    leaves = []
    for path, x in zip(_paths(abstract), jax.tree.leaves(abstract)):
        value = np.asarray(flat[path])
        if _is_key(x):
            value = jax.random.wrap_key_data(value, impl=meta["key_impls"]["/".join(path)])
        leaves.append(value)
    return jax.tree.unflatten(jax.tree.structure(abstract), leaves)


def _check_compatible(where: Path, meta: dict, stored: dict, expected: dict, cfg: Any,
                      budget_may_differ: bool) -> None:
    _check_format(where, meta)
    saved_cfg = meta.get("config", {})
    differ = config_differences(saved_cfg, cfg, budget_may_differ=budget_may_differ)
    if differ:
        raise CheckpointError(f"checkpoint {where} was written by a different config: "
                              + "; ".join(differ))
    problems = []
    for path in sorted(expected.keys() - stored.keys()):
        problems.append(f"{'.'.join(path)} missing")
    for path in sorted(stored.keys() - expected.keys()):
        problems.append(f"{'.'.join(path)} not in this config's state")
    for path in sorted(expected.keys() & stored.keys()):
        want, have = expected[path], stored[path]
        if tuple(have.shape) != tuple(want.shape) or np.dtype(have.dtype) != np.dtype(want.dtype):
            problems.append(f"{'.'.join(path)}: saved {have.dtype}{list(have.shape)}, this "
                            f"config needs {want.dtype}{list(want.shape)}")
    if problems:
        shown = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)"
                                           if len(problems) > 5 else "")
        raise CheckpointError(f"checkpoint {where} does not fit {type(cfg).__name__}: {shown}")


def check_resume(run_dir: str | Path, saved: Any, cfg: Any, extend: bool = False) -> None:
    """``CheckpointError`` unless the run in ``run_dir``, trained with ``saved``, may continue
    as ``cfg``: the same config but for the ``io_fields`` and the budget. A budget smaller than
    the updates already trained is refused (whatever ``extend`` says); a budget of another
    number of updates needs ``extend`` when ``cfg`` plans a schedule over it
    (``cfg.budget_schedules()``); ``extend`` re-plans those over the new budget."""
    if not steps(run_dir):  # first: no other reason matters without a checkpoint
        raise CheckpointError(no_checkpoint(run_dir))
    differ = config_differences(to_dict(saved), cfg, budget_may_differ=True)
    if differ:
        raise CheckpointError(f"cannot resume {run_dir} with a different config: "
                              + "; ".join(differ))
    done = max(steps(run_dir), default=0)
    if done > cfg.num_updates:  # the one reason that applies, --extend or not
        raise CheckpointError(
            f"{run_dir} has trained {done:,} updates = {done * cfg.steps_per_update:,} steps: "
            f"total_timesteps={cfg.total_timesteps:,} must be at least that (a run cannot be "
            f"trained for less than it has been; evaluate it with jaxrl-async eval {run_dir}, "
            "or train a new run with the smaller budget)")
    schedules = cfg.budget_schedules()
    if saved.num_updates == cfg.num_updates or extend or not schedules:
        return
    raise CheckpointError(
        f"cannot resume {run_dir} with total_timesteps {saved.total_timesteps:,} -> "
        f"{cfg.total_timesteps:,}: the run planned a schedule over its budget ("
        + "; ".join(schedules) + "). Pass extend=True (jaxrl-async train --extend) to re-plan "
        "it over the new budget, as if that had been the budget from the start (e.g. the "
        "learning rate goes back up to lr * (1 - updates done / new updates)); see "
        "docs/checkpoints.md")


@jax.jit
def _nonfinite(learner: Any) -> jax.Array:
    return divergence.first_nonfinite(learner, {})


def finite(state: RunState) -> bool:
    """Whether the learner state (params, optimizer state; replay buffers aside) is finite.
    In a multi-process run on this process's copy of each leaf (no program over other
    processes' devices: the answer is the same in all of them, the parts it checks being
    replicated)."""
    local = jax.tree.map(lambda x: x.addressable_data(0) if isinstance(x, jax.Array)
                         and not x.is_fully_addressable else x, state.learner)
    return int(_nonfinite(local)) < 0


# --------------------------------------------------------------------------- the sink
class CheckpointSink(Callbacks):
    """Writes the run state to ``run_dir/checkpoints`` every ``cfg.checkpoint_every`` updates
    (at the end of the chunk that reaches each multiple) and after the final chunk (the end of
    training, or the chunk in flight when Ctrl-C came). ``close()`` waits for the writes. A
    write that fails raises ``CheckpointError`` (orbax writes in the background: at the next
    save or at ``close()``)."""

    def __init__(self, run_dir: str | Path, cfg: Any):
        self.run_dir, self.cfg = Path(run_dir), cfg
        self.every = cfg.checkpoint_every
        self.manager = None
        self.last_saved: int | None = None
        self.failed = False

    def on_start(self, first_update: int) -> None:
        self.next_due = (first_update // self.every + 1) * self.every if self.every else None

    def on_state(self, state: RunState, final: bool, update: int | None = None) -> None:
        update = int(state.update) if update is None else update
        due = self.next_due is not None and update >= self.next_due
        if (not (final or due) or update == self.last_saved or self.failed
                or not finite(state)):
            return  # a diverged state is never saved: the newest checkpoint stays finite
        if self.manager is None:
            self.manager = _manager(self.run_dir, read_only=False, keep=self.cfg.keep_checkpoints)
        else:  # the previous write, in the background until now (orbax would wait for it too)
            self._guard(self.last_saved, self.manager.wait_until_finished)
        self._guard(update, lambda: save(self.manager, state, self.cfg, update))
        self.last_saved = update
        if self.every:
            self.next_due = (update // self.every + 1) * self.every

    def _guard(self, update: int | None, write: Any) -> None:
        """Run ``write``; any failure of this or an earlier background write becomes one
        ``CheckpointError`` naming the checkpoints still intact."""
        try:
            write()
        except Exception as e:  # noqa: BLE001 - orbax and the file system raise many kinds
            manager, self.manager, self.failed = self.manager, None, True  # write no more
            try:
                manager.close()
            except Exception:  # noqa: BLE001 - the first error is the one to report
                pass
            what = f"checkpoint {update}" if update is not None else "the last checkpoint"
            raise CheckpointError(
                f"could not write {what} in {checkpoint_dir(self.run_dir)}: "
                f"{type(e).__name__}: {e}; the checkpoints already written are intact: "
                f"{steps(self.run_dir)}") from e

    def close(self) -> None:
        if self.manager is not None:
            self._guard(self.last_saved, self.manager.wait_until_finished)
            self.manager.close()
            self.manager = None
