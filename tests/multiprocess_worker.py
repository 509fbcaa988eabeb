"""One process of the 2-process test in test_distributed.py (run as a script)."""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402

from jaxrl_async import distributed  # noqa: E402


def main() -> None:
    process_id, port, out_dir, runner = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import jax

    import jaxrl_async as jra
    from tests.test_distributed import CONFIGS

    assert jax.device_count() == 4 and jax.local_device_count() == 2
    for c, cfg in enumerate(CONFIGS[runner]):
        result = jra.train(cfg, seed=5, run_dir=os.path.join(out_dir, f"run{process_id}_{c}"),
                           progress=False)
        leaves = [np.asarray(x) for x in jax.tree.leaves(result.params)]
        np.savez(os.path.join(out_dir, f"params{process_id}_{c}.npz"), *leaves,
                 returns=result.metrics["episode_return"])
    distributed.shutdown()


if __name__ == "__main__":
    main()
