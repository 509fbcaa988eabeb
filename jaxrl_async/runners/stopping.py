"""Stopping a run cleanly on Ctrl-C (SIGINT) or SIGTERM (what SLURM and Kubernetes send before
they preempt a job), in one process or in all processes of a multi-process run at once.

``StopOnInterrupt`` records the first signal; the runner asks ``stop.agreed(update)`` at every
chunk boundary whether to stop there. In one process that is the recorded flag. In a
multi-process run every process publishes its flag for that boundary in the coordination
service of ``jax.distributed`` (its key-value store), waits at a barrier for all of them and
reads them all: every process gets the same answer at the same update, so a signal to any one
process stops all of them after the same update and they write one consistent checkpoint. The
exchange goes through the coordination service, not through a device collective, so it never
interleaves with the runner's own collectives (the async runner's learner thread runs them
while the calling thread writes checkpoints). A process that never reaches the barrier (hung)
makes the others fail after ``AGREEMENT_TIMEOUT_S`` instead of waiting forever; a process
that dies makes them fail within the heartbeat timeout (``jra.distributed.initialize``).
"""

from __future__ import annotations

import itertools
import signal
import threading
from typing import Any

import jax

SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
AGREEMENT_TIMEOUT_S = 3600
"""How long a process waits at a chunk boundary for the others (compiles of different length
before the first boundary included) before it fails with an error naming the boundary."""

_sessions = itertools.count()  # every process starts the same runs in the same order


def _client() -> Any:
    """The ``jax.distributed`` coordination-service client (orbax reaches it the same way)."""
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("a multi-process run needs jax.distributed.initialize() first")
    return client


class StopOnInterrupt:
    """Ctrl-C and SIGTERM handling for every host-level runner (the one place it lives).

    Inside ``with StopOnInterrupt() as stop:`` the first SIGINT or SIGTERM only sets
    ``stop.requested`` (and ``stop.signal``: ``"SIGINT"`` or ``"SIGTERM"``); the runner stops
    at the next chunk boundary where ``stop.agreed(update)`` says so, passes its state to
    ``callbacks.on_state(..., final=True)`` (so a checkpoint sink writes it), delivers the
    metrics, and raises ``TrainingInterrupted``. A second Ctrl-C raises ``KeyboardInterrupt`` at
    once; a second SIGTERM is ignored (the final checkpoint is being written; the scheduler's
    SIGKILL comes when its grace time is over). Outside the main thread (where Python cannot
    take signals) it never triggers by itself.

    Nested ``with StopOnInterrupt()`` blocks share the outermost one: ``jra.train`` holds one
    over the whole run (compilation and the last checkpoint write included), and the runner
    inside it sees a signal that came while it compiled.
    """

    _active: StopOnInterrupt | None = None

    def __init__(self) -> None:
        self.requested = False
        self.signal: str | None = None  # the signal that stopped the run (any process's)
        self._previous: dict[int, Any] = {}
        self._outer: StopOnInterrupt | None = None
        self._session = -1
        self._published: int | None = None  # the boundary this process last published

    def __enter__(self) -> StopOnInterrupt:
        active = StopOnInterrupt._active
        if active is not None:
            self._outer = active
            return active
        self._session = next(_sessions)
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
            StopOnInterrupt._active = self
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            return  # a second SIGTERM: the final checkpoint is on its way
        self.requested, self.signal = True, SIGNALS[signum]

    def agreed(self, update: int) -> bool:
        """Whether to stop after ``update`` updates: this process's flag, or in a multi-process
        run whether any process's flag is set at this boundary (every process must ask at the
        same boundaries, in the same order; all get the same answer and ``signal``)."""
        if jax.process_count() == 1:
            return self.requested
        client, me = _client(), jax.process_index()
        prefix = f"jaxrl_async/stop/{self._session}"
        code = 0 if not self.requested else 2 if self.signal == "SIGTERM" else 1
        client.key_value_set(f"{prefix}/{update}/{me}", str(code))
        try:
            client.wait_at_barrier(f"{prefix}/{update}", AGREEMENT_TIMEOUT_S * 1000)
        except Exception as error:  # noqa: BLE001 - jaxlib raises its own XlaRuntimeError
            raise RuntimeError(
                f"the processes did not all reach the stop check after update {update} within "
                f"{AGREEMENT_TIMEOUT_S} s (a process hung or died): {error}") from error
        codes = [int(v) for _, v in client.key_value_dir_get(f"{prefix}/{update}/")]
        if self._published is not None:  # everyone read it: past this barrier, all published
            client.key_value_delete(f"{prefix}/{self._published}/{me}")
        self._published = update
        if max(codes, default=0) == 0:
            return False
        self.requested, self.signal = True, "SIGTERM" if max(codes) == 2 else "SIGINT"
        return True

    def __exit__(self, *exc: Any) -> None:
        if self._outer is not None:
            return
        for signum, previous in self._previous.items():
            # a handler installed outside Python (None) cannot be put back: the default then
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        if StopOnInterrupt._active is self:
            StopOnInterrupt._active = None
