"""Multi-process (multi-host) runs: a thin layer over ``jax.distributed``.

After ``initialize(...)`` in every process, ``jax.devices()`` lists the devices of all
processes; a runner whose device count covers them runs its data-parallel learner over all of
them (gradients ``pmean``-ed across processes), each process stepping its own envs. Only the
main process (``jax.process_index() == 0``) writes logs and checkpoints.

A process that dies stops the others; none waits forever in a collective. JAX's coordination
service (in process 0) declares a process dead once it sends no heartbeat for
``heartbeat_timeout_seconds``, and every other process then terminates with
``The following tasks are unhealthy (stopped sending heartbeats): <process ids>``; when
process 0 itself dies the others lose the service at once and terminate with ``Failed to send
RPC to coordination service ... the leader task ... died`` (a gloo collective in flight fails
first with ``Connection reset by peer``). Tested in ``tests/test_faults_distributed.py``.
"""

from __future__ import annotations

import os

import jax
import numpy as np


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: list[int] | None = None,
    cpu_collectives: str = "gloo",
    heartbeat_timeout_seconds: int = 60,
) -> None:
    """``jax.distributed.initialize`` with arguments, or the usual environment variables.

    Missing arguments come from ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and
    ``JAX_PROCESS_ID``; with none of them set, JAX detects SLURM, Open MPI or Kubernetes itself.
    On CPUs, cross-process collectives use ``cpu_collectives`` (gloo). Call it before anything
    else touches JAX devices.

    ``heartbeat_timeout_seconds``: a process silent this long counts as dead and all others
    stop with an error naming it (JAX's default is 100 s; every process should pass the same).
    """
    if not isinstance(heartbeat_timeout_seconds, int) or heartbeat_timeout_seconds < 1:
        raise ValueError("heartbeat_timeout_seconds must be an int >= 1 (seconds), got "
                         f"{heartbeat_timeout_seconds!r}")
    env = os.environ
    coordinator_address = coordinator_address or env.get("JAX_COORDINATOR_ADDRESS")
    if num_processes is None and "JAX_NUM_PROCESSES" in env:
        num_processes = int(env["JAX_NUM_PROCESSES"])
    if process_id is None and "JAX_PROCESS_ID" in env:
        process_id = int(env["JAX_PROCESS_ID"])
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        heartbeat_timeout_seconds=heartbeat_timeout_seconds,
    )


def is_main_process() -> bool:
    """True in the process that writes logs and checkpoints."""
    return jax.process_index() == 0


def shutdown() -> None:
    """Leave the distributed run (safe to call when it was never initialised)."""
    if jax.process_count() > 1:
        jax.distributed.shutdown()


TEXT_BYTES = 4096


def broadcast_text(text: str | None) -> str | None:
    """The main process's ``text`` in every process (``None`` stays ``None``); ``text`` itself
    in a one-process run. Every process must call it at the same point (a collective: before
    the runner's threads start)."""
    if jax.process_count() == 1:
        return text
    from jax.experimental import multihost_utils

    data = b"" if text is None else b"\x01" + text.encode()
    if len(data) > TEXT_BYTES:
        raise ValueError(f"broadcast_text: at most {TEXT_BYTES - 1} bytes, got {len(data) - 1}")
    buffer = np.zeros(TEXT_BYTES + 4, np.uint8)
    buffer[:4] = np.frombuffer(np.uint32(len(data)).tobytes(), np.uint8)
    buffer[4:4 + len(data)] = np.frombuffer(data, np.uint8)
    got = np.asarray(multihost_utils.broadcast_one_to_all(buffer))
    size = int(np.frombuffer(got[:4].tobytes(), np.uint32)[0])
    return got[5:4 + size].tobytes().decode() if size else None
