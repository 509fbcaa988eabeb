"""Multi-process (multi-host) runs: a thin layer over ``jax.distributed``.

After ``initialize(...)`` in every process, ``jax.devices()`` lists the devices of all
processes; a runner whose device count covers them runs its data-parallel learner over all of
them (gradients ``pmean``-ed across processes), each process stepping its own envs. Only the
main process (``jax.process_index() == 0``) writes logs and checkpoints.
"""

from __future__ import annotations

import os

import jax


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: list[int] | None = None,
    cpu_collectives: str = "gloo",
) -> None:
    """``jax.distributed.initialize`` with arguments, or the usual environment variables.

    Missing arguments come from ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and
    ``JAX_PROCESS_ID``; with none of them set, JAX detects SLURM, Open MPI or Kubernetes itself.
    On CPUs, cross-process collectives use ``cpu_collectives`` (gloo). Call it before anything
    else touches JAX devices.
    """
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
    )


def is_main_process() -> bool:
    """True in the process that writes logs and checkpoints."""
    return jax.process_index() == 0


def shutdown() -> None:
    """Leave the distributed run (safe to call when it was never initialised)."""
    if jax.process_count() > 1:
        jax.distributed.shutdown()
