"""Gymnasium envs stepped by worker processes, observations in shared memory.

``WorkerVecEnv`` is a ``host.HostVecEnv`` whose B envs are stepped by W worker processes, each
a fresh interpreter running ``host_worker_process`` (``WorkerProcess``: not a fork of this
process, which runs JAX threads, and not multiprocessing's start methods, which re-run the
user's script in every worker: any script, ``python -c`` or notebook starts them). Each worker
owns an equal share of every group, so while the policy acts on one group every worker is
stepping another. A worker's envs step in its **lanes**, threads that each
own some envs: by default (``threads=0``) one lane per env, so envs that wait (a simulator in
another process, a robot, ``time.sleep``) overlap their waits; ``threads=k`` gives a worker k
lanes that step their envs one after another (``threads=1``: CPU-bound envs, which threads
cannot overlap).

One block of shared memory holds, for every env, its action, observation, final observation,
reward, end flags and whether it has answered (numpy views on both sides). A step costs two
bytes per lane and no Python in between: the parent writes a group's actions, then the group's
number to each of its lanes' own pipe; the lane, blocked reading that pipe, steps its envs of
the group, writes their results in place and one byte to the group's done pipe, which the
parent reads until every lane of the group has answered. No thread hands work to another and no
message is pickled on the hot path (a worker's GIL is taken once per env step, by the lane that
steps it). Resets and ``close`` go to the worker's main thread over its control pipe.

Failure: an env that raises is a ``HostEnvError`` with its traceback; a worker that dies is a
``HostEnvError`` naming it, its envs and its exit code; a step that takes longer than
``step_timeout`` seconds is a ``HostEnvTimeout`` naming the envs that did not answer. Either way
the workers are terminated and reaped before the error is raised; a worker whose parent dies
leaves on its own (its pipes close).
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from multiprocessing import connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import cloudpickle
import numpy as np

from jaxrl_async.envs import host_worker_process
from jaxrl_async.envs.core import EnvSpec
from jaxrl_async.envs.host import HostEnvError, HostEnvTimeout, HostStep, HostVecEnv, split_host_id
from jaxrl_async.envs.host_worker_process import ALIGN, FIELDS, buffer_size, buffer_views

STARTUP_S = 60.0
"""Seconds the first reset may take at least: the workers start (and import) meanwhile."""


def buffer_layout(spec: EnvSpec, num_envs: int) -> dict[str, tuple[int, tuple, str]]:
    """Where each field lies in the shared block: ``name -> (offset, shape, dtype)``."""
    action = ((), "int64") if spec.discrete else (tuple(spec.action_shape), "float32")
    shapes = {"action": action, "obs": (tuple(spec.obs_shape), np.dtype(spec.obs_dtype).str),
              "final_obs": (tuple(spec.obs_shape), np.dtype(spec.obs_dtype).str),
              "reward": ((), "float32"), "terminated": ((), "bool"), "truncated": ((), "bool"),
              "answered": ((), "bool")}
    layout, offset = {}, 0
    for name in FIELDS:
        shape, dtype = shapes[name]
        full = (num_envs, *shape)
        layout[name] = (offset, full, dtype)
        offset += -(-int(np.prod(full)) * np.dtype(dtype).itemsize // ALIGN) * ALIGN
    return layout


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def lanes_of(owned: list[list[int]], threads: int) -> list[list[list[int]]]:
    """A worker's lanes: ``lanes[l][g]``, the envs of group g that lane l steps. ``owned[g]``:
    the worker's envs of group g; ``threads``: lanes (0: one per env). Env n of the worker (in
    index order) steps in lane n % lanes."""
    mine = sorted(i for part in owned for i in part)
    count = len(mine) if threads <= 0 else max(1, min(threads, len(mine)))
    lane = {i: n % count for n, i in enumerate(mine)}
    return [[[i for i in part if lane[i] == n] for part in owned] for n in range(count)]


def _allow_files(more: int) -> None:
    """Raise this process's soft limit on open files (up to the hard one) so that ``more``
    pipe ends fit beside those already open."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = len(os.listdir("/proc/self/fd")) + more + 64 if os.path.isdir("/proc/self/fd") else 0
    if soft != resource.RLIM_INFINITY and want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY
                                                    else min(want, hard), hard))


# --------------------------------------------------------------------------- a worker
_LIVE: weakref.WeakSet = weakref.WeakSet()


