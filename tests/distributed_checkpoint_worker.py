"""One process of the 2-process runs of test_distributed_checkpoint.py (run as a script):
``worker.py PROCESS_ID PORT OUT_DIR RUNNER PHASE``.

``first``: an uninterrupted run (``whole``); a run stopped by SIGTERM after update 2 (to the
processes ``SIGTERM_TO[runner]`` only: a final checkpoint, ``TrainingInterrupted``); a run
SIGKILLed once checkpoint 4 is committed (``killed``). ``resume``: both stopped runs resumed to
the end. Params and returns of each run go to ``OUT_DIR/<run><process>.npz``."""

import faulthandler
import json
import os
import signal
import sys
import time
import warnings

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402

from jaxrl_async import distributed  # noqa: E402


def main() -> None:
    process_id, port, out, runner, phase = sys.argv[1:6]
    process_id = int(process_id)
    faulthandler.dump_traceback_later(170, exit=True)  # a hang: every thread's stack, and out
    distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                           heartbeat_timeout_seconds=20)
    import jax

    import jaxrl_async as jra
    from jaxrl_async.run import checkpoint
    from jaxrl_async.runners.state import Callbacks
    from tests.test_distributed_checkpoint import CONFIGS, KILL_AT, SEED, SIGTERM_AT, SIGTERM_TO

    cfg = CONFIGS[runner]

    def keep(name: str, result) -> None:
        leaves = [np.asarray(x) for x in jax.tree.leaves(result.params)]
        np.savez(os.path.join(out, f"{name}{process_id}.npz"), *leaves,
                 returns=result.metrics["episode_return"])

    class SigtermAt(Callbacks):  # SIGTERM to this process after SIGTERM_AT updates
        def on_state(self, state, final, update=None):
            if update == SIGTERM_AT:
                os.kill(os.getpid(), signal.SIGTERM)

    class KillOnceWritten(Callbacks):  # SIGKILL once checkpoint KILL_AT is committed
        def on_state(self, state, final, update=None):
            if update == KILL_AT:
                run = os.path.join(out, "killed")
                while KILL_AT not in checkpoint.steps(run):
                    time.sleep(0.05)
                print("KILLED", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

    if phase == "first":
        keep("whole", jra.train(cfg, seed=SEED, run_dir=os.path.join(out, "whole"),
                                progress=False))
        term = [SigtermAt()] if process_id in SIGTERM_TO[runner] else []
        try:
            jra.train(cfg, seed=SEED, run_dir=os.path.join(out, "term"), progress=False,
                      callbacks=term)
            raise AssertionError("the SIGTERM did not stop the run")
        except jra.TrainingInterrupted as e:
            with open(os.path.join(out, f"term{process_id}.json"), "w") as f:
                json.dump({"update": int(e.result.state.update), "signal": e.signal}, f)
        jra.train(cfg, seed=SEED, run_dir=os.path.join(out, "killed"), progress=False,
                  callbacks=[KillOnceWritten()])
        raise AssertionError("not killed")
    for name in ("term", "killed"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            keep(name, jra.train(resume=os.path.join(out, name), progress=False))
        for w in caught:
            print(f"WARNING {name}: {w.message}", flush=True)
    distributed.shutdown()


if __name__ == "__main__":
    main()
