"""Host environments: CPU envs stepped on the host (gymnasium envs in worker processes,
EnvPool's C++ pools), for the async runner's host actors (``runners/host_actors.py``).

An env id with a prefix selects them: ``gymnasium:<id>`` (any registered gymnasium id) or
``envpool:<id>`` (needs the optional package ``envpool``).

This module is the contract every host vector env keeps, and the one that steps its envs in
the calling thread (``InlineVecEnv``). ``host_workers.WorkerVecEnv`` steps gymnasium envs in
worker processes, ``host_envpool.EnvPoolVecEnv`` in EnvPool's thread pool;
``jaxrl_async.envs.make_host_env`` picks.

A ``HostVecEnv`` holds B envs in G equal groups of contiguous env indices, stepped EnvPool-style:
``send(g, actions)`` starts a step of group g and returns at once, ``recv(g)`` waits for it, so
the policy can act on one group while the others step. Each env is reset in the step its
episode ends (gymnasium's ``AutoresetMode.SAME_STEP``): every step returns, like the JAX envs
of ``envs/core.py``, the next observation (the first of a new episode where one ended) and the
true final observation (``final_obs``; the next observation where no episode ended), which a
truncated episode is bootstrapped from. Observations are cast to 32-bit dtypes (``float64 ->
float32``) so trajectories pack exactly (see ``runners/placement.Packing``).

Host env states live in Python objects (or other processes): they are not part of
``RunState`` and cannot be checkpointed or restored (``RunState.env`` holds the reset seeds).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_async.envs.core import EnvSpec
from jaxrl_async.envs.host_worker_process import step_same_step

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
def _host_spaces(env_id: str) -> tuple[Any, Any, int]:
    """(observation space, action space, time limit) of host env ``env_id``, read off one env
    instance (made once, then cached)."""
    check_host_env_id(env_id)
    backend, name = split_host_id(env_id)
    if backend == "gymnasium":
        import gymnasium

        env = gymnasium.make(name)
        try:
            steps = env.spec.max_episode_steps if env.spec is not None else 0
            return env.observation_space, env.action_space, steps or 0
        finally:
            env.close()
    env = _package("envpool").make(name, env_type="gymnasium", num_envs=1)
    try:
        steps = getattr(getattr(env.spec, "config", None), "max_episode_steps", 0)
        return env.observation_space, env.action_space, steps or 0
    finally:
        env.close()


def host_env_spec(env_id: str, *, flatten_obs: bool = False) -> EnvSpec:
    """The spec of host env ``env_id``."""
    obs_space, act_space, steps = _host_spaces(env_id)
    return spec_from_spaces(env_id, obs_space, act_space, steps, flatten_obs)


def source_obs_dtype(env_id: str) -> np.dtype:
    """The dtype host env ``env_id`` itself returns observations in (before they are cast to
    32 bits: ``spec_from_spaces``)."""
    return np.dtype(_host_spaces(env_id)[0].dtype)


# --------------------------------------------------------------------------- the contract
class HostStep(NamedTuple):
    """What ``recv`` returns for a group (``step``: for all envs), the leading env axis B."""

    obs: np.ndarray  # [B, *obs_shape] next obs; the first of a new episode where one ended
    reward: np.ndarray  # [B] float32
    terminated: np.ndarray  # [B] bool
    truncated: np.ndarray  # [B] bool
    final_obs: np.ndarray  # [B, *obs_shape] the true next obs (the episode's last where it ended)


class HostEnvError(RuntimeError):
    """A host env raised, or the process stepping it died: the message names the env id, the
    envs and the worker."""


class HostEnvTimeout(HostEnvError, TimeoutError):
    """A host env did not answer a step or reset within ``host_step_timeout`` seconds."""


class HostVecEnv:
    """B host envs in ``groups`` equal groups (see the module docstring). Subclasses implement
    ``reset``, ``send``, ``recv`` and ``close``. The arrays ``recv`` returns may be views of
    buffers the env reuses: valid until the group's next ``send``."""

    def __init__(self, spec: EnvSpec, num_envs: int, groups: int = 1):
        if groups < 1 or num_envs % groups:
            raise ValueError(f"{spec.env_id}: {num_envs} envs cannot be split into {groups} "
                             "equal groups")
        self.spec, self.num_envs, self.groups = spec, num_envs, groups
        self.group_size = num_envs // groups

    def group(self, g: int) -> slice:
        """The env indices of group ``g``."""
        return slice(g * self.group_size, (g + 1) * self.group_size)

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Reset env i with ``seeds[i]``; the first observations ``[B, *obs_shape]``."""
        raise NotImplementedError

    def send(self, g: int, action: np.ndarray) -> None:
        """Start a step of group ``g``'s envs with ``action [group_size, ...]``."""
        raise NotImplementedError

    def recv(self, g: int) -> HostStep:
        """Wait for the step of group ``g`` sent last; its ``[group_size, ...]`` arrays."""
        raise NotImplementedError

    def step(self, action: np.ndarray) -> HostStep:
        """Step every env (all groups in flight at once); copies, not views."""
        for g in range(self.groups):
            self.send(g, action[self.group(g)])
        parts = [copied(self.recv(g)) for g in range(self.groups)]
        return HostStep(*(np.concatenate(xs) for xs in zip(*parts)))

    def close(self, failed: bool = False) -> None:
        """Release the envs (``failed``: after an error, terminate workers instead of waiting)."""

    def _obs(self, obs: Any) -> np.ndarray:
        obs = np.asarray(obs, dtype=self.spec.obs_dtype)
        return obs.reshape(obs.shape[0], *self.spec.obs_shape)

    def _action(self, action: np.ndarray) -> np.ndarray:
        if self.spec.discrete:
            return np.asarray(action).astype(np.int64)
        if not hasattr(self, "_bounds"):  # read off the spec once: this runs every step
            self._bounds = action_bounds(self.spec)
        return np.clip(action, *self._bounds)


