"""The runners, and the one place a config's runner is picked: ``run`` and ``abstract_state``.

- ``sync``: rollout and update fused in one compiled program (``make_train``);
- ``actor_learner``: the async runner, actor devices and learner devices with a host pipeline
  between them (``placement``: devices and packing; ``pipeline``: tickets and threads;
  ``programs``: what is compiled);
- ``host_actors``: the async runner's actors for host envs (gymnasium, EnvPool), handed the
  plan of the envs (``host_streams.host_plan``: what the env layer says of them, asked once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from jaxrl_async.envs import is_host_env
from jaxrl_async.runners import actor_learner, host_actors, host_programs, sync
from jaxrl_async.runners.common import build, init_state
from jaxrl_async.runners.host_streams import host_plan
from jaxrl_async.runners.state import Callbacks, RunState, TrainResult


def run(cfg: Any, key: jax.Array, callbacks: Callbacks | None = None,
        state: RunState | None = None, devices: Sequence[Any] | None = None) -> TrainResult:
    """Train ``cfg`` under its runner (``cfg.runner``) from ``key``, or from ``state`` (a
    restored checkpoint). ``devices``: the async runner's local devices (default: all)."""
    if cfg.runner.name == "sync":
        if devices is not None:
            raise ValueError("devices= is for the async runner; the sync runner takes "
                             "SyncConfig(num_devices=N)")
        return sync.run(cfg, key, callbacks, state)
    if is_host_env(cfg.env):
        return host_actors.run(cfg, host_plan(cfg), key, callbacks, state, devices)
    return actor_learner.run(cfg, key, callbacks, state, devices)


def abstract_state(cfg: Any) -> RunState:
    """Shapes and dtypes of the run state the runner of ``cfg`` hands to ``on_state`` and
    continues from (what a checkpoint must hold)."""
    if cfg.runner.name == "async":
        if is_host_env(cfg.env):
            return host_programs.abstract_state(cfg, host_plan(cfg))
        return actor_learner.abstract_state(cfg)
    env, algo = build(cfg)
    env_id = jax.numpy.arange(cfg.num_envs, dtype=jax.numpy.int32)
    return jax.eval_shape(lambda key: init_state(env, algo, key, env_id), jax.random.key(0))


__all__ = ["run", "abstract_state", "actor_learner", "host_actors", "sync"]
