"""What ``jra.pbt`` and ``jra.successive_halving`` return: every member's learning curve, the
lineage (who copied whom at each exploit step, each member's hyperparameters over time), the
best member, the table, and a plot of both."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async.run.sinks import final_window, finite_points, window_returns
from jaxrl_async.search.sweep_result import quiet_nan


@dataclasses.dataclass(frozen=True)
class PopulationResult:
    """A trained population. Members are slots: member ``m`` of the population of seed ``s``
    keeps its slot when it copies another member's state, so its curve goes on.

    ``curves[name]``: ``[members, seeds, updates]``; ``params`` leaves ``[members, seeds,
    ...]``; ``lineage``: ``update [E]`` (updates done at each segment's end), ``exploited
    [E]`` (whether members were replaced then), ``source [E, seeds, members]`` (the member each
    continued from; itself when kept), ``score [E, seeds, members]`` (what they were ranked
    by) and, for each field of the space, ``[E + 1, seeds, members]`` values (the first row:
    the initial draw).
    """

    base: Any
    space: Any
    schedule: Any
    seeds: tuple[int, ...]
    points: list[dict[str, Any]]
    curves: dict[str, np.ndarray]
    lineage: dict[str, np.ndarray]
    params: Any
    timing: dict[str, float]
    test: dict | None = None  # the best member's config re-trained on held-out seeds

    @classmethod
    def assemble(cls, cfg: Any, space: Any, schedule: Any, seeds: tuple[int, ...],
                 points: list[dict], outputs: list, rest: dict, params: Any,
                 timing: dict) -> PopulationResult:
        """From the program's outputs: per group of segments ``(metrics [G, L, R], record
        [G, S, N])``, the last updates' metrics ``[rest, R]`` and the final params ``[R]``."""
        n, s = schedule.population, len(seeds)
        pieces = {k: [] for k in rest}
        records: dict[str, list] = {}
        for metrics, record in outputs:
            for k, v in metrics.items():
                pieces[k].append(np.asarray(v).reshape(-1, n * s))
            for k, v in record.items():
                records.setdefault(k, []).append(np.asarray(v))
        curves = {k: np.concatenate([*pieces[k], np.asarray(rest[k])]).T.reshape(n, s, -1)
                  for k in rest}
        done = sum(len(r) for r in records.get("source", []))
        lineage = {k: np.concatenate(v) for k, v in records.items()} if done else {
            "source": np.zeros((0, s, n), np.int32), "score": np.zeros((0, s, n), np.float32),
            **{f: np.zeros((0, s, n), np.float32) for f in space.names}}
        for f in space.names:
            first = np.tile(np.asarray([p[f] for p in points], np.float32), (s, 1))
            lineage[f] = np.concatenate([first[None], lineage[f]])
        lineage["update"] = (np.arange(done) + 1) * schedule.segment
        lineage["exploited"] = np.asarray(schedule.keeps[:done]) < n
        params = jax.tree.map(lambda x: np.asarray(x).reshape(n, s, *np.shape(x)[1:]), params)
        return cls(cfg, space, schedule, tuple(seeds), points, curves, lineage, params, timing)

    # ------------------------------------------------------------------ scores
    @property
    def final_window(self) -> int:
        return final_window(self.base)

    @property
    def final_return(self) -> np.ndarray:
        """``[members, seeds]`` mean return of the episodes that ended in each member's last
        ``final_window`` updates (as ``SweepResult.final_return``)."""
        return window_returns(self.curves, self.final_window)

    @property
    def final_hypers(self) -> dict[str, np.ndarray]:
        """``field -> [members, seeds]``: each member's values at the end."""
        return {f: self.lineage[f][-1].T for f in self.space.names}

    @property
    def population_best(self) -> np.ndarray:
        """``[seeds]`` the best member's final return in each population."""
        with quiet_nan():
            return np.nanmax(self.final_return, axis=0)

    @property
    def population_mean(self) -> np.ndarray:
        """``[seeds]`` the mean final return of each population's members."""
        with quiet_nan():
            return np.nanmean(self.final_return, axis=0)

    def best(self) -> dict[str, Any]:
        """The member with the highest final return over all populations: its slot, seed,
        final hyperparameters, final return and ``cfg`` (the base config with them)."""
        scores = np.where(np.isnan(self.final_return), -np.inf, self.final_return)
        m, s = np.unravel_index(int(np.argmax(scores)), scores.shape)
        values = {f: _number(self.base, f, v[m, s]) for f, v in self.final_hypers.items()}
        return {"member": int(m), "seed": self.seeds[s], **values,
                "final_return": float(self.final_return[m, s]),
                "cfg": dataclasses.replace(self.base, **values)}

    def ancestry(self, member: int, seed_index: int = 0) -> list[int]:
        """The slots member ``member``'s state came through, one per segment (oldest first),
        ending with ``member``: follow ``source`` back from the end."""
        path = [member]
        for source in self.lineage["source"][::-1, seed_index]:
            path.append(int(source[path[-1]]))
        return path[::-1]

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One row per (member, seed): its initial and final values, final return, and the
        slot whose initial config its state descends from."""
        final, hypers = self.final_return, self.final_hypers
        out = []
        for m, point in enumerate(self.points):
            for s, seed in enumerate(self.seeds):
                out.append({"member": m, "seed": seed,
                            **{f"initial_{f}": v for f, v in point.items()},
                            **{f: shortest(hypers[f][m, s]) for f in self.space.names},
                            "root": self.ancestry(m, s)[0],
                            "final_return": float(final[m, s])})
        return out

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(self.rows[0]))
            writer.writeheader()
            writer.writerows(self.rows)
        return path

    # ------------------------------------------------------------------ plot
    def plot(self, path: str | Path | None = None, seed_index: int = 0) -> Any:
        """The members' learning curves and each field of the space over time (one line per
        member slot; copy events marked), for the population of ``seeds[seed_index]``."""
        import matplotlib.pyplot as plt

        names = self.space.names
        fig, axes = plt.subplots(1, 1 + len(names), figsize=(4.5 * (1 + len(names)), 3.6),
                                 squeeze=False)
        steps = self.curves["env_steps"][0, 0]
        colors = plt.cm.viridis(np.linspace(0, 1, len(self.points)))
        per_update = self.base.steps_per_update
        with quiet_nan():
            for m, color in enumerate(colors):
                returns = self.curves["episode_return"][m, seed_index]
                axes[0, 0].plot(*finite_points(steps, returns), color=color, lw=0.8, alpha=0.8)
        axes[0, 0].set_xlabel("environment steps")
        axes[0, 0].set_ylabel("mean episodic return")
        axes[0, 0].set_title(f"{self.schedule.kind} on {self.base.env}: "
                             f"{len(self.points)} members")
        times = np.concatenate([[0], self.lineage["update"]]) * per_update
        copies = self.lineage["source"][:, seed_index] != np.arange(len(self.points))
        for ax, name in zip(axes[0, 1:], names):
            values = self.lineage[name][:, seed_index]
            for m, color in enumerate(colors):
                ax.step(times, values[:, m], where="post", color=color, lw=0.8, alpha=0.8)
                hit = copies[:, m]
                ax.scatter(times[1:][hit], values[1:, m][hit], color=color, s=8, marker="x")
            if self.space.dims[names.index(name)].kind == "log":
                ax.set_yscale("log")
            ax.set_xlabel("environment steps")
            ax.set_ylabel(name)
            ax.set_title(f"{name} (x: copied a better member)")
        for ax in axes[0]:
            ax.grid(alpha=0.3)
        fig.tight_layout()
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path)
            plt.close(fig)
        return fig


def _number(cfg: Any, field: str, value: Any) -> Any:
    """``value`` as the field's Python type (an int for an int field; a float as the shortest
    decimal of its float32, so a member's ``lr=0.01`` reads 0.01, not 0.009999999776482582)."""
    return int(round(float(value))) if isinstance(getattr(cfg, field), int) and not isinstance(
        getattr(cfg, field), bool) else shortest(value)


def shortest(value: Any) -> float:
    """A float32 value (a traced hyperparameter) as the shortest decimal that is that
    float32."""
    return float(str(np.float32(value)))
