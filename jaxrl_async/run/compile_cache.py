"""Compile once per program, across processes: jax's persistent compilation cache, on by
default for ``jra.train``, ``jra.sweep`` (and so the CLI and ``make reproduce``).

Where the compiled programs go, first match wins:

1. ``JAX_COMPILATION_CACHE_DIR`` (or ``jax.config``'s ``jax_compilation_cache_dir``) set by the
   user: jax's own cache, left exactly as the user configured it;
2. ``jra.use_compile_cache(FOLDER or "off")`` called in this process (the CLI's
   ``--compile-cache``);
3. the environment variable ``JAXRL_ASYNC_COMPILE_CACHE``: a folder, or ``off``;
4. ``$XDG_CACHE_HOME/jaxrl_async/xla`` (default ``~/.cache/jaxrl_async/xla``).

In cases 2-4 the programs go into a subfolder named for the jax, jaxlib and jaxrl_async
versions (``version_folder``), so an upgrade starts a fresh cache and never reads an old one.
jax keys every entry by the program itself (its HLO: shapes, the static config fields, the
code), the compile options, the backend and the jax version, so a changed config or changed
code compiles anew. Every program is cached, however small or quick to compile (the jax
defaults skip programs that compile in under a second, most CPU programs).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

ENV = "JAXRL_ASYNC_COMPILE_CACHE"
OFF = "off"
_chosen: str | None = None  # what use_compile_cache was given (a folder or "off"), if called
_ours: str | None = None  # the folder this module pointed jax at, if any


def version_folder() -> str:
    """The cache's subfolder for the running versions, e.g. ``jax-0.10.2_jaxlib-0.10.2_
    jaxrl_async-0.1.0``: a program compiled by other versions is never read back."""
    import jaxlib

    from jaxrl_async.version import __version__

    return f"jax-{jax.__version__}_jaxlib-{jaxlib.__version__}_jaxrl_async-{__version__}"


def default_root() -> Path:
    """``$XDG_CACHE_HOME/jaxrl_async/xla``, or ``~/.cache/jaxrl_async/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jaxrl_async" / "xla"


def user_cache_dir() -> str | None:
    """The cache folder the user gave jax itself (``JAX_COMPILATION_CACHE_DIR`` or
    ``jax.config``), if any and not set by this module."""
    current = jax.config.jax_compilation_cache_dir
    if current and current != _ours:
        return current
    return os.environ.get("JAX_COMPILATION_CACHE_DIR") or None


def resolve(where: str | os.PathLike | None) -> Path | None:
    """The folder the programs go into for ``where`` (a folder, ``"off"``, or ``None``: the
    environment variable, else the default), or ``None`` for off."""
    if where is None:
        where = os.environ.get(ENV) or default_root()
    if str(where).strip().lower() == OFF:
        return None
    if not str(where).strip():
        raise ValueError(f"{ENV}: a folder or '{OFF}' expected, got an empty string")
    return Path(where).expanduser() / version_folder()


def use_compile_cache(where: str | os.PathLike | None = None) -> Path | None:
    """Turn jax's persistent compilation cache on in folder ``where`` (programs go into its
    ``version_folder()``), or off with ``"off"``; ``None``: ``JAXRL_ASYNC_COMPILE_CACHE``, else
    ``$XDG_CACHE_HOME/jaxrl_async/xla``. ``jra.train`` and ``jra.sweep`` do this themselves; a
    notebook jitting ``jra.make_train(cfg)`` directly calls it once. A cache folder the user
    set for jax (``JAX_COMPILATION_CACHE_DIR``) is used as it is. Returns the folder in use,
    or ``None`` when off."""
    global _chosen
    _chosen = OFF if where is not None and str(where).strip().lower() == OFF else (
        None if where is None else str(where))
    return _apply(resolve(where))


def default_compile_cache() -> Path | None:
    """What ``jra.train`` and ``jra.sweep`` call: the cache as ``use_compile_cache`` last set
    it in this process, else as the environment says (``use_compile_cache()``)."""
    return _apply(resolve(_chosen))


def _apply(folder: Path | None) -> Path | None:
    global _ours
    user = user_cache_dir()
    if user is not None:  # the user's own jax cache: theirs to configure
        return Path(user)
    from jax._src import compilation_cache

    target = None if folder is None else str(folder)
    if target == _ours:
        return folder
    if target is not None:
        Path(target).mkdir(parents=True, exist_ok=True)
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        if "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES" not in os.environ:
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_dir", target)
    compilation_cache.reset_cache()  # jax opens its cache once: open the new folder, or none
    _ours = target
    return folder
