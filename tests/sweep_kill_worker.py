"""A chunked, checkpointed sweep that SIGKILLs itself right after its first chunk is saved,
leaving a half-written temporary file of the next one behind (run as a script by
test_sweep_chunks.py: ``python sweep_kill_worker.py CHECKPOINT_DIR``)."""

import os
import signal
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.search import sweep_chunks  # noqa: E402
from tests.test_sweep_chunks import GRID, TINY  # noqa: E402


def main() -> None:
    directory = sys.argv[1]
    save = sweep_chunks.save_chunk

    def save_then_die(directory, group, k, layout, out, train_s):
        save(directory, group, k, layout, out, train_s)
        path = sweep_chunks.chunk_path(directory, group, k + 1)
        with open(path.with_name(path.name + ".tmp12345"), "wb") as f:
            f.write(b"PK\x03\x04 half a chunk")  # as a kill in the middle of a write leaves
        os.kill(os.getpid(), signal.SIGKILL)

    sweep_chunks.save_chunk = save_then_die
    jra.sweep(TINY, GRID, seeds=1, num_devices=1, runs_per_chunk=2, checkpoint_dir=directory,
              progress=True)  # the fixture's program (the persistent cache has it)


if __name__ == "__main__":
    main()
