"""The runners compile a run's init (run once) for compile time, not speed; it must give the
same run state, bit for bit, as the default compile, for every algorithm, or a run would
depend on how it was started (``jra.train`` against ``make_train``, sync against async)."""

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.runners import sync
from jaxrl_async.runners.common import compiler_options

CONFIGS = {
    "ppo": jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=64),
    "ppo-cnn": jra.PPOConfig(env="Breakout-MinAtar", torso="cnn", hidden_sizes=(16,),
                             num_envs=4, num_steps=8, total_timesteps=64),
    "recurrent_ppo": jra.RecurrentPPOConfig(env="CartPole-v1", num_envs=4, num_steps=8,
                                            bptt_length=8, num_minibatches=1,
                                            total_timesteps=64),
    "impala": jra.ImpalaConfig(env="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=64),
    "dqn": jra.DQNConfig(env="CartPole-v1", num_envs=4, total_timesteps=64, buffer_size=64,
                         learning_starts=16, batch_size=8),
    "pqn": jra.PQNConfig(env="CartPole-v1", num_envs=4, num_steps=8, num_minibatches=2,
                         total_timesteps=64),
    "sac": jra.SACConfig(env="Pendulum-v1", num_envs=2, total_timesteps=64, buffer_size=64,
                         learning_starts=16, batch_size=8),
}


def leaves(state) -> list[np.ndarray]:
    def raw(x):
        return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    return [np.asarray(raw(x)) for x in jax.tree.leaves(state)]


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the options differ on a CPU only")
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_init_compiled_for_compile_time_is_bit_identical(name):
    cfg = CONFIGS[name]
    assert compiler_options(cfg, runs_once=True) != compiler_options(cfg)  # the CPU: they differ
    init = sync._host_programs(cfg)[1]
    key = jax.random.key(7)
    default = leaves(init.lower(key).compile(compiler_options(cfg))(key))
    once = leaves(init.lower(key).compile(compiler_options(cfg, runs_once=True))(key))
    assert len(default) == len(once)
    for a, b in zip(default, once, strict=True):
        np.testing.assert_array_equal(a, b)
