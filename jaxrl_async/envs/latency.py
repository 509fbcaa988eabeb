"""Host envs whose step takes a fixed time: gymnasium's CartPole-v1 that first waits or computes
for ``latency_ms`` milliseconds in every ``step``. They stand for the envs an asynchronous
pipeline is meant for, and are what ``experiments/bench/bench_host_envs.py`` measures it on.

- ``mode="sleep"``: the step waits with ``time.sleep``, which releases the GIL, as a simulator
  in another process, a robot or a remote service does while the actor waits for its answer.
  Threads overlap these waits.
- ``mode="spin"``: the step busy-loops in Python, holding the GIL, as a CPU-bound simulator
  written in Python does. Threads cannot overlap it; worker processes
  (``AsyncConfig(host_vectorization="workers", host_threads=1)``) can, up to the free cores.

Apart from the time it takes, the env is gymnasium's CartPole-v1 (same dynamics, spaces,
500-step limit), so its trajectories are those of gymnax's CartPole-v1 from the same starts
(``tests/test_host_envs.py``).

    env_id = waiting_cartpole_id(5.0)          # "gymnasium:jaxrl/CartPole-sleep5ms-v1"
    cfg = jra.PPOConfig(env=env_id, runner=jra.AsyncConfig())
"""

from __future__ import annotations

import time
from typing import Any

from gymnasium.envs.classic_control.cartpole import CartPoleEnv

MODES = ("sleep", "spin")
NAMESPACE = "jaxrl"


class WaitingCartPole(CartPoleEnv):
    """CartPole-v1 whose ``step`` takes ``latency_ms`` more milliseconds (see the module)."""

    def __init__(self, latency_ms: float = 0.0, mode: str = "sleep", **kwargs: Any):
        if mode not in MODES:
            raise ValueError(f"WaitingCartPole.mode must be one of {MODES}, got {mode!r}")
        if latency_ms < 0:
            raise ValueError(f"WaitingCartPole.latency_ms must be >= 0, got {latency_ms}")
        super().__init__(**kwargs)
        self.latency_s, self.mode = latency_ms / 1000.0, mode

    def step(self, action: Any):
        if self.mode == "sleep":
            time.sleep(self.latency_s)  # releases the GIL
        else:
            deadline = time.perf_counter() + self.latency_s
            while time.perf_counter() < deadline:  # holds the GIL (between switch intervals)
                pass
        return super().step(action)


def waiting_cartpole_id(latency_ms: float, mode: str = "sleep") -> str:
    """The host env id of a ``WaitingCartPole`` (``"gymnasium:jaxrl/CartPole-sleep5ms-v1"``),
    registered with gymnasium on first use. Subprocess workers need no registration: gymnasium
    hands them the env's spec, whose entry point is this module."""
    import gymnasium

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if latency_ms < 0:
        raise ValueError(f"latency_ms must be >= 0, got {latency_ms}")
    name = f"{NAMESPACE}/CartPole-{mode}{latency_ms:g}ms-v1"
    if name not in gymnasium.registry:
        gymnasium.register(name, entry_point=f"{__name__}:WaitingCartPole",
                           max_episode_steps=500, reward_threshold=475.0,
                           kwargs={"latency_ms": float(latency_ms), "mode": mode})
    return f"gymnasium:{name}"
