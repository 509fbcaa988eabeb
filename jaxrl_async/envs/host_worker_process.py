"""The worker side of ``host_workers.WorkerVecEnv``: what runs in an env worker process.

A worker is a fresh interpreter (``python -c``) that runs this file by path (``BOOT``), so it
imports nothing but the standard library, numpy, gymnasium and cloudpickle: not the jaxrl_async
package (JAX), and never the user's main module. A script without ``if __name__ ==
"__main__":``, ``python -c``, a notebook and the command line all start workers the same way;
multiprocessing's start methods would re-run the user's script in every worker instead. The env
to make reaches the worker as its gymnasium ``EnvSpec`` pickled with cloudpickle, so an env
class defined in the user's script or notebook travels by value.

This file must keep to those imports: ``host_workers`` and ``host`` import its helpers
(``step_same_step``, the shared block's layout), and the worker runs it without the package.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

FIELDS = ("action", "obs", "final_obs", "reward", "terminated", "truncated", "answered")
ALIGN = 64
BOOT = ("import runpy, sys; runpy.run_path(sys.argv[1], run_name='jaxrl_async_env_worker')"
        "['main'](int(sys.argv[2]))")
"""``python -c BOOT THIS_FILE CONTROL_FD``: a worker's command line."""


def step_same_step(env: Any, action: Any) -> tuple[Any, float, bool, bool, Any]:
    """One gymnasium env's step with same-step autoreset: ``(obs, reward, terminated,
    truncated, final_obs)``, ``obs`` the first of the next episode where this one ended (reset
    without a seed, as gymnasium's vector envs do)."""
    obs, reward, terminated, truncated, _ = env.step(action)
    final = obs
    if terminated or truncated:
        obs, _ = env.reset()
    return obs, float(reward), bool(terminated), bool(truncated), final


def buffer_views(buf: Any, layout: dict) -> dict[str, np.ndarray]:
    """numpy views of the shared block's fields (``layout``: ``name -> (offset, shape,
    dtype)``)."""
    return {name: np.ndarray(shape, dtype, buffer=buf, offset=offset)
            for name, (offset, shape, dtype) in layout.items()}


def buffer_size(layout: dict) -> int:
    offset, shape, dtype = layout[FIELDS[-1]]
    return max(offset + int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)


def _attach(name: str, size: int) -> Any:
    """The parent's shared block, mapped without registering it with a resource tracker (the
    parent owns and unlinks it)."""
    path = f"/dev/shm/{name.lstrip('/')}"
    if os.path.exists(path):
        fd = os.open(path, os.O_RDWR)
        try:
            return mmap.mmap(fd, size)
        finally:
            os.close(fd)
    from multiprocessing.shared_memory import SharedMemory  # pragma: no cover - not Linux

    return SharedMemory(name=name).buf  # pragma: no cover


def _reset(envs: dict, views: dict, seeds: Sequence[int], indices: Sequence[int]) -> None:
    obs = views["obs"]
    for i in indices:
        obs[i] = np.reshape(envs[i].reset(seed=int(seeds[i]))[0], obs.shape[1:])


def main(control_fd: int) -> None:
    """A worker's life (``BOOT``): read its orders from the control connection, make its envs,
    start its lanes, then answer the parent's resets until ``close`` or until the parent goes.

    The orders: ``(sys_path, shm_name, layout, lanes, wake_fds, done_fds, gym_spec)`` with
    ``lanes[l][g]`` the envs of group g that lane l steps, ``wake_fds[l]`` its pipe from the
    parent, ``done_fds[g]`` group g's pipe to the parent (file descriptors this process
    inherited), and ``gym_spec`` the cloudpickled gymnasium ``EnvSpec``. Ctrl-C in a terminal
    reaches the whole process group: a worker ignores it, and the parent, which stops cleanly
    after the chunk in flight, closes it."""
    import signal
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(control_fd)
    try:
        sys_path, shm_name, layout, lanes, wake_fds, done_fds, gym_spec = conn.recv()
    except (EOFError, OSError):  # the parent is gone
        return
    sys.path[:] = sys_path  # what the parent imports from, the user's modules among it
    _serve(conn, shm_name, layout, lanes, wake_fds, done_fds, gym_spec)


def _serve(conn: Any, shm_name: str, layout: dict, lanes: list[list[list[int]]],
           wake_fds: list[int], done_fds: list[int], gym_spec: bytes) -> None:
    import pickle

    buf = _attach(shm_name, buffer_size(layout))
    views = buffer_views(buf, layout)
    obs_shape = layout["obs"][1][1:]
    send_lock = threading.Lock()

    def reply(message: tuple) -> None:
        with send_lock:
            conn.send(message)

    action, next_obs, final_obs = views["action"], views["obs"], views["final_obs"]
    rewards, terminated, truncated = views["reward"], views["terminated"], views["truncated"]
    answered = views["answered"]
    scalar_action = action.ndim == 1

    def step(indices: Sequence[int]) -> None:  # the hot path: locals only
        for i in indices:
            o, r, term, trunc, final = step_same_step(
                envs[i], action[i] if scalar_action else action[i].copy())
            next_obs[i] = o if reshaped is None else np.reshape(o, obs_shape)
            final_obs[i] = final if reshaped is None else np.reshape(final, obs_shape)
            rewards[i], terminated[i], truncated[i], answered[i] = r, term, trunc, True

    def guarded(what: Any, indices: Sequence[int], g: int) -> bool:
        try:
            what(indices)
            return True
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            reply(("error", g, list(indices), f"{type(error).__name__}: {error}",
                   traceback.format_exc()))
            return False

    def lane(wake_fd: int, envs_of_group: list[list[int]]) -> None:
        read, write = os.read, os.write
        try:
            while True:
                byte = read(wake_fd, 1)
                if not byte:  # the parent is gone
                    return
                g = byte[0]
                write(done_fds[g], b"d" if guarded(step, envs_of_group[g], g) else b"e")
        except OSError:  # the parent is gone
            return

    def make(ids: Sequence[int]) -> None:
        import gymnasium

        spec = pickle.loads(gym_spec)
        envs.update({i: gymnasium.make(spec) for i in ids})

    mine = sorted(i for lane_envs in lanes for part in lane_envs for i in part)
    envs: dict[int, Any] = {}
    if not guarded(make, mine, -1):
        return
    shapes = {tuple(envs[i].observation_space.shape) for i in mine}
    reshaped = None if shapes <= {tuple(obs_shape)} else obs_shape  # flattened observations
    for n, (wake_fd, envs_of_group) in enumerate(zip(wake_fds, lanes)):
        threading.Thread(target=lane, args=(wake_fd, envs_of_group), daemon=True,
                         name=f"jaxrl-env-lane-{n}").start()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if message[0] == "close":
            for env in envs.values():
                env.close()
            return
        seeds = message[1]
        if guarded(lambda ids, seeds=seeds: _reset(envs, views, seeds, ids), mine, -1):
            reply(("reset",))
