"""What a sweep returns: the tidy table of (config, seed) rows, curves, final params, and the
summaries, best config, CSV and plots made from them."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async.run.sinks import SCORES as METRICS
from jaxrl_async.run.sinks import final_window, window_return

AXIS = "runs"


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What a sweep returns: the tidy table (``rows``), the curves and final params.

    ``curves[name]`` is ``[configs, seeds, updates]``; ``params`` leaves are
    ``[configs, seeds, ...]``; ``rows`` has one dict per (config, seed).
    """

    base: Any
    fields: tuple[str, ...]
    points: list[dict[str, Any]]
    configs: list[Any]
    seeds: tuple[int, ...]
    curves: dict[str, np.ndarray]
    params: Any
    timing: dict[str, float]
    grid: dict[str, list] | None = None  # the grid's axes (None for random search)
    test: dict | None = None  # the best config re-trained on held-out seeds (jra.test_on_seeds)

    @classmethod
    def of_groups(cls, base: Any, points: list[dict], parts: list[tuple[list[int], Any]],
                  grid: dict | None = None) -> SweepResult:
        """One result of the static groups' results (``parts``: each group's point indices and
        its result), rows back in ``points`` order. A group with fewer updates (more envs per
        update) is padded at the start, so every run's final updates line up: NaN, and no
        episodes, before its first update."""
        length = max(r.curves["env_steps"].shape[-1] for _, r in parts)
        rows: dict[str, list] = {k: [None] * len(points) for k in parts[0][1].curves}
        params, configs = [None] * len(points), [None] * len(points)
        for indices, r in parts:
            for j, i in enumerate(indices):
                for k, v in r.curves.items():
                    rows[k][i] = _pad_front(np.asarray(v[j]), length, k)
                params[i] = jax.tree.map(lambda x, j=j: x[j], r.params)
                configs[i] = r.configs[j]
        shapes = {tuple(np.shape(x) for x in jax.tree.leaves(p)) for p in params}
        timings = [r.timing for _, r in parts]
        train_s = sum(t["train_s"] for t in timings)
        steps, all_s = (sum(t[k] for t in timings) for k in ("steps", "chunks_train_s"))
        runs = sum(t["runs"] for t in timings)
        timing = {"compile_s": sum(t["compile_s"] for t in timings), "train_s": train_s,
                  **speed(steps, all_s, runs), "runs": runs, "groups": len(parts),
                  "devices": max(t["devices"] for t in timings),
                  "padded_runs": sum(t["padded_runs"] for t in timings),
                  **{k: sum(t.get(k, 0) for t in timings)
                     for k in ("local_runs", "chunks", "resumed_chunks", "gather_s")},
                  "processes": timings[0].get("processes", 1)}
        return cls(base=base, fields=tuple(dict.fromkeys(k for p in points for k in p)),
                   points=[dict(p) for p in points], configs=configs, seeds=parts[0][1].seeds,
                   curves={k: np.stack(v) for k, v in rows.items()},
                   params=jax.tree.map(lambda *x: np.stack(x), *params) if len(shapes) == 1
                   else params, timing=timing, grid=grid)

    def _per_run(self, last: int | None) -> np.ndarray:
        """``[configs, seeds]`` mean return of the episodes that ended in the last ``last``
        updates of each run (all updates: ``None``)."""
        names = ("episode_return", "episode_return_sum", "episodes")
        curves = {k: self.curves[k] for k in names if k in self.curves}
        shape = curves["episode_return"].shape[:2]
        return np.array([[window_return({k: v[c, s] for k, v in curves.items()}, last)
                          for s in range(shape[1])] for c in range(shape[0])])

    @property
    def final_window(self) -> int:
        """The updates ``final_return`` averages over (``sinks.final_window``): the last 10, or
        enough to hold a whole episode of the env's time limit in every env."""
        return final_window(self.base)

    @property
    def final_return(self) -> np.ndarray:
        """``[configs, seeds]`` mean return of the episodes that ended in the last
        ``final_window`` updates."""
        return self._per_run(self.final_window)

    @property
    def final_eval_return(self) -> np.ndarray:
        """``[configs, seeds]`` mean return of each run's last evaluation (``eval_every``: the
        one after the final update); NaN without evaluations."""
        curves = self.curves.get("eval_return")
        if curves is None:
            return np.full((len(self.configs), len(self.seeds)), np.nan)
        with quiet_nan():
            finite = np.isfinite(curves)
            last = curves.shape[-1] - 1 - np.argmax(finite[..., ::-1], axis=-1)
            return np.where(finite.any(-1), np.take_along_axis(curves, last[..., None], -1)[..., 0],
                            np.nan)

    @property
    def auc(self) -> np.ndarray:
        """``[configs, seeds]`` area under the learning curve: the mean return of all the
        episodes that ended in the run (each counted once; NaN when none did)."""
        return self._per_run(None)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The tidy table: one row per (config, seed)."""
        final, auc = self.final_return, self.auc
        evaluated, evals = "eval_return" in self.curves, self.final_eval_return
        out = []
        for c, point in enumerate(self.points):
            for s, seed in enumerate(self.seeds):
                out.append({"config": c, **point, "seed": seed,
                            "final_return": float(final[c, s]), "auc": float(auc[c, s]),
                            **({"final_eval_return": float(evals[c, s])} if evaluated else {}),
                            "sps": self.timing["sps_per_run"]})
        return out

    def summary(self, metric: str = "final_return") -> list[dict[str, Any]]:
        """One row per config: its values and the mean and std of ``metric`` over seeds."""
        values = self._metric(metric)
        with quiet_nan():  # a config none of whose runs ended an episode: NaN, said plainly
            return [{"config": c, **point, metric: float(np.nanmean(values[c])),
                     f"{metric}_std": float(np.nanstd(values[c]))}
                    for c, point in enumerate(self.points)]

    def _metric(self, metric: str) -> np.ndarray:
        """``[configs, seeds]`` values of ``metric`` (one of ``METRICS``)."""
        check_metric(metric)
        return getattr(self, metric)

    def best(self, metric: str = "final_return", maximize: bool = True) -> dict[str, Any]:
        """The best config by ``metric`` (``final_return``, ``auc`` or ``final_eval_return``)
        averaged over seeds: its summary row plus ``"cfg"``, the config itself. ``ValueError``
        when no run has the metric (no episode ended, or no evaluation): no config is best."""
        rows = self.summary(metric)
        scores = np.array([r[metric] for r in rows])
        if np.isnan(scores).all():
            from jaxrl_async.run.train import no_episode_note

            why = ("the runs were not evaluated (eval_every=0): sweep with eval_every=N"
                   if metric == "final_eval_return" else
                   no_episode_note(self.base, whole_run=metric == "auc"))
            raise ValueError(f"no config has a {metric}, so none is best: {why}")
        scores = np.where(np.isnan(scores), -np.inf if maximize else np.inf, scores)
        i = int(np.argmax(scores) if maximize else np.argmin(scores))
        return {**rows[i], "cfg": self.configs[i]}

    def to_csv(self, path: str | Path) -> Path:
        """Write the tidy table (one row per config × seed) as CSV."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = self.rows
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        return path

    def to_pandas(self) -> Any:
        """The tidy table as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    def plot(self, metric: str = "final_return", path: str | Path | None = None) -> Any:
        """A heatmap of ``metric`` (mean over seeds) for a 2-D grid; learning curves with
        min-max seed bands for a 1-D grid; ``metric`` against each field otherwise. Returns the
        figure (saved to ``path`` when given)."""
        import matplotlib.pyplot as plt

        check_metric(metric)
        grid = self.grid or {}
        if len(grid) == 2:
            fig = self._heatmap(metric)
        elif len(grid) == 1:
            fig = self._curves()
        else:
            fig = self._scatter(metric)
        fig.tight_layout()
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path)
            plt.close(fig)
        return fig

    def _heatmap(self, metric: str) -> Any:
        import matplotlib.pyplot as plt

        (row_name, row_values), (col_name, col_values) = self.grid.items()
        mean = np.nanmean(self._metric(metric), axis=1).reshape(len(row_values),
                                                                  len(col_values))
        fig, ax = plt.subplots(figsize=(1.2 * len(col_values) + 2.5, 0.8 * len(row_values) + 1.5))
        image = ax.imshow(mean, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(col_values)), [label(v) for v in col_values])
        ax.set_yticks(range(len(row_values)), [label(v) for v in row_values])
        ax.set_xlabel(col_name)
        ax.set_ylabel(row_name)
        finite = mean[np.isfinite(mean)]
        middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for (i, j), value in np.ndenumerate(mean):
            ax.text(j, i, f"{value:.0f}", ha="center", va="center",
                    color="black" if value > middle else "white")
        fig.colorbar(image, ax=ax, label=f"{metric} (mean of {len(self.seeds)} seeds)")
        ax.set_title(f"{self.base.title} on {self.base.env}")
        return fig

    def _curves(self) -> Any:
        import matplotlib.pyplot as plt

        (name, values), = self.grid.items()
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for c, value in enumerate(values):
            steps = self.curves["env_steps"][c, 0]  # a static field's values differ in it
            returns = self.curves["episode_return"][c]
            with quiet_nan():
                mean = np.nanmean(returns, axis=0)
                low, high = np.nanmin(returns, axis=0), np.nanmax(returns, axis=0)
            keep = np.isfinite(mean)  # updates where an episode ended (sinks.finite_points)
            (line,) = ax.plot(steps[keep], mean[keep], label=f"{name}={label(value)}")
            ax.fill_between(steps[keep], low[keep], high[keep], color=line.get_color(),
                            alpha=0.2)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("mean episodic return")
        ax.set_title(f"{self.base.title} on {self.base.env}: {len(self.seeds)} seeds "
                     "(band: min-max)")
        ax.legend()
        ax.grid(alpha=0.3)
        return fig

    def _scatter(self, metric: str) -> Any:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(self.fields), figsize=(4 * len(self.fields), 3.5),
                                 squeeze=False)
        values = self._metric(metric)
        for ax, name in zip(axes[0], self.fields):
            raw = [p[name] for p in self.points]
            if all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                   for v in raw):
                x = np.array(raw, dtype=float)
            else:  # tuples (hidden_sizes), strings: one position per distinct value
                names = list(dict.fromkeys(label(v) for v in raw))
                x = np.array([names.index(label(v)) for v in raw], dtype=float)
                ax.set_xticks(range(len(names)), names)
            ax.scatter(np.repeat(x, len(self.seeds)), values.ravel(), alpha=0.7)
            if x.min() > 0 and x.max() / x.min() > 20 and isinstance(raw[0], (int, float)):
                ax.set_xscale("log")
            ax.set_xlabel(name)
            ax.set_ylabel(metric)
            ax.grid(alpha=0.3)
        return fig


def speed(steps: int, seconds: float, runs: int) -> dict[str, float]:
    """A sweep's ``timing`` speed keys: ``steps`` over every run in ``seconds`` of training
    (each chunk at the time it trained); ``sps`` NaN where no time was measured."""
    sps = steps / seconds if seconds > 0 else float("nan")
    return {"sps": sps, "sps_per_run": sps / runs, "steps": steps, "chunks_train_s": seconds}


def _pad_front(x: np.ndarray, length: int, name: str) -> np.ndarray:
    """``x`` ``[seeds, updates]`` padded at the start to ``length`` updates: zeros for the
    episode sums and counts (no episode), NaN for the rest."""
    missing = length - x.shape[-1]
    if missing == 0:
        return x
    fill = 0 if name in ("episode_return_sum", "episodes") else np.nan
    x = x.astype(np.float64) if fill != 0 and x.dtype.kind != "f" else x
    return np.concatenate([np.full((*x.shape[:-1], missing), fill, x.dtype), x], -1)


def label(value: Any) -> str:
    """A swept value as a tick label: numbers ``:g``, others (``hidden_sizes``) as written."""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return f"{value:g}"
    return str(value)


def check_metric(metric: str) -> None:
    """``ValueError`` naming the metrics a sweep's runs can be ranked by, unless ``metric`` is
    one of them."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)} (final_eval_return: with "
                         f"eval_every), got {metric!r}")


@contextlib.contextmanager
def quiet_nan() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
