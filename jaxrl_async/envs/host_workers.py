"""Gymnasium envs stepped by worker processes, observations in shared memory.

``WorkerVecEnv`` is a ``host.HostVecEnv`` whose B envs are stepped by W worker processes
(``multiprocessing``'s forkserver context: forking a process that runs JAX threads can
deadlock). Each worker owns an equal share of every group, so while the policy acts on one
group every worker is stepping another. Inside a worker, each env has its own thread by default
(``threads=0``): envs that wait (a simulator in another process, a robot, ``time.sleep``)
overlap their waits; ``threads=1`` steps a worker's envs one after another (CPU-bound envs,
which threads cannot overlap).

One block of shared memory holds, for every env, its action, observation, final observation,
reward and end flags (numpy views on both sides); the pipes carry only ``("step", group)``
and the worker's ``("done", group)``. The parent writes a group's actions and sends; the
worker steps, writes the results in place and answers; ``recv`` returns views of the block
(valid until the group's next ``send``).

Failure: an env that raises is a ``HostEnvError`` with its traceback; a worker that dies is a
``HostEnvError`` naming it, its envs and its exit code; a step that takes longer than
``step_timeout`` seconds is a ``HostEnvTimeout`` naming the envs that did not answer. Either way
the workers are terminated and reaped before the error is raised; a worker whose parent dies
leaves on its own (its pipe closes).
"""

from __future__ import annotations

import functools
import mmap
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing import connection
from multiprocessing.shared_memory import SharedMemory
from queue import SimpleQueue
from typing import Any

import numpy as np

from jaxrl_async.envs.core import EnvSpec
from jaxrl_async.envs.host import (
    HostEnvError,
    HostEnvTimeout,
    HostStep,
    HostVecEnv,
    make_gymnasium_env,
    split_host_id,
    step_same_step,
)

STARTUP_S = 60.0
"""Seconds the first reset may take at least: the workers start (and import) meanwhile."""
FIELDS = ("action", "obs", "final_obs", "reward", "terminated", "truncated")
ALIGN = 64


