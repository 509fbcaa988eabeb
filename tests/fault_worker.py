"""Child processes of the fault tests (run as a script): ``peer`` is one process of a 2-process
``jax.distributed`` run that steps a cross-process collective until process ``dies`` kills
itself (tests/test_faults_distributed.py); ``save`` trains and SIGKILLs itself at a given point
of a checkpoint write (tests/test_faults_checkpoint.py)."""

import os
import signal
import sys
import time

os.environ["JAX_PLATFORMS"] = "cpu"


def die() -> None:
    """SIGKILL this process: no cleanup, no Python exit handlers (like a crash or OOM kill)."""
    print(f"KILLED {time.time():.3f}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def peer(process_id: int, port: str, heartbeat_s: int, dies: int) -> None:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    from jaxrl_async import distributed

    distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                           heartbeat_timeout_seconds=heartbeat_s)
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    for i in range(10**9):
        gathered = multihost_utils.process_allgather(jnp.full((2,), i))
        assert gathered.size == 4 and int(gathered.min()) == i  # both processes took part
        if i == 20:
            print(f"process {process_id} in step", flush=True)
            if process_id == dies:
                die()


def main() -> None:
    role, args = sys.argv[1], sys.argv[2:]
    if role == "peer":
        peer(int(args[0]), args[1], int(args[2]), int(args[3]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
