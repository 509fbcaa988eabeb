"""Any JAX environment by name: ``register_env(name, factory)``, the ``jaxrl_async.envs``
entry-point group, and the env suites (Craftax, XLand-MiniGrid, Navix, Jumanji) by id prefix.

A factory takes the ``make_env`` keyword arguments (none from a config) and returns a
``VecEnv``: batched, auto-resetting, ``terminated``/``truncated`` apart and the true final
observation in ``info["final_observation"]`` (``core.AutoReset`` builds one from a single env
that does not reset itself). A package makes its envs known to every process, the command line
and a resumed run included, with an entry point whose name is the env id::

    [project.entry-points."jaxrl_async.envs"]
    "my-chain-v0" = "my_package.envs:make_chain"
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from importlib import metadata
from typing import Any

from jaxrl_async.envs import craftax, jumanji, navix, xminigrid
from jaxrl_async.envs.core import VecEnv

GROUP = "jaxrl_async.envs"
# id prefix -> adapter (each imports its library only when one of its ids is used)
SUITES = {suite.PREFIX: suite for suite in (craftax, xminigrid, navix, jumanji)}
RESERVED = (*SUITES, "brax/", "gymnasium:", "envpool:")

_factories: dict[str, Callable[..., VecEnv]] = {}
_made: dict[tuple[str, tuple], VecEnv] = {}


def register_env(name: str, factory: Callable[..., VecEnv]) -> None:
    """Make ``name`` an env id: ``make_env(name, **kw)`` returns ``factory(**kw)`` (made once
    per keyword set). Registering a name again replaces its factory."""
    import gymnax

    if not isinstance(name, str) or not name or name.startswith(RESERVED):
        raise ValueError(f"register_env: name must be a non-empty string not starting with one "
                         f"of {', '.join(RESERVED)}; got {name!r}")
    if name in gymnax.registered_envs:
        raise ValueError(f"register_env: {name!r} is a gymnax id; pick another name")
    if not callable(factory):
        raise ValueError(f"register_env: factory must be callable, got {factory!r}")
    _factories[name] = factory
    for key in [k for k in _made if k[0] == name]:
        del _made[key]


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def registered_ids() -> list[str]:
    """The names registered in this process and those of the entry-point group."""
    return sorted(set(_factories) | set(_entry_points()))


def is_registered(env_id: str) -> bool:
    """Whether ``env_id`` is registered (loading its entry point when it has one)."""
    if env_id in _factories:
        return True
    ep = _entry_points().get(env_id)
    if ep is None:
        return False
    register_env(env_id, ep.load())
    return True


def make_registered(env_id: str, env_kwargs: tuple = ()) -> VecEnv:
    if not is_registered(env_id):
        raise ValueError(unknown_message(env_id, []))
    key = (env_id, env_kwargs)
    if key not in _made:
        env = _factories[env_id](**dict(env_kwargs))
        if not isinstance(env, VecEnv):
            raise TypeError(f"the factory registered for {env_id!r} returned {type(env)}, not a "
                            "jaxrl_async.envs.VecEnv (wrap a single env in envs.AutoReset)")
        _made[key] = env
    return _made[key]


def suite_of(env_id: str) -> Any:
    """The adapter module of a suite id (``craftax/...``), or None."""
    for prefix, suite in SUITES.items():
        if env_id.startswith(prefix):
            return suite
    return None


def check_suite_id(env_id: str) -> None:
    """``ValueError`` naming the extra to install, or the suite's known ids."""
    suite = suite_of(env_id)
    if not suite.available():
        raise ValueError(f"{env_id!r} needs the optional extra: pip install "
                         f"'jaxrl_async[{suite.EXTRA}]'")
    known = suite.known_ids()
    if env_id not in known:
        raise ValueError(f"unknown env id {env_id!r}; known ids: {', '.join(known)}")


def unknown_message(env_id: str, known: list[str]) -> str:
    close = difflib.get_close_matches(env_id, known, n=1, cutoff=0.6)
    return (f"unknown env id {env_id!r}{f' (did you mean {close[0]}?)' if close else ''}: "
            f"register it in this process with "
            f"jaxrl_async.register_env({env_id!r}, factory) or as an entry point of the group "
            f"{GROUP!r} (docs/envs.md); known ids: {', '.join(known)}")
