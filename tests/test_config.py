"""Every config validation rule raises ValueError naming the field, before anything compiles."""

import dataclasses

import jax
import pytest

import jaxrl_async as jra
from jaxrl_async.config.shared import hyper_fields, static_fields


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"lr": -1e-3}, "lr"),
        ({"lr": 0.0}, "lr"),
        ({"gamma": 1.5}, "gamma"),
        ({"gae_lambda": -0.1}, "gae_lambda"),
        ({"clip_eps": 0.0}, "clip_eps"),
        ({"ent_coef": -0.01}, "ent_coef"),
        ({"vf_coef": -1.0}, "vf_coef"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"num_envs": 0}, "num_envs"),
        ({"num_envs": 2.5}, "num_envs"),
        ({"num_steps": -4}, "num_steps"),
        ({"update_epochs": 0}, "update_epochs"),
        ({"num_minibatches": 3}, "num_minibatches"),  # does not divide num_steps = 128
        ({"total_timesteps": 100}, "total_timesteps"),  # less than one rollout (512)
        ({"env": "CartPole-v9"}, "env"),
        ({"torso": "transformer"}, "torso"),
        ({"torso": "cnn"}, "torso"),  # CartPole observations are not images
        ({"torso": "nature"}, "torso"),  # nor stacked frames
        ({"torso": "nature", "env": "Breakout-MinAtar"}, "torso"),  # 10x10: too small
        ({"activation": "sigmoid"}, "activation"),
        ({"hidden_sizes": (64, 0)}, "hidden_sizes"),
        ({"hidden_sizes": ()}, "hidden_sizes"),
        ({"anneal_lr": "yes"}, "anneal_lr"),
        ({"num_envs": 6, "runner": jra.SyncConfig(num_devices=4)}, "num_envs"),
        ({"runner": "sync"}, "runner"),
        ({"log_every": 0}, "log_every"),
    ],
)
def test_bad_value_names_the_field(kwargs, field):
    with pytest.raises(ValueError) as e:
        jra.PPOConfig(**kwargs)
    assert f"PPOConfig.{field}" in str(e.value)


def test_messages_say_what_is_allowed():
    with pytest.raises(ValueError, match=r"must be one of \['auto', 'mlp', 'cnn', 'nature'\]"):
        jra.PPOConfig(torso="transformer")
    with pytest.raises(ValueError, match="known ids: .*CartPole-v1"):
        jra.PPOConfig(env="nope")
    with pytest.raises(ValueError, match="must divide num_steps = 128"):
        jra.PPOConfig(num_minibatches=3)
    with pytest.raises(ValueError, match=r"SyncConfig.num_devices must be a positive integer"):
        jra.SyncConfig(num_devices=0)


def test_too_many_devices_is_refused_before_compiling(devices):
    cfg = jra.PPOConfig(num_envs=8, runner=jra.SyncConfig(num_devices=len(devices) * 2))
    with pytest.raises(ValueError, match=r"PPOConfig.runner.num_devices must be <= the 4"):
        jra.make_train(cfg)


def test_configs_are_frozen_and_hashable():
    cfg = jra.PPOConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
    assert hash(cfg.runner) == hash(jra.SyncConfig())


def test_hyperparameters_are_leaves_and_shapes_are_static():
    cfg = jra.PPOConfig()
    assert {"lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef",
            "max_grad_norm"} <= set(hyper_fields(cfg))
    assert {"num_envs", "num_steps", "hidden_sizes", "env", "runner"} <= set(static_fields(cfg))
    leaves, treedef = jax.tree.flatten(cfg)
    assert len(leaves) == len(hyper_fields(cfg))
    doubled = jax.tree.map(lambda x: x * 2, cfg)  # no re-validation of traced/derived leaves
    assert doubled.lr == cfg.lr * 2 and doubled.num_envs == cfg.num_envs
    other = jra.PPOConfig(num_envs=8)
    assert jax.tree.structure(other) != treedef  # static fields are part of the structure


def test_grad_accum_steps_is_checked_where_gradients_accumulate_and_refused_elsewhere():
    with pytest.raises(ValueError, match=r"ImpalaConfig.grad_accum_steps must be 1 for "
                                         r"ImpalaConfig \(gradients are accumulated by"):
        jra.ImpalaConfig(grad_accum_steps=2)
    with pytest.raises(ValueError, match="DQNConfig.grad_accum_steps must be 1"):
        jra.DQNConfig(grad_accum_steps=2)
    # recurrent PPO splits minibatches of chunks: 16 steps / bptt 4 / 2 minibatches = 2 chunks
    with pytest.raises(ValueError, match=r"RecurrentPPOConfig.grad_accum_steps must divide "
                                         r"the chunks per minibatch = 2"):
        jra.RecurrentPPOConfig(num_steps=16, bptt_length=4, num_minibatches=2,
                               grad_accum_steps=4)
    with pytest.raises(ValueError, match="PQNConfig.grad_accum_steps must divide the steps"):
        jra.PQNConfig(num_steps=64, num_minibatches=16, grad_accum_steps=3)
    assert jra.PQNConfig(num_steps=64, num_minibatches=16, grad_accum_steps=4).grad_accum_steps
