"""What a run is and what it reports, under either runner: the run state (checkpointed whole),
the result, the callbacks a host-level runner calls at its edge, and how a run stops on Ctrl-C or
SIGTERM (``stopping``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_async.runners.rollout import EnvCarry
from jaxrl_async.runners.stopping import StopOnInterrupt  # noqa: F401 - importable from here


class RunState(NamedTuple):
    """Everything a run continues from (checkpointed whole)."""

    learner: Any  # the algorithm's learner state (identical on every learner device, but for
    #               its ``PerEnv`` parts, which have the env axis and are split like ``env``)
    env: EnvCarry  # env states and observations, leading axis num_envs
    key: jax.Array  # the run's base key; update k uses fold_in(key, k)
    update: jax.Array  # [] int32 updates done
    last_episode: jax.Array  # [2] mean (return, length) of the latest update in which an
    #                          episode ended (NaN before); informative only, no metric uses it
    # The async runner's deterministic schedule: the (packed) params the actors act with at
    # update ``update`` when they are older than the learner's (lag, sync_every); () otherwise.
    behaviour_params: Any = ()
    # normalize_obs: the observation statistics of the whole run (one copy, no env axis), merged
    # from every shard's sums once per rollout (``merge_obs_statistics``) and set back into the
    # env state, which acts with them; () otherwise.
    obs_moments: Any = ()


class TrainResult(NamedTuple):
    """What training returns under either runner."""

    state: RunState
    metrics: dict[str, Any]  # one row per update: [num_updates] each
    timing: dict[str, float] | None = None  # host-level runs: compile_s, train_s, sps

    @property
    def params(self) -> Any:
        return self.state.learner.params


class Callbacks:
    """What a host-level runner reports, at its edge (sinks and progress subclass this)."""

    def on_run(self, cfg: Any, seed: int, run_dir: Any) -> None:
        """Before anything compiles (``jra.train`` only): the run's config, seed and run
        directory (``None`` without one; a resumed run's own directory)."""

    def on_start(self, first_update: int) -> None:
        """Compilation is done; training starts at update ``first_update``."""

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        """Metrics of updates ``first_update + 1 ...``, one row per update."""

    def on_state(self, state: RunState, final: bool, update: int | None = None) -> None:
        """The run state after a chunk of updates, ``update`` updates done (``None``: read
        ``state.update``, which waits for the chunk). ``final`` after the last chunk, or the
        last one before a Ctrl-C stop. Runners may donate ``state``'s buffers to the next
        chunk: copy what you keep before returning."""

    def on_end(self, result: TrainResult, run_dir: Any) -> None:
        """After the run, also one stopped by Ctrl-C (``jra.train`` only): the result with every
        update's metrics (a resumed run's earlier ones too); the run directory's files (learning
        curve, summary) are written. ``close()``, where a sink has one, comes after."""


class TrainingInterrupted(KeyboardInterrupt):
    """Raised by a runner stopped by Ctrl-C or SIGTERM, after its callbacks saw the final state
    (``jra.train``: after the final checkpoint is written). ``signal``: ``"SIGINT"`` (Ctrl-C)
    or ``"SIGTERM"`` (a scheduler's preemption notice; in a multi-process run, the signal any
    process got); ``preempted``: whether it was SIGTERM."""

    def __init__(self, result: TrainResult, signal: str | None = "SIGINT"):
        self.result, self.signal = result, signal or "SIGINT"
        what = "Ctrl-C" if self.signal == "SIGINT" else f"{self.signal} (preemption)"
        super().__init__(f"training stopped by {what} after update {int(result.state.update)}")

    @property
    def preempted(self) -> bool:
        return self.signal == "SIGTERM"


class TrainingDiverged(RuntimeError):
    """Raised by a runner when an update's loss metrics or learner state went NaN or inf
    (``divergence.first_nonfinite``), at the end of the chunk holding that update (the sync
    runner's next chunk, in flight by then, stops after one update). No checkpoint of a
    non-finite state is written (``CheckpointSink`` skips one); the metrics up to and
    including ``update`` are delivered.

    ``update``: the number of the update whose output was not finite (1 = the first update);
    ``what``: the metric or learner part (``loss``, ``params``, ``opt_state`` ...);
    ``result``: the partial result (its state is the diverged one); ``run_dir`` and
    ``last_checkpoint`` (the newest, finite checkpoint's update, or None) are set by
    ``jra.train`` when it writes a run directory."""

    def __init__(self, result: TrainResult, update: int, what: str, total: int):
        super().__init__()
        self.result, self.update, self.what, self.total = result, update, what, total
        self.run_dir: Any = None
        self.last_checkpoint: int | None = None

    def __str__(self) -> str:
        text = (f"training diverged: {self.what} is NaN or inf after update {self.update} of "
                f"{self.total}; training stopped at the end of that log chunk")
        if self.run_dir is not None:
            if self.last_checkpoint is None:
                text += (f"; {self.run_dir} holds no checkpoint from before it (set "
                         "checkpoint_every to keep some)")
            else:
                text += (f"; the last finite checkpoint is update {self.last_checkpoint} in "
                         f"{self.run_dir}/checkpoints/{self.last_checkpoint}")
        return text
