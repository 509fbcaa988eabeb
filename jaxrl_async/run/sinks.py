"""Metric sinks (the host edge): progress bar, JSONL, CSV, TensorBoard, learning-curve PNG,
run summary.

Every sink takes chunks of metrics as ``{name: np.ndarray [n]}`` (one row per update), so the
device loop hands metrics over every ``log_every`` updates, never per update. The update number
(1-based) is the row key in every file, which is what lets a resumed run cut the rows past its
checkpoint (``truncate_metrics``) and carry on appending.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from jaxrl_async.envs import env_spec
from jaxrl_async.runners.state import Callbacks


def strict(value: Any) -> Any:
    """``value`` as strict JSON can hold it: NaN and infinities as ``None`` (null), NumPy and
    JAX scalars and arrays as Python numbers and lists, tuples as lists (nested too)."""
    if hasattr(value, "tolist"):  # NumPy/JAX scalars and arrays
        value = value.tolist()
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(data: Any, **kwargs: Any) -> str:
    """``data`` as strict JSON (RFC 8259: no bare ``NaN`` or ``Infinity``, which ``jq``,
    JavaScript and most parsers reject): every file and line of JSON the library writes."""
    return json.dumps(strict(data), allow_nan=False, **kwargs)


def format_return(value: float) -> str:
    """A return as printed: one decimal, ``0.0`` for what rounds to zero (never ``-0.0``)."""
    text = f"{value:.1f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


class JsonlSink(Callbacks):
    """``metrics.jsonl``: one JSON object per update."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a")

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        n = len(next(iter(rows.values())))
        for i in range(n):
            record = {"update": first_update + i + 1}
            record.update({k: v[i] for k, v in rows.items()})
            self.file.write(to_json(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class CsvSink(Callbacks):
    """``metrics.csv``: a header, then one row per update (appends to an existing file)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.columns: list[str] | None = None
        if self.path.exists() and self.path.stat().st_size:
            with self.path.open(newline="") as f:
                self.columns = next(csv.reader(f))
        self.file = self.path.open("a", newline="")
        self.writer = csv.writer(self.file)

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        if self.columns is None:
            self.columns = ["update", *rows]
            self.writer.writerow(self.columns)
        columns = {"update": np.arange(first_update + 1, first_update + 1 + _length(rows))}
        columns.update(rows)
        for i in range(len(columns["update"])):
            self.writer.writerow([_cell(columns[c][i]) if c in columns else ""
                                  for c in self.columns])
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TensorBoardSink(Callbacks):
    """TensorBoard event files (tensorboardX), one scalar per metric, step = update number.

    A resumed run purges the events past its checkpoint, so the curves do not fork.
    """

    def __init__(self, logdir: str | Path):
        self.logdir, self.writer = Path(logdir), None

    def on_start(self, first_update: int) -> None:
        from tensorboardX import SummaryWriter

        purge = first_update + 1 if first_update else None
        self.writer = SummaryWriter(str(self.logdir), purge_step=purge)

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        for i in range(_length(rows)):
            for name, values in rows.items():
                value = float(values[i])
                if math.isfinite(value):
                    self.writer.add_scalar(name, value, first_update + i + 1)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class ProgressBar(Callbacks):
    """A tqdm bar over env steps: steps done, SPS since compilation ended, the latest return,
    and the ETA."""

    def __init__(self, total_steps: int, steps_per_update: int, desc: str = "train"):
        self.total, self.steps_per_update, self.desc = total_steps, steps_per_update, desc
        self.bar = None

    def on_start(self, first_update: int) -> None:
        from tqdm.auto import tqdm

        self.first_steps = first_update * self.steps_per_update
        self.start = time.perf_counter()
        self.bar = tqdm(total=self.total, initial=self.first_steps, desc=self.desc, unit="step",
                        unit_scale=True, dynamic_ncols=True, mininterval=0.5,
                        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} "
                                   "[{elapsed}<{remaining}{postfix}]")

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        steps = int(rows["env_steps"][-1])
        self.bar.update(max(steps - self.bar.n, 0))
        ret = window_return(rows)  # the episodes that ended in this chunk
        sps = (steps - self.first_steps) / max(time.perf_counter() - self.start, 1e-9)
        shown = format_return(ret) if math.isfinite(ret) else "n/a"
        if "eval_return" in rows:  # eval_every: the latest evaluation so far
            latest = last_eval_return(rows)
            self.eval = latest if math.isfinite(latest) else getattr(self, "eval", latest)
            shown += f", eval={format_return(self.eval)}" if math.isfinite(self.eval) else \
                ", eval=n/a"
        self.bar.set_postfix_str(f"SPS={sps:,.0f}, return={shown}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def window_return(metrics: dict[str, np.ndarray], last: int | None = None) -> float:
    """Mean return of the episodes that ended in the last ``last`` updates (all: ``None``):
    the sum of their ``episode_return_sum`` over the sum of their ``episodes``, so every
    episode counts once; NaN when none ended. Metrics without the sums (older runs) fall back
    to the mean of the finite per-update ``episode_return``."""
    return float(window_returns(metrics, last))


def window_returns(metrics: dict[str, np.ndarray], last: int | None = None) -> np.ndarray:
    """``window_return`` of metrics with leading axes (``[..., updates]``, e.g. ``[seeds,
    updates]`` from a vmapped ``make_train``): one mean per leading index."""
    window = (..., slice(-last, None) if last else slice(None))
    if "episode_return_sum" in metrics and "episodes" in metrics:
        total = np.asarray(metrics["episode_return_sum"], np.float64)[window].sum(-1)
        count = np.asarray(metrics["episodes"], np.float64)[window].sum(-1)
        with np.errstate(all="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)
    returns = np.asarray(metrics["episode_return"], np.float64)[window]
    finite = np.isfinite(returns)
    with np.errstate(all="ignore"):
        return np.where(finite.any(-1), np.where(finite, returns, 0).sum(-1) / finite.sum(-1),
                        np.nan)


FINAL_UPDATES = 10  # the least number of updates a final return is averaged over
SCORES = ("final_return", "auc", "final_eval_return")  # what runs are ranked by (sweeps)


def final_window(cfg: Any) -> int:
    """The updates a run's final return averages over: the last 10, or as many as hold one
    whole episode of every env where the env's time limit is longer than that (Pendulum's
    200 steps at 8 steps per update: 25 updates); at most the whole run. ``None``: 10."""
    if cfg is None:
        return FINAL_UPDATES
    limit = env_spec(cfg.env).max_episode_steps or 0
    return min(cfg.num_updates, max(FINAL_UPDATES, -(-limit // cfg.num_steps)))


def final_return(metrics: dict[str, np.ndarray], last: int = FINAL_UPDATES) -> float:
    """Mean return of the episodes that ended in the last ``last`` updates (``window_return``;
    a run's final return uses ``last=final_window(cfg)``)."""
    return window_return(metrics, last)


def last_eval_return(metrics: dict[str, np.ndarray]) -> float:
    """The latest evaluation's mean return (``eval_every``; the final one after a whole run);
    NaN without evaluations."""
    values = np.asarray(metrics.get("eval_return", []), np.float64)
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if finite.size else math.nan


def finite_points(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """The points of a curve where ``y`` is finite: an update in which no episode ended has a
    NaN return, and a line drawn through NaNs connects no two points (episodes longer than a
    rollout leave most updates without one)."""
    x, y = np.asarray(x), np.asarray(y, np.float64)
    keep = np.isfinite(y)
    return x[keep], y[keep]


def learning_curve_figure(metrics: dict[str, np.ndarray], title: str) -> Any:
    """Mean episodic return against env steps, the updates where episodes ended (a single
    one as a dot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    x, y = finite_points(metrics["env_steps"], metrics["episode_return"])
    ax.plot(x, y, lw=1.5, marker="o" if len(x) == 1 else None)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean episodic return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_learning_curve(metrics: dict[str, np.ndarray], path: str | Path, title: str) -> Path:
    """Save ``learning_curve_figure`` as a PNG."""
    import matplotlib.pyplot as plt

    fig = learning_curve_figure(metrics, title)
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` to ``path`` as strict JSON (NaN and infinities as null)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(to_json(data, indent=2) + "\n")


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one strict JSON line to ``path`` (NaN and infinities as null)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with Path(path).open("a") as f:
        f.write(to_json(record) + "\n")


class Fanout(Callbacks):
    """Forward every callback to several sinks."""

    def __init__(self, sinks: list[Callbacks]):
        self.sinks = sinks

    def on_run(self, cfg: Any, seed: int, run_dir: Path | None) -> None:
        for sink in self.sinks:
            sink.on_run(cfg, seed, run_dir)

    def on_start(self, first_update: int) -> None:
        for sink in self.sinks:
            sink.on_start(first_update)

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        for sink in self.sinks:
            sink.on_metrics(first_update, rows)

    def on_state(self, state, final: bool, update: int | None = None) -> None:
        for sink in self.sinks:
            sink.on_state(state, final, update)

    def on_end(self, result, run_dir: Path | None) -> None:
        for sink in self.sinks:
            sink.on_end(result, run_dir)

    def close(self) -> None:
        """Close every sink (in order), even when one fails; re-raise the first failure."""
        error = None
        for sink in self.sinks:
            try:
                if hasattr(sink, "close"):
                    sink.close()
            except Exception as e:  # noqa: BLE001 - close the others first
                error = error or e
        if error is not None:
            raise error


def _length(rows: dict[str, np.ndarray]) -> int:
    return len(next(iter(rows.values())))


def _cell(value: Any) -> str:
    value = value.item() if hasattr(value, "item") else value
    return repr(value) if isinstance(value, float) else str(value)


def read_metrics(path: str | Path, up_to: int | None = None) -> dict[str, np.ndarray]:
    """The rows of a ``metrics.jsonl`` (``update <= up_to``) as ``{name: array [n]}``; null
    (a NaN written out) reads back as NaN."""
    records = []
    path = Path(path)
    if path.exists():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                record = json.loads(line)
                update = record["update"]
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{path} line {number} is not a metrics row (truncated or "
                                 f"corrupt: {type(e).__name__}: {e}); remove that line to "
                                 "read the file") from None
            if up_to is None or update <= up_to:
                records.append(record)
    names = [k for k in (records[0] if records else {}) if k != "update"]
    return {k: np.array([np.nan if r.get(k) is None else r[k] for r in records], np.float32)
            for k in names}


def truncate_metrics(run_dir: str | Path, up_to: int) -> None:
    """Drop the rows past update ``up_to`` from ``metrics.jsonl`` and ``metrics.csv`` (each file
    replaced atomically), so a resumed run appends where its checkpoint left off."""
    run_dir = Path(run_dir)

    def keep_jsonl(line: str) -> bool:
        return json.loads(line)["update"] <= up_to

    def keep_csv(line: str) -> bool:
        return int(line.split(",", 1)[0]) <= up_to

    for name, keep, header in (("metrics.jsonl", keep_jsonl, 0), ("metrics.csv", keep_csv, 1)):
        path = run_dir / name
        if not path.exists():
            continue
        lines = path.read_text().splitlines(keepends=True)
        kept = lines[:header] + [line for line in lines[header:] if keep(line)]
        if len(kept) != len(lines):
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text("".join(kept))
            os.replace(tmp, path)
