"""Observation and reward normalisation for host envs: the numbers of gymnasium's
``NormalizeObservation`` and ``NormalizeReward`` wrapped around each env, as CleanRL's
``ppo_continuous_action.py`` wraps its MuJoCo envs (then clips both to ±10).

Per env, as those wrappers keep them: running moments of its observations (every observation
it returns: the first after a reset, each step's, the final one of an episode) and of its
discounted return ``G = G * gamma * (1 - terminated) + reward`` (gymnasium's update: ``G`` is
cut only where an episode terminates, not where it is truncated). A reset or step first updates
the moments with the new value, then returns ``(obs - mean) / sqrt(var + 1e-8)`` as float32,
clipped to ±``obs_clip``, and ``reward / sqrt(var_G + 1e-8)``, clipped to ±``reward_clip``.
The moments start at mean 0, variance 1 and count 1e-4, and merge as gymnasium's
``RunningMeanStd`` does, in its dtypes: float64 for the return and for float64 observations
(MuJoCo's), float32 for float32 observations. Statistics per env make the numbers independent
of how envs are grouped, streamed or timed: env i sees exactly what a gymnasium wrapper around
it would. Evaluation pools every env's moments into one (``pooled``) and keeps them frozen.

Pure functions over ``HostNormState`` (numpy arrays, leading axis: the envs); the batcher of
each actor stream holds its envs' state, which a checkpoint saves whole
(``runners/host_actors.HostEnvState``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from jaxrl_async.envs.host import HostStep
from jaxrl_async.envs.wrappers import RunningMoments

EPSILON = 1e-8
"""Added to the variance before the square root (gymnasium's ``epsilon``)."""
PRIOR_COUNT = 1e-4
"""The count fresh moments start with (gymnasium's ``RunningMeanStd(epsilon=1e-4)``)."""


class HostNormState(NamedTuple):
    """Normalisation state of B host envs (float64); ``()`` for what is not normalised."""

    obs: Any  # RunningMoments: mean, var [B, *obs_shape], count [B]
    reward: Any  # RunningMoments of the discounted return: mean, var, count [B]
    discounted: Any  # [B] the discounted return G of each env


class Normalization(NamedTuple):
    """What to normalise, and how (from the config)."""

    obs: bool
    reward: bool
    gamma: float
    obs_clip: float
    reward_clip: float

    @property
    def active(self) -> bool:
        return self.obs or self.reward


def from_config(cfg: Any) -> Normalization:
    return Normalization(bool(cfg.normalize_obs), bool(cfg.normalize_reward), float(cfg.gamma),
                         float(cfg.obs_clip), float(cfg.reward_clip))


def fresh_moments(shape: tuple, dtype: Any = np.float64) -> RunningMoments:
    """Moments of a batch ``shape = (B, *value_shape)`` before any value (mean 0, var 1), in
    ``dtype``; the count (float64) is exact."""
    return RunningMoments(np.zeros(shape, dtype), np.ones(shape, dtype),
                          np.full(shape[:1], PRIOR_COUNT))


def moments_dtype(source_obs_dtype: Any) -> np.dtype:
    """The dtype gymnasium's observation moments end up in: float32, float64 for float64
    observations (MuJoCo's), which the update promotes them to."""
    return np.dtype(np.float64 if np.dtype(source_obs_dtype) == np.float64 else np.float32)


def init_state(norm: Normalization, num_envs: int, obs_shape: tuple,
               source_obs_dtype: Any = np.float32) -> HostNormState | tuple:
    """The state of ``num_envs`` fresh envs whose own observations are of
    ``source_obs_dtype`` (before the host env casts them to 32 bits), or ``()`` when nothing is
    normalised."""
    if not norm.active:
        return ()
    return HostNormState(
        fresh_moments((num_envs, *obs_shape), moments_dtype(source_obs_dtype))
        if norm.obs else (),
        fresh_moments((num_envs,)) if norm.reward else (),
        np.zeros(num_envs) if norm.reward else ())


def add_one(m: RunningMoments, x: np.ndarray) -> RunningMoments:
    """Each env's moments updated with its one new value ``x [B, ...]``: gymnasium's
    ``update_mean_var_count_from_moments`` with a batch of one (batch mean ``x``, batch
    variance 0), operation for operation, in the moments' dtype (gymnasium's count is a Python
    float, which numpy takes in the array's dtype). New arrays; ``m`` is left as it is."""
    m = RunningMoments(*(np.array(a) for a in m))
    _add_one_in_place(m, x)
    return m


def _add_one_in_place(m: RunningMoments, x: np.ndarray) -> None:
    """``add_one`` into ``m``'s arrays (views of the state: a host actor calls this every
    step, so it takes as few numpy calls as it can). ``delta * 1`` and ``a + 0.0`` of
    gymnasium's formula are exact, so they are left out: the same bits."""
    mean, var, count = m
    dtype, shape = mean.dtype, count.shape + (1,) * (mean.ndim - 1)
    c, total = count.reshape(shape), (count + 1).reshape(shape)
    if c.dtype != dtype:
        c, total = c.astype(dtype), total.astype(dtype)
    delta = (x if x.dtype == dtype else x.astype(dtype)) - mean
    mean += delta / total
    np.square(delta, out=delta)
    delta *= c
    delta /= total  # square(delta) * count / total
    var *= c
    var += delta
    var /= total
    count += 1


def scale(x: np.ndarray, m: RunningMoments, clip: float) -> np.ndarray:
    """``x`` standardised by ``m`` (in the moments' dtype) as float32 (gymnasium's cast),
    clipped to ±``clip``."""
    z = (x if x.dtype == m.mean.dtype else x.astype(m.mean.dtype)) - m.mean
    z /= np.sqrt(m.var + EPSILON)
    return np.clip(z.astype(np.float32), -clip, clip)


def normalize_reset(norm: Normalization, state: HostNormState, envs: slice, obs: np.ndarray,
                    counted: bool = True) -> np.ndarray:
    """The first observations ``obs [n, ...]`` of the envs ``envs``, normalised; their
    moments updated in ``state`` (in place). ``counted=False``: scaled by the moments as they
    are, not added to them (a resumed run's fresh resets stand in for the observations its
    checkpointed envs ended on, which the moments already count)."""
    if not norm.obs:
        return obs
    moments = RunningMoments(*(x[envs] for x in state.obs))  # views
    if counted:
        _add_one_in_place(moments, obs)
    return scale(obs, moments, norm.obs_clip)


def normalize_step(norm: Normalization, state: HostNormState, envs: slice,
                   out: HostStep) -> HostStep:
    """What a step of the envs ``envs`` returned, normalised, their state updated in place:
    the final observation first (every env's: the step's observation where no episode ended),
    then the next episode's first observation where one ended (same-step autoreset; gymnasium's
    vector envs reset in the step after, which the moments see in the same order); the reward
    scaled by the discounted return's moments. The raw reward stays the caller's (episode
    returns are counted in it)."""
    if not norm.active:
        return out
    obs, final, reward = out.obs, out.final_obs, out.reward
    if norm.obs:
        moments = RunningMoments(*(x[envs] for x in state.obs))  # views
        _add_one_in_place(moments, out.final_obs)
        final = obs = scale(out.final_obs, moments, norm.obs_clip)
        ended = out.terminated | out.truncated
        if ended.any():
            ended = np.flatnonzero(ended)
            first = add_one(RunningMoments(*(x[ended] for x in moments)), out.obs[ended])
            for x, y in zip(moments, first):
                x[ended] = y
            obs = final.copy()
            obs[ended] = scale(out.obs[ended], first, norm.obs_clip)
    if norm.reward:
        g = state.discounted[envs]  # a view
        g *= norm.gamma * (1 - out.terminated)
        g += out.reward
        moments = RunningMoments(*(x[envs] for x in state.reward))
        _add_one_in_place(moments, g)
        reward = out.reward / np.sqrt(moments.var + EPSILON)
        reward = np.clip(reward, -norm.reward_clip, norm.reward_clip).astype(np.float32)
    return HostStep(obs, reward, out.terminated, out.truncated, final)


def pooled(m: RunningMoments) -> RunningMoments:
    """Every env's moments ``[B, ...]`` pooled into one (no env axis): the moments of all
    their values together (the parallel merge ``add_one`` is the case n = 1 of)."""
    count = np.asarray(m.count, np.float64)
    weights = count.reshape(count.shape + (1,) * (np.ndim(m.mean) - 1)) / count.sum()
    mean = (weights * m.mean).sum(0)
    var = (weights * (m.var + np.square(m.mean - mean))).sum(0)
    return RunningMoments(mean, var, count.sum())
