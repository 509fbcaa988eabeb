"""One process of the 2-process sweeps in test_distributed_sweep.py (run as a script:
``python distributed_sweep_worker.py PROCESS_ID PORT OUT_DIR SWEEP_FLAGS...``): the command
line's sweep (it joins the processes, so nothing may start JAX's backend before it), then
``jra.sweep`` and ``jra.random_search``, each result saved. All three run the same program (4
runs per device, progress on), so each process compiles once."""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402


def save(path: str, result) -> None:
    import jax

    np.savez(path, *[np.asarray(x) for x in jax.tree.leaves(result.params)],
             **{f"curve_{k}": v for k, v in result.curves.items()},
             local_runs=result.timing["local_runs"], devices=result.timing["devices"],
             processes=result.timing["processes"])


def main() -> None:
    process_id, port, out, flags = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    from jaxrl_async.cli.command import main as cli

    code = cli(["sweep", *flags, "--out", os.path.join(out, f"cli{process_id}"),
                "--coordinator-address", f"127.0.0.1:{port}", "--num-processes", "2",
                "--process-id", str(process_id)])  # the CLI joins jax.distributed
    assert code == 0, code
    import jax

    import jaxrl_async as jra
    from tests.test_distributed_sweep import GRID, SEEDS, SPACE, TINY

    assert jax.device_count() == 4 and jax.local_device_count() == 2
    save(os.path.join(out, f"sweep{process_id}.npz"), jra.sweep(TINY, GRID, seeds=SEEDS))
    save(os.path.join(out, f"random{process_id}.npz"),
         jra.random_search(TINY, SPACE, num_samples=8, seeds=SEEDS, seed=3))
    jra.distributed.shutdown()


if __name__ == "__main__":
    main()
