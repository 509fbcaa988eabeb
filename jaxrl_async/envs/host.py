"""Host environments: CPU envs stepped by Python on the host (gymnasium vector envs, EnvPool),
for the async runner's host actors (``runners/host_actors.py``).

An env id with a prefix selects them: ``gymnasium:<id>`` (any registered gymnasium id, stepped
by ``gymnasium.make_vec``) or ``envpool:<id>`` (needs the optional package ``envpool``).

A ``HostVecEnv`` steps B envs with numpy arrays and resets each env in the step its episode
ends (gymnasium's ``AutoresetMode.SAME_STEP``), so every step returns, like the JAX envs of
``envs/core.py``, the next observation (the first of a new episode where one ended) and the
true final observation (``final_obs``; the next observation where no episode ended), which a
truncated episode is bootstrapped from. Observations are cast to 32-bit dtypes (``float64 ->
float32``) so trajectories pack exactly (see ``runners/placement.Packing``).

Host env states live in Python objects: they are not part of ``RunState`` and cannot be
checkpointed or restored (``RunState.env`` holds the reset seeds instead).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_async.envs.core import EnvSpec

BACKENDS = {"gymnasium": "gymnasium", "envpool": "envpool"}
"""Env id prefix -> the package it needs."""


def split_host_id(env_id: str) -> tuple[str, str] | None:
    """``"gymnasium:CartPole-v1" -> ("gymnasium", "CartPole-v1")``; ``None`` for other ids."""
    backend, sep, name = env_id.partition(":")
    return (backend, name) if sep and backend in BACKENDS else None


def is_host_env(env_id: str) -> bool:
    """Whether ``env_id`` names a host env (``gymnasium:`` or ``envpool:`` prefix)."""
    return split_host_id(env_id) is not None


def _package(backend: str) -> Any:
    """The backend's module; ``ModuleNotFoundError`` naming the package to install."""
    package = BACKENDS[backend]
    try:
        return importlib.import_module(package)
    except ImportError as error:
        raise ModuleNotFoundError(
            f"host env ids '{backend}:...' need the optional package {package!r}, which is not "
            f"installed: pip install {package}", name=package) from error


def check_host_env_id(env_id: str) -> None:
    """``ValueError`` when the backend's package is missing (naming it) or the id unknown."""
    backend, name = split_host_id(env_id)
    try:
        module = _package(backend)
    except ModuleNotFoundError as error:
        raise ValueError(str(error)) from None
    if backend == "gymnasium" and name not in module.registry:
        close = [k for k in module.registry if name.lower() in k.lower()][:10]
        raise ValueError(f"unknown gymnasium id {name!r} in {env_id!r}"
                         + (f"; close matches: {', '.join(close)}" if close else ""))
    if backend == "envpool" and name not in module.list_all_envs():
        raise ValueError(f"unknown envpool id {name!r} in {env_id!r}")


# --------------------------------------------------------------------------- spaces -> spec
def _dtype32(dtype: Any) -> np.dtype:
    """The 32-bit (or narrower) dtype an observation of ``dtype`` is stored as."""
    dtype = np.dtype(dtype)
    if dtype.itemsize <= 4:
        return dtype
    return np.dtype(np.float32 if np.issubdtype(dtype, np.floating) else np.int32)


def spec_from_spaces(env_id: str, obs_space: Any, act_space: Any, max_episode_steps: int = 0,
                     flatten_obs: bool = False) -> EnvSpec:
    """The ``EnvSpec`` of one env with gymnasium spaces (Box observations; Discrete or Box
    actions). ``ValueError`` for other spaces."""
    from gymnasium import spaces

    if not isinstance(obs_space, spaces.Box):
        raise ValueError(f"{env_id}: host envs need a Box observation space, got {obs_space}")
    shape = tuple(obs_space.shape)
    if flatten_obs and len(shape) > 1:
        shape = (int(np.prod(shape)),)
    common = dict(env_id=env_id, obs_shape=shape, obs_dtype=_dtype32(obs_space.dtype),
                  max_episode_steps=int(max_episode_steps or 0))
    if isinstance(act_space, spaces.Discrete):
        if int(act_space.start) != 0:
            raise ValueError(f"{env_id}: Discrete actions must start at 0, got {act_space}")
        return EnvSpec(discrete=True, num_actions=int(act_space.n), **common)
    if isinstance(act_space, spaces.Box):
        shape = tuple(act_space.shape)
        low = np.broadcast_to(np.asarray(act_space.low, np.float32), shape).ravel()
        high = np.broadcast_to(np.asarray(act_space.high, np.float32), shape).ravel()
        return EnvSpec(discrete=False, action_shape=shape, action_low=tuple(map(float, low)),
                       action_high=tuple(map(float, high)), **common)
    raise ValueError(f"{env_id}: host envs need Discrete or Box actions, got {act_space}")


