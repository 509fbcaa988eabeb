"""A PBT run of test_pbt_devices.py killed with SIGKILL (run as a script): ``after`` once its
second checkpoint is written, ``during`` in the middle of writing its third (half a temporary
file left behind)."""

import os
import signal
import sys

import numpy as np


def main() -> None:
    mode, directory = sys.argv[1], sys.argv[2]
    import jaxrl_async as jra
    from jaxrl_async.search import pbt
    from tests.test_pbt_devices import SEEDS, SPACE, TINY, N

    save_checkpoint, real_savez, calls = pbt._save, np.savez, []

    def save(*args):
        calls.append(1)
        if mode == "during" and len(calls) == 3:
            np.savez = torn
        save_checkpoint(*args)
        if mode == "after" and len(calls) == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    def torn(path, **arrays):  # the write stops halfway: the process dies in it
        real_savez(path, **arrays)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        os.kill(os.getpid(), signal.SIGKILL)

    pbt._save = save
    jra.pbt(TINY, SPACE, population=N, ready_every=2, seeds=SEEDS, seed=7, progress=False,
            num_devices=1, checkpoint_dir=directory, checkpoint_every=1)
    raise SystemExit("not killed")


if __name__ == "__main__":
    main()
