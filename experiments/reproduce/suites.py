"""The published figures each suite is compared against, with their sources.

Each row names a config file under ``jaxrl_async/presets/published/`` (a run directory's
``config.json``: the published settings in our fields) and the figure published for it, with
the repository, file and commit it was read from and how it was measured (its protocol), so our
figure can be taken the same way.
"""

from __future__ import annotations

from typing import NamedTuple


class Source(NamedTuple):
    repo: str
    file: str
    commit: str  # the version the figure was read from

    def cite(self) -> str:
        return f"{self.repo} `{self.file}` @ {self.commit[:7]}"


class Row(NamedTuple):
    config: str  # jaxrl_async/presets/published/<config>.json
    published: float
    published_std: float | None
    source: Source
    protocol: str  # what the published figure averages: "train" or "eval"
    note: str = ""  # settings ours cannot match, how the figure was measured


CLEANRL_PPO = Source("vwxyzjn/cleanrl", "docs/rl-algorithms/ppo.md",
                     "7a96de22014e13dfb0dbf35b17157a1d9d9c7431")
CLEANRL_DQN = Source("vwxyzjn/cleanrl", "docs/rl-algorithms/dqn.md",
                     "35896b1fefa9898b904f7e09bcbe6e168e15d2a9")
CLEANRL_PQN = Source("vwxyzjn/cleanrl", "docs/rl-algorithms/pqn.md (settings: cleanrl/pqn.py "
                     "@ 10334fa)", "10334fa9125c3ba8ba8f9feca462b3ef83f80060")
RLZOO = Source("DLR-RM/rl-baselines3-zoo", "benchmark.md",
               "0088472b8cb622732bdbc4aa3d0d0abde86c67ed")
BLINES = Source("RobertTLange/gymnax-blines", "agents/<env>/ppo.yaml, ppo.pkl",
                "15b76af31ce200b65db31a58d6c746612b8d7ba3")
PUREJAXQL = Source("mttga/purejaxql", "purejaxql/config/alg/pqn_minatar.yaml",
                   "0cd95edadc03fb85a0825ada20ea8803913c3247")

# RL Zoo hyperparams/ppo.yml, the Pendulum-v1 entry (the same at the benchmark's commit
# 0088472 and at 22e3ff2450fd92033f7f032915e1f64894a09584), as written there.
RLZOO_PPO_PENDULUM = dict(n_envs=4, n_timesteps=1e5, policy="MlpPolicy", n_steps=1024,
                          gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                          learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4)
# What the entry leaves to Stable-Baselines3's defaults (DLR-RM/stable-baselines3 @
# e05d2dbe6eda0acd0ef2e316e3e4065677add3eb: ppo/ppo.py, common/policies.py ActorCriticPolicy,
# rl_zoo's `normalize` absent: no VecNormalize).
SB3_PPO_DEFAULTS = dict(batch_size=64, clip_range_vf=None, normalize_advantage=True,
                        vf_coef=0.5, max_grad_norm=0.5, net_arch=(64, 64), activation_fn="tanh",
                        ortho_init=True, log_std_init=0.0, adam_eps=1e-5, normalize=False)


