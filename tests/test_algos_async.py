"""The new algorithms under the async runner: with lag 0 it must compute what the sync runner
computes (replay buffers and recurrent memory included; with 2 learner devices the ``PerEnv``
learner state is split with the envs, ``runners.common.learner_spec``)."""

import dataclasses

import jax
import numpy as np
import pytest

import jaxrl_async as jra
import jaxrl_async.config.shared

REPLAY = dict(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 10, buffer_size=128,
              batch_size=16, samples_per_insert=4.0, learning_starts=64, fast_compile=True)
CONFIGS = {
    "dqn": jra.DQNConfig(**REPLAY),
    "sac": jra.SACConfig(**REPLAY, hidden_sizes=(16, 16)),
    "recurrent_ppo": jra.RecurrentPPOConfig(
        env="MemoryChain-bsuite", num_envs=4, num_steps=16, bptt_length=4, num_minibatches=2,
        update_epochs=2, memory_size=16, hidden_sizes=(16,), total_timesteps=4 * 16 * 4,
        fast_compile=True),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, learner_devices", [("dqn", 1), ("dqn", 2), ("sac", 1),
                                                   ("recurrent_ppo", 1)])
def test_lag_0_reproduces_the_sync_runner(name, learner_devices, devices):
    cfg = CONFIGS[name]
    sync = jax.jit(jra.make_train(cfg))(jax.random.key(1))
    runner = jaxrl_async.config.shared.AsyncConfig(lag=0, max_staleness=0,
                                            learner_devices=learner_devices)
    out = jra.train(dataclasses.replace(cfg, runner=runner), seed=1, progress=False)
    for a, b in zip(jax.tree.leaves(sync.state.learner), jax.tree.leaves(out.state.learner)):
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-4,
                                   atol=1e-5)
