"""One process of the 2-process population test in test_pbt_devices.py (run as a script):
2 CPU devices per process, the members sharded over all 4. PBT interrupted after its second
checkpoint and resumed (both processes), and successive halving; each process saves the
result it got."""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402

from jaxrl_async.run import distributed  # noqa: E402


def save(path: str, result) -> None:
    import jax

    np.savez(path, *[np.asarray(x) for x in jax.tree.leaves(result.params)],
             **{f"curve_{k}": v for k, v in result.curves.items()},
             **{f"lineage_{k}": v for k, v in result.lineage.items()},
             runs_per_device=result.timing["runs_per_device"],
             devices=result.timing["devices"])


def main() -> None:
    process_id, port, out_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import jax

    import jaxrl_async as jra
    from jaxrl_async.search import pbt
    from tests.test_pbt_devices import SEEDS, SPACE, TINY, N

    assert jax.device_count() == 4 and jax.local_device_count() == 2
    directory = os.path.join(out_dir, "pbt")  # one directory: a file system both processes see
    save_checkpoint, calls = pbt._save, []

    def stop_after_two(*args):
        save_checkpoint(*args)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    if process_id == 1:  # only process 0 writes files
        from jaxrl_async.search import population_checkpoint as ckpt

        def refuse(*args, **kwargs):
            raise AssertionError("process 1 wrote a population file")

        ckpt.save = ckpt.write_meta = refuse
    pbt._save = stop_after_two
    try:
        jra.pbt(TINY, SPACE, population=N, ready_every=2, seeds=SEEDS, seed=7, progress=False,
                checkpoint_dir=directory, checkpoint_every=1)
    except KeyboardInterrupt:
        pass
    pbt._save = save_checkpoint
    assert len(calls) == 2, calls
    resumed = jra.resume_population(directory, progress=False)
    save(os.path.join(out_dir, f"pbt{process_id}.npz"), resumed)
    halving = jra.successive_halving(TINY, SPACE, population=N, eta=2, rungs=3, seeds=SEEDS,
                                     progress=False, checkpoint_dir=os.path.join(
                                         out_dir, "halving"), checkpoint_every=1)
    save(os.path.join(out_dir, f"halving{process_id}.npz"), halving)
    distributed.shutdown()


if __name__ == "__main__":
    main()
