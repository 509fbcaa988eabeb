"""The runners compile a run's init (run once) for compile time, not speed; it must give the
same run state, bit for bit, as the default compile, for every algorithm, or a run would
depend on how it was started (``jra.train`` against ``make_train``, sync against async).
The options are ones the running jaxlib has: jaxlib 0.11 dropped the legacy emitters."""

import dataclasses

import jax
import jaxlib
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.runners import sync
from jaxrl_async.runners.common import compiler_options, xla_option_known

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
    if not xla_option_known("xla_cpu_use_fusion_emitters", False):
        pytest.skip(f"jaxlib {jaxlib.__version__} has no legacy emitters: one compile only")
    assert compiler_options(cfg, runs_once=True) != compiler_options(cfg)  # the CPU: they differ
    init = sync._host_programs(cfg)[1]
    key, hyper = jax.random.key(7), sync.hyperparameters(cfg)
    default = leaves(init.lower(hyper, key).compile(compiler_options(cfg))(hyper, key))
    once = leaves(init.lower(hyper, key).compile(compiler_options(cfg, runs_once=True))(
        hyper, key))
    assert len(default) == len(once)
    for a, b in zip(default, once, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the options differ on a CPU only")
def test_options_are_ones_the_running_jaxlib_has():
    legacy = tuple(map(int, jaxlib.__version__.split(".")[:2])) < (0, 11)
    assert xla_option_known("xla_cpu_use_fusion_emitters", False) is legacy
    assert xla_option_known("xla_backend_optimization_level", 2)
    assert not xla_option_known("xla_cpu_no_such_option", True)
    cfg = dataclasses.replace(CONFIGS["ppo"], fast_compile=True)
    expected = {"xla_cpu_use_fusion_emitters": False} if legacy else {}
    init = sync._host_programs(cfg)[1]
    key, hyper = jax.random.key(7), sync.hyperparameters(cfg)
    for options in (compiler_options(cfg), compiler_options(cfg, runs_once=True)):
        assert options == expected
        init.lower(hyper, key).compile(options)  # the old options: "No such compile option" on 0.11
