"""The points of a sweep: the ranges a random search draws from (``jra.Uniform``,
``jra.LogUniform``), the grid's combinations and the random draws, and the checks of the
fields they name (any field for a sweep; the traced ``hyper`` ones for a population)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_async.config.shared import hyper_fields, static_fields


class Uniform(NamedTuple):
    """A uniform range for ``random_search``."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, n)


class LogUniform(NamedTuple):
    """A log-uniform range for ``random_search`` (learning rates, coefficients)."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.exp(rng.uniform(math.log(self.low), math.log(self.high), n))


# --------------------------------------------------------------------------- points
def check_sweepable(cfg: Any, names: Sequence[str]) -> None:
    """``ValueError`` naming any field that is not a traced (``hyper``) field of ``cfg``."""
    sweepable = hyper_fields(cfg)
    bad = [n for n in names if n not in sweepable]
    if not bad:
        return
    cls = type(cfg).__name__
    unknown = [n for n in bad if n not in static_fields(cfg)]
    if unknown:
        raise ValueError(f"{cls} has no field(s) {', '.join(unknown)}; sweepable fields: "
                         f"{', '.join(sweepable)}")
    raise ValueError(
        f"{cls}.{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} static (shape or program "
        f"structure) and cannot vary inside one compiled sweep; sweepable (traced) fields: "
        f"{', '.join(sweepable)}. Sweep a static field with one sweep per value."
    )


def check_fields(cfg: Any, names: Sequence[str]) -> None:
    """``ValueError`` naming any field ``cfg`` does not have (a sweep groups its static
    fields' values, one program per group)."""
    known = (*hyper_fields(cfg), *static_fields(cfg))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"{type(cfg).__name__} has no field(s) {', '.join(unknown)}; "
                         f"fields: {', '.join(known)}")


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the first key varying slowest."""
    for name, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"grid[{name!r}] must be a non-empty list of values, got {values!r}")
    return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]


def sample_points(space: Mapping[str, Any], num_samples: int, seed: int = 0) -> list[dict]:
    """``num_samples`` points drawn from ``space`` (``Uniform``/``LogUniform`` ranges, or a list
    to choose from uniformly) by a NumPy generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    columns = {}
    for name, dist in space.items():
        if isinstance(dist, (Uniform, LogUniform)):
            if not dist.low < dist.high or (isinstance(dist, LogUniform) and dist.low <= 0):
                raise ValueError(f"space[{name!r}] needs 0 < low < high (log) or low < high, "
                                 f"got {dist}")
            columns[name] = [float(v) for v in dist.sample(rng, num_samples)]
        elif isinstance(dist, Sequence) and not isinstance(dist, str) and dist:
            columns[name] = [dist[i] for i in rng.integers(0, len(dist), num_samples)]
        else:
            raise ValueError(f"space[{name!r}] must be Uniform(...), LogUniform(...) or a list, "
                             f"got {dist!r}")
    return [{k: v[i] for k, v in columns.items()} for i in range(num_samples)]