@functools.cache
def host_env_spec(env_id: str, *, flatten_obs: bool = False) -> EnvSpec:
    """The spec of host env ``env_id``, read off one env instance (made once, then cached)."""
    check_host_env_id(env_id)
    backend, name = split_host_id(env_id)
    if backend == "gymnasium":
        import gymnasium

        env = gymnasium.make(name)
        try:
            steps = env.spec.max_episode_steps if env.spec is not None else 0
            return spec_from_spaces(env_id, env.observation_space, env.action_space, steps,
                                    flatten_obs)
        finally:
            env.close()
    env = _package("envpool").make(name, env_type="gymnasium", num_envs=1)
    try:
        steps = getattr(getattr(env.spec, "config", None), "max_episode_steps", 0)
        return spec_from_spaces(env_id, env.observation_space, env.action_space, steps,
                                flatten_obs)
    finally:
        env.close()


# --------------------------------------------------------------------------- vector envs
class HostStep(NamedTuple):
    """What ``HostVecEnv.step`` returns, every array with the leading env axis B."""

    obs: np.ndarray  # [B, *obs_shape] next obs; the first of a new episode where one ended
    reward: np.ndarray  # [B] float32
    terminated: np.ndarray  # [B] bool
    truncated: np.ndarray  # [B] bool
    final_obs: np.ndarray  # [B, *obs_shape] the true next obs (the episode's last where it ended)


class HostVecEnv:
    """B host envs with same-step autoreset (see the module docstring)."""

    def __init__(self, spec: EnvSpec, num_envs: int):
        self.spec, self.num_envs = spec, num_envs

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Reset env i with ``seeds[i]``; the first observations ``[B, *obs_shape]``."""
        raise NotImplementedError

    def step(self, action: np.ndarray) -> HostStep:
        raise NotImplementedError

    def close(self, failed: bool = False) -> None:
        """Release the envs (``failed``: after an error, terminate workers instead of waiting)."""

    def _obs(self, obs: Any) -> np.ndarray:
        obs = np.asarray(obs, dtype=self.spec.obs_dtype)
        return obs.reshape(obs.shape[0], *self.spec.obs_shape)

    def _action(self, action: np.ndarray) -> np.ndarray:
        """Continuous actions clipped to the action space (the policy keeps its sample)."""
        action = np.asarray(action)
        if self.spec.discrete:
            return action.astype(np.int64)
        low = np.asarray(self.spec.action_low, np.float32).reshape(self.spec.action_shape)
        high = np.asarray(self.spec.action_high, np.float32).reshape(self.spec.action_shape)
        return np.clip(action, low, high)


class HostEnvTimeout(TimeoutError):
    """A host env's subprocess did not answer a step or reset within ``step_timeout``."""


