"""How a config field is declared and checked: ``hyper``/``static`` fields, the checks
they carry, the ``@config`` decorator (frozen, validated, a pytree), ``to_dict`` and
``field_docs``. The configs themselves are in ``config.py``."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax
import numpy as np

Check = Callable[[Any], "str | None"]
INT32_MAX = 2**31 - 1
T = TypeVar("T")


# --------------------------------------------------------------------------- field kinds
def hyper(default: Any, check: Check | None = None) -> Any:
    """A traced (sweepable) numeric field."""
    return dataclasses.field(default=default, metadata={"kind": "hyper", "check": check})


def static(default: Any = dataclasses.MISSING, check: Check | None = None, **kw: Any) -> Any:
    """A static (shape or structure) field."""
    return dataclasses.field(default=default, metadata={"kind": "static", "check": check}, **kw)


# --------------------------------------------------------------------------- checks
def _is_traced_or_array(x: Any) -> bool:
    """A tracer or an array with axes (a sweep's values), not a Python list or string."""
    return isinstance(x, jax.core.Tracer) or (
        isinstance(x, (np.ndarray, jax.Array)) and np.ndim(x) > 0)


def positive(x: Any) -> str | None:
    return None if x > 0 else "must be > 0"


def non_negative(x: Any) -> str | None:
    return None if x >= 0 else "must be >= 0"


def positive_count(x: Any) -> str | None:
    """A positive integer of any size (a budget summed over envs, never a traced int32)."""
    ok = isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x > 0
    return None if ok else "must be a positive integer"


def positive_int(x: Any) -> str | None:
    """A positive integer that fits the int32 the programs count in."""
    ok = positive_count(x) is None and x <= INT32_MAX
    return None if ok else f"must be a positive integer (at most {INT32_MAX})"


def non_negative_int(x: Any) -> str | None:
    ok = isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x <= INT32_MAX
    return None if ok else f"must be a non-negative integer (at most {INT32_MAX})"


def in_range(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Check:
    left, right = ("(" if lo_open else "["), (")" if hi_open else "]")

    def check(x: Any) -> str | None:
        ok = (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
        return None if ok else f"must be in {left}{lo}, {hi}{right}"

    return check


def one_of(*allowed: Any) -> Check:
    def check(x: Any) -> str | None:
        return None if x in allowed else f"must be one of {list(allowed)}"

    return check


def boolean(x: Any) -> str | None:
    return None if isinstance(x, (bool, np.bool_)) else "must be True or False"


def positive_int_tuple(x: Any) -> str | None:
    ok = isinstance(x, tuple) and len(x) > 0 and all(positive_int(v) is None for v in x)
    return None if ok else "must be a non-empty tuple of positive integers"


class FieldTypeError(TypeError, ValueError):
    """A config field given a value of the wrong type: a ``TypeError``, and a ``ValueError``
    like every other config error (so ``except ValueError`` handles all of them)."""


def finite(default: Any, value: Any) -> str | None:
    """``must be finite`` for a number field holding a NaN, an inf or a float overflow."""
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return None
    try:
        return None if math.isfinite(float(value)) else "must be finite"
    except OverflowError:
        return f"must be finite (at most {np.finfo(np.float64).max:.3g})"


def kind_error(default: Any, value: Any) -> str | None:
    """What is wrong with the type of ``value`` for a field whose default is ``default`` (a
    number field takes a real number, not a bool or a string), or ``None``."""
    if isinstance(default, bool):
        return None if isinstance(value, (bool, np.bool_)) else "must be True or False"
    if isinstance(default, (int, float)):
        if isinstance(value, (bool, np.bool_, str, bytes)) or np.ndim(value) != 0:
            return f"must be a number like {default!r}"
        try:
            float(value)
        except OverflowError:
            return None  # a huge integer: the field's check (or finite()) says what is allowed
        except (TypeError, ValueError):
            return f"must be a number like {default!r}"
    if isinstance(default, str):
        return None if isinstance(value, str) else f"must be a string like {default!r}"
    if isinstance(default, tuple):
        return None if isinstance(value, tuple) else f"must be a tuple like {default!r}"
    return None


# --------------------------------------------------------------------------- the decorator
def config(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen, keyword-only, validated dataclass registered as a pytree."""
    def __post_init__(self: Any) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            value = getattr(self, f.name)
            if f.metadata.get("kind") == "hyper" and _is_traced_or_array(value):
                continue  # traced, or a sweep's axis: checked when its values were
            message = kind_error(f.default, value)
            if message is not None:
                raise FieldTypeError(f"{type(self).__name__}.{f.name} {message}, got {value!r}")
            message = finite(f.default, value) or (None if check is None else check(value))
            if message is not None:
                raise ValueError(f"{type(self).__name__}.{f.name} {message}, got {value!r}")
        if hasattr(self, "validate"):
            self.validate()  # cross-field rules; subclasses extend it with super().validate()

    cls.__post_init__ = __post_init__
    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    fields = dataclasses.fields(cls)
    hyper_names = tuple(f.name for f in fields if f.metadata.get("kind") == "hyper")
    static_names = tuple(f.name for f in dataclasses.fields(cls) if f.name not in hyper_names)

    def flatten_with_keys(c: Any):
        children = [(jax.tree_util.GetAttrKey(n), getattr(c, n)) for n in hyper_names]
        return children, tuple(getattr(c, n) for n in static_names)

    def unflatten(aux: tuple, children: Sequence[Any]) -> Any:
        obj = object.__new__(cls)  # no re-validation: leaves may be tracers or vmap axis specs
        for name, value in zip(hyper_names, children):
            object.__setattr__(obj, name, value)
        for name, value in zip(static_names, aux):
            object.__setattr__(obj, name, value)
        return obj

    def flatten(c: Any):
        return [getattr(c, n) for n in hyper_names], tuple(getattr(c, n) for n in static_names)

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    cls._hyper_fields = hyper_names
    cls._static_fields = static_names
    return cls


def redefault(cls: type, name: str, default: Any) -> Any:
    """Field ``name`` of config class ``cls`` (kind and check kept) with another default, for a
    subclass: ``activation: str = redefault(TrainConfig, "activation", "relu")``."""
    f = cls.__dataclass_fields__[name]
    return dataclasses.field(default=default, metadata=f.metadata)


def hyper_fields(cfg: Any) -> tuple[str, ...]:
    """Names of the traced (sweepable) fields of a config."""
    return type(cfg)._hyper_fields


def static_fields(cfg: Any) -> tuple[str, ...]:
    """Names of the static (shape or structure) fields of a config."""
    return type(cfg)._static_fields


def fail(cfg: Any, field: str, message: str) -> None:
    """Raise the standard config error for ``field``."""
    raise ValueError(f"{type(cfg).__name__}.{field} {message}, got {getattr(cfg, field)!r}")


def check_seed(seed: Any, name: str = "seed") -> int:
    """``seed`` as an ``int``, or a ``ValueError`` naming ``name``. One rule for every seed
    (``jra.train``, ``jra.sweep``, ``jra.evaluate``, config files, the command line): an
    integer in [0, 2**31), the int32 a sweep carries its seeds in on the device."""
    ok = isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)
    if not ok or not 0 <= seed <= INT32_MAX:
        raise ValueError(f"{name} must be an integer in [0, 2**31) (the rule for every seed, "
                         f"train's and sweep's alike), got {seed!r}")
    return int(seed)


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-friendly dict of a config (nested configs included, with their type)."""
    out: dict[str, Any] = {"_type": type(cfg).__name__}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            value = to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, (np.generic, np.ndarray)) or hasattr(value, "tolist"):
            value = np.asarray(value).tolist()
        out[f.name] = value
    return out



@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a config class and its bases (the one source of help text;
    cached: read once per class). Do not change the dict returned."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, after in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs
