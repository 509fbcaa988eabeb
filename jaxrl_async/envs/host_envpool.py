"""EnvPool used as EnvPool: each group of a ``HostVecEnv`` is one EnvPool pool, stepped as a
batch by EnvPool's C++ threads (no GIL), with its asynchronous ``send``/``recv``, so the policy
acts on one group while the pools step the others.

One pool per group, not one pool for all groups with ``batch_size < num_envs``: such a pool's
``recv`` returns whichever envs finished first, so which envs the policy acts on together would
depend on thread timing, and a seed could not reproduce a run. A pool per group steps in sync
mode (``batch_size == num_envs``), which also lets it reset a subset of its envs.

EnvPool resets an env on the step *after* its episode ended (that step's action is ignored);
host actors reset in the same step (``host.HostVecEnv``). ``recv`` converts exactly: the
returned observation of an env whose episode ended is its final observation (``final_obs``),
and the env is reset at once (``pool.reset(env_id)``), its first observation becoming ``obs``;
the reset is not a step of the trajectory. EnvPool seeds a pool, not an env: env j of group
g gets the seed ``seeds[g * group_size] + j`` (mod 2**31), as EnvPool numbers them.

Atari (``envpool:Pong-v5``, ...): EnvPool's defaults, so ``terminated`` is the true end of the
game (``episodic_life=False``: a lost life is not an episode's end), truncation at
``max_episode_steps`` (27000 agent steps), frames ``uint8 [4, 84, 84]`` (kept as bytes up to
the network). ``options`` go to ``envpool.make`` (e.g. ``max_episode_steps``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrl_async.envs.core import EnvSpec
from jaxrl_async.envs.host import HostStep, HostVecEnv, _package, split_host_id


class EnvPoolVecEnv(HostVecEnv):
    """EnvPool envs, one pool per group (see the module docstring). ``threads``: EnvPool's
    ``num_threads`` per pool (0: EnvPool's default, one per core, at most the group's envs)."""

    def __init__(self, spec: EnvSpec, num_envs: int, groups: int = 1, threads: int = 0,
                 **options: Any):
        super().__init__(spec, num_envs, groups)
        self.envpool, self.name = _package("envpool"), split_host_id(spec.env_id)[1]
        self.threads, self.options = threads, options
        self.pools: list[Any] = []

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        self.close()  # EnvPool takes its seed when made, an int32 (the run's seeds are uint32)
        extra = {"num_threads": min(self.threads, self.group_size)} if self.threads else {}
        for g in range(self.groups):
            self.pools.append(self.envpool.make(
                self.name, env_type="gymnasium", num_envs=self.group_size,
                seed=int(seeds[self.group(g).start]) % 2**31, **extra, **self.options))
        return np.concatenate([self._ordered(*pool.reset())[0] for pool in self.pools])

    def _ordered(self, obs: np.ndarray, info: dict, *rest: np.ndarray) -> tuple:
        """The arrays in env order (``info["env_id"]``; a sync-mode pool returns them in order,
        which one comparison confirms)."""
        ids = np.asarray(info["env_id"])
        if ids.size == self.group_size and (ids.size == 1 or (ids[1:] > ids[:-1]).all()):
            return (self._obs(obs), *rest)
        order = np.argsort(ids)
        return (self._obs(obs)[order], *(x[order] for x in rest))

    def send(self, g: int, action: np.ndarray) -> None:
        action = self._action(action)
        self.pools[g].send(action.astype(np.int32) if self.spec.discrete else action)

    def recv(self, g: int) -> HostStep:
        pool = self.pools[g]
        obs, reward, terminated, truncated, info = pool.recv()
        final, reward, terminated, truncated = self._ordered(obs, info, reward, terminated,
                                                             truncated)
        terminated, truncated = terminated.astype(bool), truncated.astype(bool)
        ended = np.flatnonzero(terminated | truncated)
        obs = final
        if ended.size:  # same-step autoreset: the first observation of the next episode
            first, info = pool.reset(ended.astype(np.int32))
            obs = final.copy()
            obs[np.asarray(info["env_id"])] = self._obs(first)
        return HostStep(obs, reward.astype(np.float32), terminated, truncated, final)

    def close(self, failed: bool = False) -> None:
        for pool in self.pools:
            pool.close()
        self.pools = []