class GymnasiumVecEnv(HostVecEnv):
    """``gymnasium.make_vec(id, B, vectorization_mode, autoreset_mode=SAME_STEP)``: 'sync' steps
    the envs one after another in the calling thread, 'async' in one subprocess each
    (started with 'spawn': forking a process that runs JAX threads can deadlock).

    'async': a step or reset that takes longer than ``step_timeout`` seconds (0: no limit)
    raises ``HostEnvTimeout`` naming the env id and the envs that did not answer;
    ``close(failed=True)`` then terminates the worker processes."""

    def __init__(self, spec: EnvSpec, num_envs: int, vectorization: str = "sync",
                 step_timeout: float = 0.0):
        import gymnasium
        from gymnasium.vector import AutoresetMode

        super().__init__(spec, num_envs)
        self.timeout = step_timeout if vectorization == "async" and step_timeout > 0 else None
        kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}
        if vectorization == "async":
            kwargs["context"] = "spawn"
        _, name = split_host_id(spec.env_id)
        self.env = gymnasium.make_vec(name, num_envs, vectorization_mode=vectorization,
                                      vector_kwargs=kwargs)
        mode = self.env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:  # final observations would be lost
            self.env.close()
            raise ValueError(f"{spec.env_id}: the vector env autoresets in mode {mode}, "
                             "host actors need AutoresetMode.SAME_STEP")

    def _wait(self, what: str, wait: Any) -> Any:
        """``wait(timeout)`` of the async vector env; ``HostEnvTimeout`` naming the envs whose
        worker did not answer in time."""
        import multiprocessing

        try:
            return wait(self.timeout)
        except multiprocessing.TimeoutError:
            silent = [i for i, pipe in enumerate(self.env.parent_pipes)
                      if pipe is None or pipe.closed or not pipe.poll(0)]
            pids = [self.env.processes[i].pid for i in silent]
            raise HostEnvTimeout(
                f"{self.spec.env_id}: {what} took longer than host_step_timeout="
                f"{self.timeout:g} s; env(s) {silent} of {self.num_envs} did not answer (worker "
                f"pids {pids}, terminated)") from None

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        seed = [int(s) for s in seeds]
        if self.timeout is None:
            obs, _ = self.env.reset(seed=seed)
        else:
            self.env.reset_async(seed=seed)
            obs, _ = self._wait("a reset", self.env.reset_wait)
        return self._obs(obs)

    def step(self, action: np.ndarray) -> HostStep:
        if self.timeout is None:
            out = self.env.step(self._action(action))
        else:
            self.env.step_async(self._action(action))
            out = self._wait("a step", self.env.step_wait)
        obs, reward, terminated, truncated, info = out
        obs = self._obs(obs)
        final = obs.copy()
        ended = np.flatnonzero(info.get("_final_obs", ()))
        if ended.size:
            final[ended] = self._obs(np.stack([info["final_obs"][i] for i in ended]))
        return HostStep(obs, np.asarray(reward, np.float32), np.asarray(terminated, bool),
                        np.asarray(truncated, bool), final)

    def close(self, failed: bool = False) -> None:
        self.env.close(**({"terminate": True} if failed and hasattr(self.env, "processes")
                          else {}))


class EnvPoolVecEnv(HostVecEnv):
    """EnvPool envs, one single-env pool each, stepped one after another and reset in the step
    their episode ends. EnvPool's own autoreset happens on the next step and does not keep the
    final observation apart from the next episode's first, which truncation needs; one pool
    per env keeps that exact at the cost of EnvPool's batched stepping. EnvPool steps without
    the GIL, so actor threads step their pools in parallel.

    Atari (``envpool:Pong-v5``, ...): EnvPool's defaults, so ``terminated`` is the true end of
    the game (``episodic_life=False``: a lost life is not an episode's end), truncation at
    ``max_episode_steps`` (27000 agent steps), frames ``uint8 [4, 84, 84]`` (kept as bytes
    up to the network). ``options`` go to ``envpool.make`` (e.g. ``max_episode_steps``)."""

    def __init__(self, spec: EnvSpec, num_envs: int, **options: Any):
        super().__init__(spec, num_envs)
        self.envpool, self.name = _package("envpool"), split_host_id(spec.env_id)[1]
        self.options = options
        self.pools: list[Any] = []

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        self.close()  # EnvPool takes its seed when made, an int32 (the run's seeds are uint32)
        self.pools = [self.envpool.make(self.name, env_type="gymnasium", num_envs=1,
                                        seed=int(s) % 2**31, **self.options) for s in seeds]
        return self._obs(np.concatenate([pool.reset()[0] for pool in self.pools]))

    def step(self, action: np.ndarray) -> HostStep:
        action = self._action(action)
        obs, final, reward, terminated, truncated = [], [], [], [], []
        for i, pool in enumerate(self.pools):
            o, r, term, trunc, _ = pool.step(action[i:i + 1])
            final.append(o)
            obs.append(pool.reset()[0] if term[0] or trunc[0] else o)
            reward.append(r), terminated.append(term), truncated.append(trunc)
        return HostStep(self._obs(np.concatenate(obs)),
                        np.concatenate(reward).astype(np.float32),
                        np.concatenate(terminated).astype(bool),
                        np.concatenate(truncated).astype(bool), self._obs(np.concatenate(final)))

    def close(self, failed: bool = False) -> None:
        for pool in self.pools:
            pool.close()
        self.pools = []


def make_host_env(env_id: str, num_envs: int, *, vectorization: str = "sync",
                  flatten_obs: bool = False, step_timeout: float = 0.0) -> HostVecEnv:
    """``num_envs`` host envs of ``env_id`` (``gymnasium:<id>`` or ``envpool:<id>``);
    ``vectorization`` ('sync' or 'async') and ``step_timeout`` (seconds, 0: none; 'async'
    only) apply to gymnasium envs."""
    spec = host_env_spec(env_id, flatten_obs=flatten_obs)
    backend, _ = split_host_id(env_id)
    if backend == "gymnasium":
        return GymnasiumVecEnv(spec, num_envs, vectorization, step_timeout)
    return EnvPoolVecEnv(spec, num_envs)