class WorkerProcess:
    """One env worker: ``python -c host_worker_process.BOOT`` with the file descriptors
    ``pass_fds`` and its end of the control connection, ``control_fd``, inherited (the same
    numbers there). ``sentinel``: a file descriptor that becomes readable when the process
    ends (a pipe whose only write end the worker holds), as multiprocessing's is."""

    def __init__(self, control_fd: int, pass_fds: Sequence[int]):
        ends, keep = os.pipe()
        command = [sys.executable, "-c", host_worker_process.BOOT,
                   host_worker_process.__file__, str(control_fd)]
        try:
            self.popen = subprocess.Popen(command, pass_fds=(control_fd, keep, *pass_fds),
                                          stdin=subprocess.DEVNULL)
        except BaseException:
            os.close(ends)
            raise
        finally:
            os.close(keep)
        self.sentinel, self.pid = ends, self.popen.pid
        _LIVE.add(self)

    @property
    def exitcode(self) -> int | None:
        """Its exit status (``-N``: killed by signal N), ``None`` while it runs."""
        return self.popen.poll()

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def stop(self) -> None:
        """Terminate it (SIGTERM, then SIGKILL), reap it and close its sentinel."""
        if self.is_alive():
            self.popen.terminate()
            self.join(2.0)
        if self.is_alive():
            self.popen.kill()
            self.join()
        if self.sentinel >= 0:
            os.close(self.sentinel)
            self.sentinel = -1
        _LIVE.discard(self)


def live_workers() -> list[int]:
    """The pids of the env workers started and not yet stopped (tests check none is left)."""
    return sorted(p.pid for p in list(_LIVE) if p.is_alive() or p.sentinel >= 0)


