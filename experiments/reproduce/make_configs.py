"""Writes jaxrl_async/presets/published/*.json: the published settings of each reproduced row in
our config fields (a run directory's config.json). Run from the repository root:
``python experiments/reproduce/make_configs.py``. The comments give each setting's source."""

import json
from pathlib import Path

import jaxrl_async as jra
from experiments.reproduce.suites import RLZOO_PPO_PENDULUM, rlzoo_ppo_fields
from jaxrl_async.config.shared import to_dict

out = Path("jaxrl_async/presets/published")
EVAL = dict(eval_episodes=10, eval_greedy=True, fast_compile=True)
cleanrl_ppo = dict(total_timesteps=500_000, num_envs=4, num_steps=128, num_minibatches=4,
                   update_epochs=4, lr=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
                   clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
                   hidden_sizes=(64, 64), activation="tanh", eval_every=98, **EVAL)
# CleanRL cleanrl/dqn_jax.py: one env, a gradient step of 128 every 10 env steps (train
# frequency 10: samples_per_insert 12.8), buffer 1e4, learning starts 1e4, hard target copy
# every 500 env steps (50 gradient steps), eps 1 -> 0.05 over half the steps, Adam 2.5e-4
# (eps 1e-8) without clipping, MSE loss on max-Q targets, Dense 120-84-A ReLU (flax default
# init; ours orthogonal), truncation bootstraps (only `terminated` cuts the target).
cleanrl_dqn = dict(total_timesteps=500_000, num_envs=1, num_steps=10, buffer_size=10_000,
                   batch_size=128, samples_per_insert=12.8, learning_starts=10_000, n_step=1,
                   lr=2.5e-4, anneal_lr=False, gamma=0.99, tau=1.0, target_update_every=50,
                   double_q=False, layer_norm=False, hidden_sizes=(120, 84), activation="relu",
                   eps_start=1.0, eps_end=0.05, eps_decay_fraction=0.5, max_grad_norm=1e6,
                   td_loss="mse", eval_every=5000, log_every=500, **EVAL)
cleanrl_pqn = dict(total_timesteps=500_000, num_envs=4, num_steps=128, num_minibatches=4,
                   update_epochs=4, lr=2.5e-4, anneal_lr=True, gamma=0.99, q_lambda=0.65,
                   layer_norm=True, hidden_sizes=(120, 84), activation="relu", eps_start=1.0,
                   eps_end=0.05, eps_decay_fraction=0.5, max_grad_norm=10.0, eval_every=98,
                   **EVAL)
configs = {
    "cleanrl_ppo_cartpole": jra.PPOConfig(env="CartPole-v1", **cleanrl_ppo),
    "cleanrl_ppo_acrobot": jra.PPOConfig(env="Acrobot-v1", **cleanrl_ppo),
    "cleanrl_dqn_cartpole": jra.DQNConfig(env="CartPole-v1", **cleanrl_dqn),
    "cleanrl_dqn_acrobot": jra.DQNConfig(env="Acrobot-v1", **cleanrl_dqn),
    "cleanrl_pqn_cartpole": jra.PQNConfig(env="CartPole-v1", **cleanrl_pqn),
    "cleanrl_pqn_acrobot": jra.PQNConfig(env="Acrobot-v1", **cleanrl_pqn),
    # RL Zoo hyperparams/sac.yml Pendulum-v1: 2e4 steps, lr 1e-3, SB3 SAC defaults otherwise
    # (buffer 1e6, batch 256, tau 0.005, gamma 0.99, one gradient step per env step, auto
    # entropy, [256, 256] ReLU, learning_starts 100).
    "rlzoo_sac_pendulum": jra.SACConfig(env="Pendulum-v1", total_timesteps=20_000, num_envs=4,
                                        num_steps=8, buffer_size=1_000_000, batch_size=256,
                                        samples_per_insert=256.0, learning_starts=128,
                                        lr=1e-3, tau=0.005, gamma=0.99,
                                        hidden_sizes=(256, 256), activation="relu",
                                        eval_every=125, **EVAL),
    # RL Zoo hyperparams/ppo.yml Pendulum-v1 on SB3's defaults (suites.rlzoo_ppo_fields: the
    # entry's values, their mapping and what is not carried over: gSDE). 50 greedy evaluation
    # episodes per seed (RL Zoo's figure: 750 deterministic episodes of one agent).
    "rlzoo_ppo_pendulum": jra.PPOConfig(env="Pendulum-v1", **rlzoo_ppo_fields(RLZOO_PPO_PENDULUM),
                                        log_every=5, eval_every=5,
                                        **{**EVAL, "eval_episodes": 50}),
}
# gymnax-blines agents/<env>/ppo.yaml: MLP 256x2 on the flattened observation, relu; its
# utils/ppo.py permutes the (step, env) samples one by one: minibatch_layout "sample" (each
# env's own steps; docs/results.md has both layouts measured).
for game in ("Breakout", "SpaceInvaders", "Asterix", "Freeway"):
    configs[f"gymnax_blines_ppo_{game.lower()}"] = jra.PPOConfig(
        env=f"{game}-MinAtar", torso="mlp", hidden_sizes=(256, 256), activation="relu",
        total_timesteps=10_000_000, num_envs=64, num_steps=128, num_minibatches=8,
        update_epochs=4, minibatch_layout="sample", gamma=0.999, gae_lambda=0.95, clip_eps=0.2,
        ent_coef=0.01, vf_coef=0.5, lr=5e-4, anneal_lr=False, max_grad_norm=0.5, log_every=20,
        eval_every=122, eval_episodes=164, eval_greedy=False)
