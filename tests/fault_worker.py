"""Child processes of the fault tests (run as a script): ``peer`` is one process of a 2-process
``jax.distributed`` run that steps a cross-process collective until process ``dies`` kills
itself (tests/test_faults_distributed.py); ``save`` writes a checkpoint with the checkpoint
sink and SIGKILLs itself at a given point of the write (tests/test_faults_checkpoint.py)."""

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


KILL_POINTS = ("created", "written", "committed")
"""Where in the write of checkpoint ``KILL_AT`` the ``save`` child dies: its temporary directory
made (no arrays yet); every item written, not committed (no commit file, not renamed); committed
(renamed to its final name; the rest of the save, e.g. removing old checkpoints, not done)."""
KILL_AT = 8


def save(source: str, run_dir: str, point: str) -> None:
    """Write checkpoint ``KILL_AT`` of the run in ``source`` into ``run_dir`` with the checkpoint
    sink of a training run, dying at ``point`` of the write."""
    from orbax.checkpoint._src.path import atomicity

    from jaxrl_async.run import checkpoint
    from jaxrl_async.run.train import load_config

    cfg = load_config(source)
    state = checkpoint.restore(source, cfg, step=KILL_AT)
    cls = atomicity.AtomicRenameTemporaryPath
    create, finalize = cls.create, cls.finalize

    def ours(tmp: atomicity.AtomicRenameTemporaryPath) -> bool:
        return tmp.get_final().name == str(KILL_AT)

    async def create_then_die(self):
        made = await create(self)
        if point == "created" and ours(self):
            die()
        return made

    async def finalize_around(self):
        if point == "written" and ours(self):
            die()
        await finalize(self)
        if point == "committed" and ours(self):
            die()

    cls.create, cls.finalize = create_then_die, finalize_around
    sink = checkpoint.CheckpointSink(run_dir, cfg)
    sink.on_start(KILL_AT - cfg.checkpoint_every)
    sink.on_state(state, final=False, update=KILL_AT)
    sink.close()
    print("NOT KILLED", flush=True)


def main() -> None:
    role, args = sys.argv[1], sys.argv[2:]
    if role == "peer":
        peer(int(args[0]), args[1], int(args[2]), int(args[3]))
    elif role == "save":
        save(args[0], args[1], args[2])
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