# --------------------------------------------------------------------------- the parent side
class WorkerVecEnv(HostVecEnv):
    """Gymnasium envs in worker processes (see the module docstring). ``workers``: processes
    (0: the cores), at most the envs of a group; ``threads``: lanes per worker (0: one per
    env); ``step_timeout``: seconds a step or reset may take (0: no limit)."""

    def __init__(self, spec: EnvSpec, num_envs: int, groups: int = 1, workers: int = 0,
                 threads: int = 0, step_timeout: float = 0.0):
        import gymnasium

        super().__init__(spec, num_envs, groups)
        if groups > 256:
            raise ValueError(f"WorkerVecEnv.groups must be at most 256, got {groups}")
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
        lanes = [lanes_of(owned, threads) for owned in self.owned]
        self._group_byte = [bytes([g]) for g in range(groups)]
        self._wake_fds: list[list[int]] = [[] for _ in range(groups)]  # [g]: its lanes' pipes
        self._workers_of = [[w for w in range(num_workers) if self.owned[w][g]]
                            for g in range(groups)]
        self._started = False  # the first reset also waits for the workers to start
        self.processes: list[WorkerProcess] = []
        self.conns: list[Any] = []
        self._fds: list[int] = []  # this side's pipe ends, closed with it
        self._done_fds: list[int] = []
        gym_spec = cloudpickle.dumps(gymnasium.spec(split_host_id(spec.env_id)[1]))
        _allow_files(sum(map(len, lanes)) + 2 * groups + 4 * num_workers)
        try:
            done_pipes = [os.pipe() for _ in range(groups)]
            self._fds += [reader for reader, _ in done_pipes]
            self._done_fds = [reader for reader, _ in done_pipes]
            for w in range(num_workers):
                parent, child = socket.socketpair()
                self.conns.append(connection.Connection(parent.detach()))
                wakes = [os.pipe() for _ in lanes[w]]
                self._fds += [writer for _, writer in wakes]
                theirs = [reader for reader, _ in wakes]
                try:
                    process = WorkerProcess(child.fileno(),
                                            [*theirs, *(writer for _, writer in done_pipes)])
                finally:
                    child.close()
                    for fd in theirs:
                        os.close(fd)
                self.processes.append(process)
                self.conns[-1].send((sys.path, self.shm.name, self.layout, lanes[w], theirs,
                                     [writer for _, writer in done_pipes], gym_spec))
                for lane, (_, writer) in zip(lanes[w], wakes):
                    for g, part in enumerate(lane):
                        if part:
                            self._wake_fds[g].append(writer)
            for _, writer in done_pipes:
                os.close(writer)
        except BaseException:
            self.close(failed=True)
            raise
        self._sentinels = {p.sentinel: w for w, p in enumerate(self.processes)}
        self._pollers = []  # [g]: group g's done pipe and its workers' sentinels
        for g in range(groups):
            poller = select.poll()
            poller.register(self._done_fds[g], select.POLLIN)
            for w in self._workers_of[g]:
                poller.register(self.processes[w].sentinel, select.POLLIN)
            self._pollers.append(poller)

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
        deadline = None if timeout is None else time.monotonic() + timeout
        waiting = list(range(len(self.conns)))
        while waiting:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready = connection.wait([self.conns[w] for w in waiting], left)
            if not ready:
                self._timed_out("a reset", timeout, sorted(
                    i for w in waiting for part in self.owned[w] for i in part))
            for conn in ready:
                w = self.conns.index(conn)
                self._receive(w, "a reset")
                waiting.remove(w)
        self._started = True
        return self.views["obs"].copy()

    def send(self, g: int, action: np.ndarray) -> None:
        part = self.group(g)
        self.views["action"][part] = self._action(action)
        self.views["answered"][part] = False
        byte, write = self._group_byte[g], os.write
        try:
            for fd in self._wake_fds[g]:
                write(fd, byte)
        except OSError:  # a worker is gone
            self._raise_died(self._dead_worker(self._workers_of[g]), "a step")

    def recv(self, g: int) -> HostStep:
        left, fd, poll = len(self._wake_fds[g]), self._done_fds[g], self._pollers[g].poll
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while left:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0) * 1000
            events = poll(wait)
            if not events:
                answered = self.views["answered"][self.group(g)]
                self._timed_out("a step", self.timeout, [
                    self.group(g).start + int(i) for i in np.flatnonzero(~answered)])
            if any(ready == fd for ready, _ in events):
                got = os.read(fd, left)
                left -= len(got)
                if b"e" in got:
                    self._raise_env_error(g)
                if got:
                    continue
            # a sentinel, or the done pipe closed: a worker of the group is gone
            self._raise_died(self._dead_worker(self._workers_of[g]), "a step")
        part = self.group(g)
        v = self.views
        return HostStep(v["obs"][part], v["reward"][part], v["terminated"][part],
                        v["truncated"][part], v["final_obs"][part])

    # ------------------------------------------------------------------------- failures
    def _timed_out(self, what: str, timeout: float, envs: list[int]) -> None:
        late = set(envs)
        workers = [w for w, owned in enumerate(self.owned)
                   if any(i in late for part in owned for i in part)]
        pids = [self.processes[w].pid for w in workers]
        self.close(failed=True)
        raise HostEnvTimeout(
            f"{self.spec.env_id}: {what} took longer than host_step_timeout={timeout:g} s; "
            f"env(s) {envs} of {self.num_envs} did not answer (worker pids {pids}, terminated)")

    def _dead_worker(self, workers: Sequence[int]) -> int:
        """The first of ``workers`` whose process has ended (waiting a moment for it)."""
        ready = connection.wait([self.processes[w].sentinel for w in workers], 1.0)
        return self._sentinels[ready[0]] if ready else workers[0]

    def _raise_died(self, w: int, what: str) -> None:
        process = self.processes[w]
        process.join(1.0)
        envs = sorted(i for part in self.owned[w] for i in part)
        self.close(failed=True)
        raise HostEnvError(
            f"{self.spec.env_id}: the worker process stepping env(s) {envs} "
            f"(pid {process.pid}) died during {what} (exit code {process.exitcode})")

    def _raise_env_error(self, g: int) -> None:
        """A lane of group g answered ``e``: its worker sent the error before."""
        for w in self._workers_of[g]:
            if self.conns[w].poll():
                self._receive(w, "a step")
        self.close(failed=True)
        raise HostEnvError(f"{self.spec.env_id}: an env of group {g} failed (no report)")

    def _receive(self, w: int, what: str) -> None:
        """Worker w's next message: its reset's answer, or its error raised here."""
        try:
            message = self.conns[w].recv()
        except (EOFError, OSError):
            self._raise_died(w, what)
        if message[0] == "error":
            _, _, envs, text, trace = message
            pid = self.processes[w].pid
            self.close(failed=True)
            raise HostEnvError(f"{self.spec.env_id}: env(s) {envs} raised {text} (in worker "
                               f"{w}, pid {pid})\n{trace}")

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
            process.stop()
        for conn in self.conns:
            conn.close()
        for fd in self._fds:
            os.close(fd)
        self.processes, self.conns, self._fds = [], [], []
        self._wake_fds = [[] for _ in self._wake_fds]
        self.views = {}
        if self.shm is not None:
            try:
                self.shm.close()
            except BufferError:  # views of it are still held: the mapping goes with them
                pass
            self.shm.unlink()
            self.shm = None