def copied(step: HostStep) -> HostStep:
    """A copy of ``step`` that no env buffer backs."""
    return HostStep(*(np.array(x, copy=True) for x in step))


def action_bounds(spec: EnvSpec) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of a continuous action space, float32 ``action_shape`` arrays."""
    low = np.asarray(spec.action_low, np.float32).reshape(spec.action_shape)
    return low, np.asarray(spec.action_high, np.float32).reshape(spec.action_shape)


def env_action(spec: EnvSpec, action: np.ndarray) -> np.ndarray:
    """Actions as the env takes them: discrete as int64, continuous clipped to the action
    space (the policy keeps its sample)."""
    action = np.asarray(action)
    if spec.discrete:
        return action.astype(np.int64)
    return np.clip(action, *action_bounds(spec))


def make_gymnasium_env(name: Any) -> Any:
    """``gymnasium.make(name)``; ``name`` an id or a gymnasium ``EnvSpec`` (what worker
    processes get: the spec's entry point needs no registration there)."""
    import gymnasium

    return gymnasium.make(name)


class InlineVecEnv(HostVecEnv):
    """Gymnasium envs stepped one after another in the calling thread, at ``send`` (for tests
    and envs so fast that a worker's round trip would cost more than the step)."""

    def __init__(self, spec: EnvSpec, num_envs: int, groups: int = 1):
        super().__init__(spec, num_envs, groups)
        _, name = split_host_id(spec.env_id)
        self.envs = [make_gymnasium_env(name) for _ in range(num_envs)]
        self._out: dict[int, HostStep] = {}

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        self._out.clear()
        return self._obs([env.reset(seed=int(s))[0] for env, s in zip(self.envs, seeds)])

    def send(self, g: int, action: np.ndarray) -> None:
        action = self._action(action)
        envs = self.envs[self.group(g)]
        obs, reward, terminated, truncated, final = zip(
            *(step_same_step(env, a) for env, a in zip(envs, action)))
        self._out[g] = HostStep(self._obs(obs), np.asarray(reward, np.float32),
                                np.asarray(terminated, bool), np.asarray(truncated, bool),
                                self._obs(final))

    def recv(self, g: int) -> HostStep:
        return self._out.pop(g)

    def close(self, failed: bool = False) -> None:
        for env in self.envs:
            env.close()
        self.envs = []
