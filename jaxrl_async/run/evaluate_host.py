"""Evaluation on fresh host envs (``gymnasium:<id>``, ``envpool:<id>``): what ``jra.evaluate``
and ``save_gif`` do for a host env id (``evaluate.py`` picks).

The ``num_episodes`` envs are made anew (gymnasium's stepped one after another in this
thread, EnvPool's as one pool), reset with seeds drawn from the key as the training run draws
them, and stepped together until each has finished one episode; the policy acts on all of them
in one jitted call per step (``eval_act``: greedy, the mode), on observations normalised with
the training statistics, frozen (every env's moments pooled: ``host_normalize.pooled``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.algos import Algorithm
from jaxrl_async.envs import make_host_env
from jaxrl_async.envs.host import env_action, split_host_id
from jaxrl_async.envs.host_normalize import scale
from jaxrl_async.runners.host_streams import env_seeds
from jaxrl_async.runners.rollout import env_keys, eval_policy


@functools.cache
def _policy(algo: Algorithm, greedy: bool):
    """``(params, obs [n, ...], key, t) -> action [n]``, jitted: the eval policy at step ``t``
    with the act keys ``run_episodes`` draws."""
    policy = eval_policy(algo, greedy)

    def act(params, obs, key, t):
        ids = jnp.arange(obs.shape[0], dtype=jnp.int32)
        keys = env_keys(jax.random.fold_in(key, t), ids)
        act_keys = jax.vmap(jax.random.split, out_axes=1)(keys)[0]
        return policy(params, obs, act_keys, (), jnp.zeros(obs.shape[:1], bool))[0]

    return jax.jit(act)


def _observe(cfg: Any, moments: Any):
    if moments is None:
        return lambda obs: obs
    frozen = jax.tree.map(np.asarray, moments)
    return lambda obs: scale(obs, frozen, float(cfg.obs_clip))


def run_host_episodes(cfg: Any, algo: Algorithm, params: Any, moments: Any, num_episodes: int,
                      greedy: bool, key: jax.Array, max_steps: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One episode on each of ``num_episodes`` fresh host envs: (return [n], length [n], ended
    [n]), as ``rollout.run_episodes`` for device envs."""
    act, observe = _policy(algo, greedy), _observe(cfg, moments)
    reset_key, key = jax.random.split(key)
    seeds = np.asarray(env_seeds(reset_key, jnp.arange(num_episodes, dtype=jnp.int32)))
    env = make_host_env(cfg.env, num_episodes, vectorization="inline",
                        flatten_obs=cfg.flatten_obs)
    returns, lengths = np.zeros(num_episodes), np.zeros(num_episodes)
    ended = np.zeros(num_episodes, bool)
    try:
        obs = observe(env.reset(seeds))
        for t in range(max_steps):
            out = env.step(np.asarray(act(params, obs, key, np.int32(t))))
            returns += np.where(ended, 0.0, out.reward)
            lengths += ~ended
            ended |= out.terminated | out.truncated
            if ended.all():
                break
            obs = observe(out.obs)
    finally:
        env.close()
    return returns, lengths, ended


def check_host_renderer(env_id: str) -> None:
    """``ValueError`` (one line) unless ``save_host_gif`` can draw ``env_id``: a gymnasium env
    that renders ``rgb_array`` here (EnvPool renders nothing: its gymnasium twin does)."""
    backend, name = split_host_id(env_id)
    if backend == "envpool":
        raise ValueError(f"{env_id} cannot be drawn: EnvPool envs do not render; a GIF of the "
                         f"same task needs its gymnasium id, gymnasium:{name} (jaxrl-async eval "
                         "draws the env the run trained on)")
    _setup_headless()
    import gymnasium

    try:
        env = gymnasium.make(name, render_mode="rgb_array")
        try:
            env.reset(seed=0)
            frame = env.render()
        finally:
            env.close()
    except Exception as error:  # noqa: BLE001 - whatever the renderer lacks, said in one line
        raise ValueError(f"{env_id} cannot be drawn here: rendering it as rgb_array failed with "
                         f"{type(error).__name__}: {' '.join(str(error).split())} (classic "
                         'control needs pygame: pip install -e ".[render]")') from None
    if not isinstance(frame, np.ndarray) or frame.ndim != 3:
        raise ValueError(f"{env_id} cannot be drawn: its render() returned no rgb_array frame")


def _setup_headless() -> None:
    """Draw off-screen: no sound and no window (pygame's SDL probes the desktop otherwise)."""
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def save_host_gif(cfg: Any, algo: Algorithm, params: Any, moments: Any, path: str | Path,
                  greedy: bool, seed: int, max_frames: int) -> Path:
    """One episode of a fresh gymnasium env (``render_mode="rgb_array"``), at most
    ``max_frames`` steps, as a GIF (Pillow, which matplotlib brings)."""
    from PIL import Image

    check_host_renderer(cfg.env)
    import gymnasium

    from jaxrl_async.envs import env_spec

    spec = env_spec(cfg.env, flatten_obs=cfg.flatten_obs)
    act, observe = _policy(algo, greedy), _observe(cfg, moments)
    key = jax.random.key(seed)
    env = gymnasium.make(split_host_id(cfg.env)[1], render_mode="rgb_array")
    try:
        obs, _ = env.reset(seed=int(env_seeds(key, jnp.zeros(1, jnp.int32))[0]))
        frames = [env.render()]
        for t in range(max_frames):
            batch = observe(np.asarray(obs, spec.obs_dtype).reshape(1, *spec.obs_shape))
            action = env_action(spec, np.asarray(act(params, batch, key, np.int32(t))))[0]
            obs, _, terminated, truncated, _ = env.step(action)
            frames.append(env.render())
            if terminated or truncated:
                break
    finally:
        env.close()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=40, loop=0)
    return path