# purejaxql config/alg/pqn_minatar.yaml: CNN, 128 envs x 32 steps, 32 minibatches, 2 epochs,
# lr 5e-4 linear decay, grad norm 10, gamma 0.99, lambda 0.65, eps 1 -> 0.05 over 10%,
# LayerNorm; greedy test on 128 envs every 5% of the updates.
configs["purejaxql_pqn_minatar_breakout"] = jra.PQNConfig(
    env="Breakout-MinAtar", torso="cnn", total_timesteps=10_000_000, num_envs=128, num_steps=32,
    num_minibatches=32, update_epochs=2, lr=5e-4, anneal_lr=True, max_grad_norm=10.0,
    gamma=0.99, q_lambda=0.65, eps_start=1.0, eps_end=0.05, eps_decay_fraction=0.1,
    layer_norm=True, log_every=20, eval_every=122, eval_episodes=128, eval_greedy=True)
# CleanRL cleanrl/ppo_continuous_action.py (MuJoCo v4, gymnasium): 1M steps of one env x 2048
# steps (488 updates: CleanRL trains total // batch iterations too), lr 3e-4 annealed, gamma
# 0.99, lambda 0.95, 32 minibatches x 10 epochs, clip 0.2 (value clipped too), entropy 0,
# value 0.5, grad norm 0.5, Adam eps 1e-5, 64x64 tanh actor and critic (orthogonal, gains
# sqrt 2 / 0.01 / 1), state-independent log-std from 0; the envs wrapped in
# NormalizeObservation, obs clip 10, NormalizeReward(gamma), reward clip 10. The second layout:
# 8 envs x 256 steps, the same 2048-step batch. EnvPool's MuJoCo v4 tasks, the async runner's
# defaults (lag 1); no evaluation in training (host envs: a final greedy one after training).
cleanrl_mujoco = dict(total_timesteps=999_424, num_envs=1, num_steps=2048, num_minibatches=32,
                      update_epochs=10, lr=3e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
                      clip_eps=0.2, clip_value=True, ent_coef=0.0, vf_coef=0.5,
                      max_grad_norm=0.5, hidden_sizes=(64, 64), activation="tanh",
                      normalize_advantages=True, normalize_obs=True, normalize_reward=True,
                      obs_clip=10.0, reward_clip=10.0, minibatch_layout="sample",
                      eval_episodes=10, eval_greedy=True,
                      runner=jra.AsyncConfig())
for task in ("HalfCheetah", "Hopper", "Walker2d"):
    configs[f"cleanrl_ppo_{task.lower()}"] = jra.PPOConfig(env=f"envpool:{task}-v4",
                                                           **cleanrl_mujoco)
    configs[f"cleanrl_ppo_{task.lower()}_8envs"] = jra.PPOConfig(
        env=f"envpool:{task}-v4", **{**cleanrl_mujoco, "num_envs": 8, "num_steps": 256})
# CleanRL cleanrl/ppo_atari_envpool.py on EnvPool's Pong-v5: 10M steps of 8 envs x 128 steps,
# lr 2.5e-4 annealed, 4 minibatches x 4 epochs, clip 0.1 (value clipped too), entropy 0.01,
# value 0.5, grad norm 0.5, the Nature CNN; its episodic_life and reward_clip change nothing
# in Pong (no lives, rewards +-1), so EnvPool's defaults are its envs. For a GPU machine
# (experiments/checks/accelerator_check.sh, step atari_ppo): on a 2-core CPU the CNN is hours.
configs["cleanrl_ppo_pong_envpool"] = jra.PPOConfig(
    env="envpool:Pong-v5", torso="nature", total_timesteps=9_999_360, num_envs=8, num_steps=128,
    num_minibatches=4, update_epochs=4, lr=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
    clip_eps=0.1, clip_value=True, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
    minibatch_layout="sample", log_every=50, eval_episodes=10, eval_greedy=True,
    runner=jra.AsyncConfig())
for name, cfg in configs.items():
    (out / f"{name}.json").write_text(json.dumps(to_dict(cfg), indent=2) + "\n")
    print(name, cfg.num_updates, cfg.steps_per_update)
