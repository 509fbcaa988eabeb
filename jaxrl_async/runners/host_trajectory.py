"""Host actors' trajectory builder: the steps a batcher (``host_batcher.py``) records, written
in place into ``[T, B, ...]`` numpy buffers, finished as a ``Trajectory`` in the JAX rollout's
format (``rollout.rollout``) and handed to the pipeline as one packed vector per learner device.

The buffers are allocated once per stream and reused by every rollout: a finished trajectory
is packed (``pack_numpy``: one copy, into a new 64-byte-aligned vector that a CPU learner
then uses in place) before the next rollout writes over it. ``obs`` has one row
more than the trajectory, ``obs[T]``: the observations the next rollout starts from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import numpy as np

from jaxrl_async.algos import Trajectory
from jaxrl_async.envs import HostStep
from jaxrl_async.runners.pipeline import Batch, Pipeline
from jaxrl_async.runners.placement import (
    Layout,
    Packing,
    is_bytes,
    split_for_learners,
    to_learner,
    wide_dtype,
    words,
)
from jaxrl_async.runners.rollout import EpisodeSums, step_index

ALIGN_BYTES = 64
"""Alignment of a packed vector's data: XLA:CPU takes a host buffer this aligned as it is,
so ``jax.device_put`` to a CPU device then costs no copy."""


def aligned_words(n: int) -> np.ndarray:
    """A new ``uint32`` vector of ``n`` words whose data starts ``ALIGN_BYTES``-aligned."""
    raw = np.empty(n + ALIGN_BYTES // 4, np.uint32)
    start = (-raw.ctypes.data % ALIGN_BYTES) // 4
    return raw[start:start + n]


def pack_numpy(packing: Packing, tree: Any) -> np.ndarray:
    """``packing.pack(tree)`` with numpy on the host, bit for bit: one flat ``uint32`` vector,
    each leaf copied once into a new aligned vector (``aligned_words``), which the caller hands
    on and never writes again: a CPU device may use it in place."""
    leaves, treedef = jax.tree.flatten(tree)
    if treedef != packing.treedef:
        raise ValueError(f"structure {treedef} does not match the packing's {packing.treedef}")
    flat, offset = aligned_words(packing.size), 0
    for x, want in zip(leaves, packing.leaves):
        x = np.asarray(x)
        if x.shape != want.shape or x.dtype != want.dtype:
            raise ValueError(f"leaf {x.dtype}{list(x.shape)} does not match the packing's "
                             f"{want.dtype}{list(want.shape)}")
        n, w = x.size, words(want)
        if is_bytes(x.dtype):  # four to a word, as Packing.pack, the pad bytes zero
            flat[offset:offset + w][-1:] = 0
            flat[offset:offset + w].view(x.dtype)[:n].reshape(x.shape)[...] = x
        else:
            flat[offset:offset + n].view(np.dtype(wide_dtype(x.dtype))).reshape(x.shape)[...] = x
        offset += w
    return flat


def numpy_unpacker(packing: Packing) -> Callable[[np.ndarray], Any]:
    """``flat -> packing.unpack(flat)`` with numpy on the host, the leaves' places read off
    once (a host actor unpacks every policy call); the leaves may be views of ``flat``."""
    places, offset = [], 0
    for want in packing.leaves:
        n, w, dtype = int(np.prod(want.shape)), words(want), np.dtype(want.dtype)
        stored = dtype if is_bytes(dtype) else np.dtype(wide_dtype(dtype))
        places.append((offset, n, w, dtype, stored, tuple(want.shape)))
        offset += w
    treedef, size = packing.treedef, packing.size

    def unpack(flat: np.ndarray) -> Any:
        flat = np.asarray(flat, np.uint32)
        if flat.shape != (size,):
            raise ValueError(f"expected a packed vector of {size}, got shape {flat.shape}")
        leaves = []
        for offset, n, w, dtype, stored, shape in places:
            if is_bytes(dtype):
                leaves.append(flat[offset:offset + w].view(dtype)[:n].reshape(shape))
            elif stored == dtype:
                leaves.append(flat[offset:offset + n].view(dtype).reshape(shape))
            else:
                leaves.append(flat[offset:offset + n].view(stored).reshape(shape).astype(dtype))
        return jax.tree.unflatten(treedef, leaves)

    return unpack


def unpack_numpy(packing: Packing, flat: np.ndarray) -> Any:
    """``packing.unpack(flat)`` with numpy on the host."""
    return numpy_unpacker(packing)(flat)


class TrajectoryBuilder:
    """One stream's rollout buffers (see the module docstring): ``T`` steps of its ``B`` envs
    ``env_id``; ``acted``: the packing of the policy's ``(action, extras)`` for one group."""

    def __init__(self, obs_shape: tuple, obs_dtype: Any, acted: Packing, env_id: np.ndarray,
                 num_steps: int):
        self.num_steps, self.env_id = num_steps, np.asarray(env_id, np.int32)
        batch = (num_steps, self.env_id.size)
        self.obs = np.zeros((num_steps + 1, batch[1], *obs_shape), obs_dtype)
        self.next_obs = np.zeros((*batch, *obs_shape), obs_dtype)
        self.reward = np.zeros(batch, np.float32)
        self.terminated = np.zeros(batch, bool)
        self.truncated = np.zeros(batch, bool)
        self.acted = jax.tree.unflatten(
            acted.treedef, [np.zeros((*batch, *x.shape[1:]), x.dtype) for x in acted.leaves])
        self.ret = np.zeros(batch[1], np.float32)  # the running episodes' return and length
        self.length = np.zeros(batch[1], np.int32)
        self.sums = np.zeros(3, np.float64)  # return, length, count of the episodes that ended

    def start(self, obs: np.ndarray) -> None:
        """The envs' first observations (after a reset); forget the running episodes."""
        chex.assert_shape(obs, self.obs.shape[1:])
        self.obs[0] = obs
        self.ret[:], self.length[:] = 0.0, 0

    def act(self, t: int, part: slice, acted: Any) -> None:
        """Step ``t``'s ``(action, extras)`` of the envs ``part``."""
        for buf, x in zip(jax.tree.leaves(self.acted), jax.tree.leaves(acted)):
            buf[t, part] = x

    def record(self, t: int, part: slice, out: HostStep, raw_reward: np.ndarray) -> None:
        """What step ``t`` of the envs ``part`` returned (normalised, where the run normalises:
        the trajectory's), with the env's own ``raw_reward`` (the episode returns'); their
        next observations become ``obs[t + 1]``."""
        self.reward[t, part], self.next_obs[t, part] = out.reward, out.final_obs
        self.terminated[t, part], self.truncated[t, part] = out.terminated, out.truncated
        self.obs[t + 1, part] = out.obs
        ret, length = self.ret[part], self.length[part]  # views
        ret += raw_reward
        length += 1
        done = out.terminated | out.truncated
        if done.any():
            self.sums += (float(ret[done].sum()), int(length[done].sum()), int(done.sum()))
            ret[done], length[done] = 0.0, 0

    def finish(self, update: int, version: int) -> tuple[Trajectory, EpisodeSums]:
        """Rollout ``update`` (acted by params ``version``): numpy views of the buffers,
        valid until ``next_rollout``."""
        time_batch = self.reward.shape
        action, extras = self.acted
        traj = Trajectory(self.obs[:-1], action, self.reward, self.terminated, self.truncated,
                          self.next_obs, extras,
                          env_id=np.broadcast_to(self.env_id, time_batch),
                          policy_version=np.full(time_batch, version, np.int32),
                          step=step_index(int(update) * self.num_steps, *time_batch))
        return traj, EpisodeSums(*self.sums.astype(np.float32))

    def next_rollout(self) -> None:
        """Start the next rollout where this one ended."""
        self.obs[0] = self.obs[-1]
        self.sums[:] = 0.0


def hand_over(traj: Trajectory, sums: EpisodeSums, piece: Packing, where: Layout,
              pipeline: Pipeline, ticket: int, version: int) -> None:
    """Pack a stream's rollout, one piece per learner device, copy it there and deliver it."""
    pieces = [pack_numpy(piece, p)
              for p in split_for_learners(traj, sums, len(where.learner_devices))]
    pipeline.deliver(ticket, Batch(to_learner(pieces, where), version))