def rlzoo_ppo_fields(entry: dict, defaults: dict = SB3_PPO_DEFAULTS) -> dict:
    """Our PPOConfig fields for an RL Zoo PPO entry on top of SB3's defaults. Not carried over:
    ``use_sde``/``sde_sample_freq`` (gSDE; ours a state-independent Gaussian). The same in
    both without a field: orthogonal init with SB3's gains (sqrt 2 hidden, 0.01 policy, 1 value),
    log-std 0, Adam eps 1e-5, separate actor and critic networks."""
    hp = {**defaults, **entry}
    if hp["normalize"] or hp["ortho_init"] is not True or hp["log_std_init"] != 0.0:
        raise ValueError("rlzoo_ppo_fields: VecNormalize, ortho_init=False and log_std_init "
                         "!= 0 have no field here")
    batch = hp["n_envs"] * hp["n_steps"]
    updates = -(-int(hp["n_timesteps"]) // batch)  # SB3 collects until n_timesteps is reached
    return dict(num_envs=hp["n_envs"], num_steps=hp["n_steps"], total_timesteps=updates * batch,
                num_minibatches=batch // hp["batch_size"], minibatch_layout="sample",
                update_epochs=hp["n_epochs"], gamma=hp["gamma"], gae_lambda=hp["gae_lambda"],
                lr=hp["learning_rate"], anneal_lr=False, clip_eps=hp["clip_range"],
                clip_value=hp["clip_range_vf"] is not None, ent_coef=hp["ent_coef"],
                vf_coef=2 * hp["vf_coef"],  # SB3: vf_coef * mse; ours: vf_coef * mse / 2
                max_grad_norm=hp["max_grad_norm"], hidden_sizes=tuple(hp["net_arch"]),
                activation=hp["activation_fn"], normalize_advantages=hp["normalize_advantage"],
                normalize_obs=hp["normalize"])


CLEANRL_NOTE = ("CleanRL: mean episodic training return over 3 seeds (std over seeds); gymnasium "
                "env, ours gymnax's")
SUITES: dict[str, list[Row]] = {
    "classic": [
        Row("cleanrl_ppo_cartpole", 490.04, 6.12, CLEANRL_PPO, "train", CLEANRL_NOTE),
        Row("cleanrl_ppo_acrobot", -86.36, 1.32, CLEANRL_PPO, "train", CLEANRL_NOTE),
        Row("cleanrl_dqn_cartpole", 498.38, 2.29, CLEANRL_DQN, "train",
            CLEANRL_NOTE + "; dqn_jax.py settings (MSE loss, no LayerNorm, hard target copy "
            "every 500 env steps, no gradient clipping); ours initialises orthogonally"),
        Row("cleanrl_dqn_acrobot", -88.89, 1.56, CLEANRL_DQN, "train",
            CLEANRL_NOTE + "; dqn_jax.py settings as for CartPole"),
        Row("cleanrl_pqn_cartpole", 495.1, 6.9, CLEANRL_PQN, "train",
            CLEANRL_NOTE + "; CleanRL's pqn.py uses RAdam, ours Adam"),
        Row("cleanrl_pqn_acrobot", -95.6, 5.7, CLEANRL_PQN, "train", CLEANRL_NOTE),
        Row("rlzoo_sac_pendulum", -156.995, 88.714, RLZOO, "eval",
            "RL Zoo: one trained agent, deterministic evaluation over 750 episodes (std over "
            "episodes)"),
        Row("rlzoo_ppo_pendulum", -172.225, 104.159, RLZOO, "eval",
            "RL Zoo: one agent, deterministic evaluation over 750 episodes; every setting of "
            "its hyperparams/ppo.yml entry and SB3's defaults carried over (value loss not "
            "clipped, vf_coef 1.0 = SB3's 0.5 on a loss without the 1/2, per-sample "
            "minibatches) but gSDE (use_sde, sde_sample_freq 4): ours a state-independent "
            "Gaussian; 50 greedy evaluation episodes per seed"),
    ],
}
BLINES_NOTE = ("gymnax-blines: one run, final evaluation of 164 episodes with sampled actions "
               "(ppo.pkl); its lr 'warm-up' runs from 5e-4 to 5e-4 (constant, as ours); its "
               "per-sample minibatches as minibatch_layout 'sample' (each env's own steps); "
               "initialisation orthogonal here, LeCun normal there")
for game, figure in (("Breakout", 22.9), ("SpaceInvaders", 131.6), ("Asterix", None),
                     ("Freeway", None)):
    SUITES[f"minatar-{game.lower()}"] = [
        Row(f"gymnax_blines_ppo_{game.lower()}", figure if figure is not None else float("nan"),
            None, BLINES, "eval", BLINES_NOTE),
    ]
CLEANRL_MUJOCO = Source("vwxyzjn/cleanrl", "docs/rl-algorithms/ppo.md (ppo_continuous_action.py, "
                        "MuJoCo v4, openrlbenchmark tag pr-424)",
                        "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb")
MUJOCO_NOTE = ("CleanRL: mean episodic training return at the end of 1M steps, 3 seeds (std over "
               "seeds), gymnasium's MuJoCo v4 in one env with its normalisation wrappers; ours "
               "EnvPool's v4 task, the same normalisation numbers (envs/host_normalize.py), "
               "truncated episodes bootstrapped from V(final obs) (CleanRL cuts them), the "
               "async runner's lag 1 (CleanRL acts with the params it updates)")
SUITES["mujoco"] = [
    Row(f"cleanrl_ppo_{task.lower()}{layout}", mean, std, CLEANRL_MUJOCO, "train",
        MUJOCO_NOTE + ("; 8 envs x 256 steps, the same 2048-step batch" if layout else ""))
    for layout in ("", "_8envs")
    for task, mean, std in (("HalfCheetah", 1442.64, 46.03), ("Hopper", 2382.86, 271.74),
                            ("Walker2d", 2287.95, 571.78))
]
SUITES["atari"] = [
    Row("cleanrl_ppo_pong_envpool", 20.45, 0.09, Source(
        "vwxyzjn/cleanrl", "docs/rl-algorithms/ppo.md (ppo_atari_envpool.py, Pong-v5, "
        "openrlbenchmark tag pr-424)", "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"), "train",
        "CleanRL: mean episodic training return at 10M steps, 3 seeds; the same EnvPool envs; "
        "ours bootstraps truncations from V(final obs) and acts one update behind (lag 1)"),
]
SUITES["minatar-pqn"] = [
    Row("purejaxql_pqn_minatar_breakout", float("nan"), None, PUREJAXQL, "eval",
        "purejaxql publishes settings and plots, no per-game figure in its text; greedy test "
        "on 128 envs"),
]
