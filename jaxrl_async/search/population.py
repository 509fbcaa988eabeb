"""The search space of a population (``jra.pbt``, ``jra.successive_halving``): which ``hyper``
fields vary, within which bounds, on a linear or a log scale, or over a list of choices.

A space is validated against the config on construction, before anything compiles: a field
that is not a traced (``hyper``) field of the config, bounds that are not ``low < high`` (or
not positive on a log scale), and bounds or choices outside the field's own valid range are a
``ValueError`` naming the field and what is allowed.

    space = jra.Space.of(cfg, {"lr": jra.LogUniform(1e-4, 3e-3), "ent_coef": [0.0, 0.01]})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxrl_async.search.sweep import LogUniform, Uniform, check_sweepable, sample_points


@dataclasses.dataclass(frozen=True)
class Dim:
    """One field of a space: ``kind`` is ``linear`` or ``log`` (a range ``[low, high]``) or
    ``choice`` (one of ``values``); ``integer`` fields are rounded after every change."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    values: tuple[float, ...] = ()
    integer: bool = False

    @property
    def spec(self) -> Any:
        """As ``random_search`` takes it: ``Uniform``, ``LogUniform`` or a list."""
        if self.kind == "choice":
            return list(self.values)
        return (LogUniform if self.kind == "log" else Uniform)(self.low, self.high)


@dataclasses.dataclass(frozen=True)
class Space:
    """A validated search space (build it with ``Space.of(cfg, {...})``); hashable, so the
    compiled population programs are cached by it."""

    dims: tuple[Dim, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    @property
    def spec(self) -> dict[str, Any]:
        return {d.name: d.spec for d in self.dims}

    def sample(self, num: int, seed: int) -> list[dict[str, Any]]:
        """``num`` points drawn as ``jra.random_search(..., seed=seed)`` draws them (so a
        population starts from the random search of the same size and seed)."""
        return sample_points(self.spec, num, seed)

    def to_json(self) -> dict[str, Any]:
        return {d.name: ({"choice": list(d.values)} if d.kind == "choice" else
                         {d.kind: [d.low, d.high]}) for d in self.dims}

    @classmethod
    def of(cls, cfg: Any, space: Mapping[str, Any] | Space) -> Space:
        """Check ``space`` (field -> ``jra.LogUniform(lo, hi)``, ``jra.Uniform(lo, hi)`` or a
        list of choices) against ``cfg``; ``ValueError`` naming the field on bad input."""
        if isinstance(space, Space):
            space = space.spec
        if not isinstance(space, Mapping) or not space:
            raise ValueError(f"space must be a non-empty dict of field -> jra.LogUniform(lo, hi), "
                             f"jra.Uniform(lo, hi) or a list of choices, got {space!r}")
        check_sweepable(cfg, list(space))
        return cls(tuple(_dim(cfg, name, spec) for name, spec in space.items()))

    @classmethod
    def from_json(cls, cfg: Any, data: Mapping[str, Any]) -> Space:
        kinds = {"linear": Uniform, "log": LogUniform}
        spec = {}
        for name, d in data.items():
            (kind, value), = d.items()
            spec[name] = list(value) if kind == "choice" else kinds[kind](*value)
        return cls.of(cfg, spec)


def _dim(cfg: Any, name: str, spec: Any) -> Dim:
    cls = type(cfg).__name__
    integer = isinstance(getattr(cfg, name), (int, np.integer)) and not isinstance(
        getattr(cfg, name), bool)
    if isinstance(spec, (Uniform, LogUniform)):
        log = isinstance(spec, LogUniform)
        low, high = spec
        if not low < high or (log and low <= 0):
            need = "0 < low < high (log scale)" if log else "low < high"
            raise ValueError(f"space[{name!r}] needs {need}, got {spec}")
        ends = (low, high)
        dim = Dim(name, "log" if log else "linear", float(low), float(high), integer=integer)
    elif isinstance(spec, Sequence) and not isinstance(spec, (str, bytes)) and spec:
        ends = tuple(spec)
        dim = Dim(name, "choice", values=tuple(float(v) for v in sorted(spec)), integer=integer)
    else:
        raise ValueError(f"space[{name!r}] must be jra.LogUniform(lo, hi), jra.Uniform(lo, hi) "
                         f"or a non-empty list of choices, got {spec!r}")
    for value in ends:  # the field's own check: a bound outside its valid range is named
        value = int(value) if integer and float(value).is_integer() else value
        try:
            dataclasses.replace(cfg, **{name: value})
        except ValueError as e:
            raise ValueError(f"space[{name!r}]: {value!r} is outside {cls}.{name}'s valid "
                             f"range: {e}") from None
    return dim


@dataclasses.dataclass(frozen=True)
class Schedule:
    """What happens when (static, hashable: the compiled programs are cached by it).

    ``segment`` updates per segment; ``keeps[k]``: the members of each population kept after
    segment ``k`` (the population: no exploit then); ``rest`` updates after the last segment."""

    kind: str
    population: int
    segment: int
    keeps: tuple[int, ...]
    rest: int
    fraction: float = 0.25
    resample_prob: float = 0.25
    factor: float = 1.2
    score: str = "return"

    @property
    def exploits(self) -> int:
        return sum(k < self.population for k in self.keeps)

    @property
    def replaced(self) -> int:
        """PBT: the members replaced at each exploit (and the top ones they copy)."""
        return max(1, int(self.fraction * self.population)) if self.population >= 2 else 1

    @property
    def static(self) -> Schedule:
        """What the compiled segments depend on (not the kind, the keeps or the rest)."""
        return dataclasses.replace(self, kind="", keeps=(), rest=0)
