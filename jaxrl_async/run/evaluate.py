"""Evaluation on fresh environments: ``jra.evaluate(params, cfg, num_episodes, greedy=True)``.

``num_episodes`` envs run in parallel from a fresh reset until each has finished one episode
(one compiled ``while_loop``). ``greedy=True`` acts with the policy's mode (argmax of the
logits, the Gaussian mean) through the algorithm's ``eval_act``. For a config with
``normalize_obs`` the observations are standardised with the training statistics, frozen: pass
the training state (a ``TrainResult`` or ``RunState``) instead of bare params, or
``obs_moments=``. ``save_gif`` records one episode for envs gymnax can draw. Host envs
(``gymnasium:<id>``, ``envpool:<id>``) are evaluated the same way on fresh host envs
(``evaluate_host``), and drawn where gymnasium renders them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.algos import make_algorithm
from jaxrl_async.config.fields import check_seed
from jaxrl_async.envs import RunningMoments, is_host_env, make_env, normalize
from jaxrl_async.envs.host_normalize import pooled
from jaxrl_async.run import evaluate_host
from jaxrl_async.runners.host_streams import HostEnvState, host_plan
from jaxrl_async.runners.rollout import env_keys, eval_policy, run_episodes
from jaxrl_async.runners.state import RunState, TrainResult


def obs_moments(state: RunState) -> RunningMoments | None:
    """The observation-normalisation statistics of a run state (merged over every shard; a
    host-env run's pooled over its envs), if any."""
    if getattr(state, "obs_moments", ()) != ():
        return state.obs_moments
    if isinstance(state.env, HostEnvState):
        normalizer = state.env.normalizer
        return None if normalizer == () or normalizer.obs == () else pooled(normalizer.obs)
    env_state = state.env.env_state
    if not hasattr(env_state, "moments"):
        return None
    return jax.tree.map(lambda x: x[0], env_state.moments)


def _split(source: Any, cfg: Any, moments: RunningMoments | None):
    """(policy params, moments) from params, a ``RunState`` or a ``TrainResult``."""
    if isinstance(source, TrainResult):
        source = source.state
    if isinstance(source, RunState) or hasattr(source, "learner") and hasattr(source, "env"):
        params = _env_algo(cfg)[1].policy_params(source.learner)
        return params, obs_moments(source) if moments is None else moments
    return source, moments


@functools.cache
def _env_algo(cfg: Any):
    """(env, algorithm) of a device env's config; (its spec, algorithm) of a host env's."""
    if is_host_env(cfg.env):
        spec = host_plan(cfg).policy_spec
        return spec, make_algorithm(cfg, spec)
    env = make_env(cfg.env, flatten_obs=cfg.flatten_obs, normalize_obs=False)
    return env, make_algorithm(cfg, env.spec)


def _spec(cfg: Any):
    env = _env_algo(cfg)[0]
    return env if is_host_env(cfg.env) else env.spec


def _check_greedy(cfg: Any, greedy: bool) -> None:
    if _env_algo(cfg)[1].eval_act is None and greedy:
        raise ValueError(f"{type(cfg).__name__}: the {cfg.name} algorithm has no eval_act, so "
                         "it cannot act greedily; use greedy=False (its behaviour policy)")


@functools.cache
def _program(cfg: Any, num_episodes: int, greedy: bool, max_steps: int):
    env, algo = _env_algo(cfg)
    _check_greedy(cfg, greedy)

    def run(params, moments, key):
        observe = None if moments is None else (lambda obs: normalize(obs, moments,
                                                                       cfg.obs_clip))
        ids = jnp.arange(num_episodes, dtype=jnp.int32)
        return run_episodes(env, algo, params, key, ids, greedy, max_steps, observe)

    return jax.jit(run)


def evaluate(
    params: Any,
    cfg: Any,
    num_episodes: int = 10,
    greedy: bool = True,
    *,
    seed: int = 0,
    obs_moments: RunningMoments | None = None,
    max_steps: int | None = None,
    key: jax.Array | None = None,
) -> dict[str, Any]:
    """Returns of ``num_episodes`` episodes on fresh envs.

    ``params``: policy params, or the training state (``TrainResult``/``RunState``), which
    also carries the observation statistics a ``normalize_obs`` config needs. Returns
    ``{"returns": [n], "lengths": [n], "mean_return", "std_return", "mean_length",
    "num_episodes", "greedy"}``; episodes still running after ``max_steps`` (default: the
    env's time limit, else 10,000) count with their return so far. ``key``: the PRNG key of
    the envs' resets and steps (default ``jax.random.key(seed)``); evaluation during training
    (``eval_every``) after update k uses ``runners.common.eval_key(state.key, k)``.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    if key is None:
        check_seed(seed)
    params, moments = _split(params, cfg, obs_moments)
    if cfg.normalize_obs and moments is None:
        raise ValueError(f"{type(cfg).__name__}.normalize_obs is set: evaluation needs the "
                         "training statistics; pass the training state (result or "
                         "result.state) instead of bare params, or obs_moments=...")
    if not cfg.normalize_obs:
        moments = None
    max_steps = max_steps or _spec(cfg).max_episode_steps or 10_000
    key = jax.random.key(seed) if key is None else key
    if is_host_env(cfg.env):
        _check_greedy(cfg, greedy)
        returns, lengths, done = evaluate_host.run_host_episodes(
            cfg, _env_algo(cfg)[1], params, moments, int(num_episodes), bool(greedy), key,
            int(max_steps))
    else:
        program = _program(cfg, int(num_episodes), bool(greedy), int(max_steps))
        returns, lengths, done = jax.device_get(program(params, moments, key))
    return {
        "returns": np.asarray(returns), "lengths": np.asarray(lengths),
        "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
        "mean_length": float(np.mean(lengths)), "num_episodes": int(num_episodes),
        "greedy": bool(greedy), "all_finished": bool(np.all(done)),
    }


# What gymnax's Visualizer draws: classic control through gymnasium's pygame renderer, the rest
# with matplotlib alone (gymnax.visualize.visualizer).
GYMNASIUM_DRAWN = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0",
                   "MountainCarContinuous-v0")
MATPLOTLIB_DRAWN = ("Catch-bsuite", "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar",
                    "Seaquest-MinAtar", "SpaceInvaders-MinAtar", "Pong-misc", "PointRobot-misc",
                    "MetaMaze-misc", "FourRooms-misc")


def check_renderer(env_id: str) -> None:
    """``ValueError`` (one line) unless ``save_gif`` can draw ``env_id`` here: gymnax draws
    the envs above, the classic-control ones only with pygame (the ``render`` extra); a host
    env: gymnasium's that render ``rgb_array`` (``evaluate_host.check_host_renderer``)."""
    import importlib.util

    if is_host_env(env_id):
        evaluate_host.check_host_renderer(env_id)
    elif env_id in GYMNASIUM_DRAWN:
        if importlib.util.find_spec("pygame") is None:
            raise ValueError(f"a GIF of {env_id} needs pygame, which is not installed: "
                             'pip install -e ".[render]" (the render extra)')
    elif env_id not in MATPLOTLIB_DRAWN:
        raise ValueError(f"gymnax cannot draw {env_id}; GIFs work for "
                         + ", ".join(GYMNASIUM_DRAWN + MATPLOTLIB_DRAWN))


def save_gif(
    params: Any,
    cfg: Any,
    path: str | Path,
    greedy: bool = True,
    *,
    seed: int = 0,
    obs_moments: RunningMoments | None = None,
    max_frames: int = 500,
) -> Path:
    """Render one episode (at most ``max_frames`` steps) to a GIF with gymnax's visualizer.

    Works for the envs gymnax draws: MinAtar, bsuite Catch, and the classic-control ones
    (those need ``pip install -e ".[render]"``, for pygame); ``check_renderer`` says so before
    anything runs.
    """
    import os

    import gymnax

    check_renderer(cfg.env)
    if is_host_env(cfg.env):
        _check_greedy(cfg, greedy)
        params, moments = _split(params, cfg, obs_moments)
        return evaluate_host.save_host_gif(cfg, _env_algo(cfg)[1], params,
                                           moments if cfg.normalize_obs else None, path,
                                           greedy, check_seed(seed), max_frames)

    # pygame (classic control) draws off-screen: no sound, no window (without these SDL
    # probes the desktop and prints a line per frame on a headless machine)
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    from gymnax.visualize import Visualizer

    params, moments = _split(params, cfg, obs_moments)
    moments = moments if cfg.normalize_obs else None
    env, _ = _env_algo(cfg)
    raw_env, raw_params = gymnax.make(cfg.env)
    _check_greedy(cfg, greedy)
    policy = eval_policy(_env_algo(cfg)[1], greedy)

    @jax.jit
    def act(params, obs, key):
        obs = obs if moments is None else normalize(obs, moments, cfg.obs_clip)
        return policy(params, obs[None], key[None], (), jnp.ones(1, bool))[0][0]

    inner = _gymnax_state  # the raw gymnax state under our wrappers
    key = jax.random.key(check_seed(seed))
    obs, state = jax.jit(env.reset)(env_keys(key, jnp.zeros(1, jnp.int32)))
    step = jax.jit(env.step)
    frames, rewards = [jax.tree.map(lambda x: x[0], inner(state))], []
    for _ in range(max_frames):
        key, act_key, env_key = jax.random.split(key, 3)
        action = act(params, obs[0], act_key)
        obs, state, reward, terminated, truncated, _ = step(env_key[None], state, action[None])
        if bool(terminated[0] | truncated[0]):
            break
        frames.append(jax.tree.map(lambda x: x[0], inner(state)))
        rewards.append(float(reward[0]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Visualizer(raw_env, raw_params, frames, np.cumsum([0.0, *rewards])).animate(str(path))
    return path


def _gymnax_state(state: Any) -> Any:
    while hasattr(state, "env_state"):
        state = state.env_state
    return state