def buffer_layout(spec: EnvSpec, num_envs: int) -> dict[str, tuple[int, tuple, str]]:
    """Where each field lies in the shared block: ``name -> (offset, shape, dtype)``."""
    action = ((), "int64") if spec.discrete else (tuple(spec.action_shape), "float32")
    shapes = {"action": action, "obs": (tuple(spec.obs_shape), np.dtype(spec.obs_dtype).str),
              "final_obs": (tuple(spec.obs_shape), np.dtype(spec.obs_dtype).str),
              "reward": ((), "float32"), "terminated": ((), "bool"), "truncated": ((), "bool")}
    layout, offset = {}, 0
    for name in FIELDS:
        shape, dtype = shapes[name]
        full = (num_envs, *shape)
        layout[name] = (offset, full, dtype)
        offset += -(-int(np.prod(full)) * np.dtype(dtype).itemsize // ALIGN) * ALIGN
    return layout


def buffer_views(buf: Any, layout: dict) -> dict[str, np.ndarray]:
    return {name: np.ndarray(shape, dtype, buffer=buf, offset=offset)
            for name, (offset, shape, dtype) in layout.items()}


def buffer_size(layout: dict) -> int:
    offset, shape, dtype = layout[FIELDS[-1]]
    return max(offset + int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- the worker side
def _reset(envs: dict, views: dict, seeds: Sequence[int], indices: Sequence[int]) -> None:
    obs = views["obs"]
    for i in indices:
        obs[i] = np.reshape(envs[i].reset(seed=int(seeds[i]))[0], obs.shape[1:])


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
    return SharedMemory(name=name).buf  # pragma: no cover - not Linux


def _worker(conn: Any, shm_name: str, layout: dict, owned: list[list[int]], gym_spec: Any,
            threads: int) -> None:
    """A worker's life: make its envs, then answer the parent's commands until ``close`` or
    until the parent goes (its pipe closes). ``owned[g]``: its envs of group g."""
    buf = _attach(shm_name, buffer_size(layout))
    views = buffer_views(buf, layout)
    obs_shape = layout["obs"][1][1:]
    send_lock = threading.Lock()

    def reply(message: tuple) -> None:
        with send_lock:
            conn.send(message)

    action, next_obs, final_obs = views["action"], views["obs"], views["final_obs"]
    rewards, terminated, truncated = views["reward"], views["terminated"], views["truncated"]
    scalar_action = action.ndim == 1

    def step(indices: Sequence[int]) -> None:  # the hot path: locals only
        for i in indices:
            o, r, term, trunc, final = step_same_step(
                envs[i], action[i] if scalar_action else action[i].copy())
            next_obs[i] = o if reshaped is None else np.reshape(o, obs_shape)
            final_obs[i] = final if reshaped is None else np.reshape(final, obs_shape)
            rewards[i], terminated[i], truncated[i] = r, term, trunc

    def guarded(what: Any, indices: Sequence[int], g: int) -> bool:
        try:
            what(indices)
            return True
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            reply(("error", g, list(indices), f"{type(error).__name__}: {error}",
                   traceback.format_exc()))
            return False

    mine = sorted(i for part in owned for i in part)
    envs: dict[int, Any] = {}
    if not guarded(lambda ids: envs.update({i: make_gymnasium_env(gym_spec) for i in ids}),
                   mine, -1):
        return
    shapes = {tuple(envs[i].observation_space.shape) for i in mine}
    reshaped = None if shapes <= {tuple(obs_shape)} else obs_shape  # flattened observations
    count = len(mine) if threads <= 0 else min(threads, len(mine))
    queues: list[SimpleQueue] = []
    pending: dict[int, int] = {}
    pending_lock = threading.Lock()

    def env_thread(q: SimpleQueue) -> None:
        while True:
            g, indices = q.get()
            ok = guarded(step, indices, g)
            with pending_lock:
                pending[g] -= 1
                last = pending[g] == 0
            if last and ok:
                reply(("done", g))

    # env i steps in thread (its position among the worker's envs) % count; a group's command
    # goes to its threads as (thread, the group's envs it steps)
    thread_of = {i: n % count for n, i in enumerate(mine)}
    parts: list[list[tuple[int, list[int]]]] = []
    for envs_of_group in owned:
        by_thread: dict[int, list[int]] = {}
        for i in envs_of_group:
            by_thread.setdefault(thread_of[i], []).append(i)
        parts.append(list(by_thread.items()))
    if count > 1:
        for n in range(count):
            queues.append(SimpleQueue())
            threading.Thread(target=env_thread, args=(queues[n],), daemon=True,
                             name=f"jaxrl-env-{n}").start()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if message[0] == "close":
            for env in envs.values():
                env.close()
            return
        if message[0] == "reset":
            if guarded(functools.partial(_reset, envs, views, message[1]), mine, -1):
                reply(("reset",))
            continue
        g = message[1]
        if count <= 1:
            if guarded(step, owned[g], g):
                reply(("done", g))
            continue
        with pending_lock:
            pending[g] = len(parts[g])
        for n, indices in parts[g]:
            queues[n].put((g, indices))


# --------------------------------------------------------------------------- the parent side
class WorkerVecEnv(HostVecEnv):
    """Gymnasium envs in worker processes (see the module docstring). ``workers``: processes
    (0: the cores), at most the envs of a group; ``threads``: threads per worker (0: one per
    env); ``step_timeout``: seconds a step or reset may take (0: no limit)."""

    def __init__(self, spec: EnvSpec, num_envs: int, groups: int = 1, workers: int = 0,
                 threads: int = 0, step_timeout: float = 0.0):
        import gymnasium

        super().__init__(spec, num_envs, groups)
        self.timeout = step_timeout if step_timeout > 0 else None
        self.layout = buffer_layout(spec, num_envs)
        self.shm: SharedMemory | None = SharedMemory(create=True,
                                                     size=buffer_size(self.layout))
        self.views = buffer_views(self.shm.buf, self.layout)
        num_workers = max(1, min(workers or default_workers(), self.group_size))
        # owned[w][g]: worker w's envs of group g, a contiguous share
        self.owned = [[[] for _ in range(groups)] for _ in range(num_workers)]
        for g in range(groups):
            ids = np.arange(self.group(g).start, self.group(g).stop)
            for w, part in enumerate(np.array_split(ids, num_workers)):
                self.owned[w][g] = [int(i) for i in part]
        self._done: list[set] = [set() for _ in range(num_workers)]
        self._started = False  # the first reset also waits for the workers to start
        self.processes: list[Any] = []
        self.conns: list[Any] = []
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        gym_spec = gymnasium.spec(split_host_id(spec.env_id)[1])
        try:
            for w in range(num_workers):
                parent, child = context.Pipe()
                process = context.Process(
                    target=_worker, name=f"jaxrl-host-env-worker-{w}", daemon=True,
                    args=(child, self.shm.name, self.layout, self.owned[w], gym_spec, threads))
                process.start()
                child.close()
                self.processes.append(process)
                self.conns.append(parent)
        except BaseException:
            self.close(failed=True)
            raise

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        seeds = [int(s) for s in seeds]
        for conn in self.conns:
            conn.send(("reset", seeds))
        timeout = self.timeout
        if not self._started and timeout is not None:  # starting a process is no env's fault
            timeout = max(timeout, STARTUP_S)
        self._wait("a reset", "reset", range(len(self.conns)), timeout)
        self._started = True
        return self.views["obs"].copy()

    def send(self, g: int, action: np.ndarray) -> None:
        self.views["action"][self.group(g)] = self._action(action)
        for w, conn in enumerate(self.conns):
            if self.owned[w][g]:
                conn.send(("step", g))

    def recv(self, g: int) -> HostStep:
        self._wait("a step", g, [w for w in range(len(self.conns)) if self.owned[w][g]])
        part = self.group(g)
        v = self.views
        return HostStep(v["obs"][part], v["reward"][part], v["terminated"][part],
                        v["truncated"][part], v["final_obs"][part])

    def _wait(self, what: str, token: Any, workers: Sequence[int],
              timeout: float | None = None) -> None:
        """Wait until every worker of ``workers`` has answered ``token`` (at most ``timeout``
        seconds, by default the step timeout)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        waiting = [w for w in workers if token not in self._done[w]]
        while waiting:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready = connection.wait([self.conns[w] for w in waiting], left)
            if not ready:
                envs = sorted(i for w in waiting for i in self._envs_of(w, token))
                pids = [self.processes[w].pid for w in waiting]
                self.close(failed=True)
                raise HostEnvTimeout(
                    f"{self.spec.env_id}: {what} took longer than host_step_timeout="
                    f"{timeout:g} s; env(s) {envs} of {self.num_envs} did not answer "
                    f"(worker pids {pids}, terminated)")
            for conn in ready:
                self._receive(self.conns.index(conn), what)
            waiting = [w for w in waiting if token not in self._done[w]]
        for w in workers:
            self._done[w].discard(token)

    def _envs_of(self, w: int, token: Any) -> list[int]:
        return self.owned[w][token] if isinstance(token, int) else sum(self.owned[w], [])

    def _receive(self, w: int, what: str) -> None:
        try:
            message = self.conns[w].recv()
        except (EOFError, OSError):
            process = self.processes[w]
            process.join(1.0)
            self.close(failed=True)
            raise HostEnvError(
                f"{self.spec.env_id}: the worker process stepping env(s) {self._envs_of(w, 'all')} "
                f"(pid {process.pid}) died during {what} (exit code {process.exitcode})"
            ) from None
        if message[0] == "error":
            _, _, envs, text, trace = message
            pid = self.processes[w].pid
            self.close(failed=True)
            raise HostEnvError(f"{self.spec.env_id}: env(s) {envs} raised {text} (in worker "
                               f"{w}, pid {pid})\n{trace}")
        self._done[w].add(message[1] if message[0] == "done" else "reset")

    def close(self, failed: bool = False) -> None:
        if not failed:
            for conn in self.conns:
                try:
                    conn.send(("close",))
                except (OSError, ValueError):
                    pass
            for process in self.processes:
                process.join(5.0)
        for process in self.processes:
            if process.is_alive():
                process.terminate()
                process.join(2.0)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self.conns:
            conn.close()
        self.processes, self.conns = [], []
        self.views = {}
        if self.shm is not None:
            try:
                self.shm.close()
            except BufferError:  # views of it are still held: the mapping goes with them
                pass
            self.shm.unlink()
            self.shm = None
