"""Metric sinks (the host edge): progress bar, JSONL, learning-curve PNG, run summary.

Every sink takes chunks of metrics as ``{name: np.ndarray [n]}`` (one row per update), so the
device loop hands metrics over every ``log_every`` updates, never per update.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from jaxrl_async.runners.common import Callbacks


def _clean(value: Any) -> Any:
    """A JSON-safe scalar: NaN and infinities become null."""
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
            record.update({k: _clean(v[i]) for k, v in rows.items()})
            self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class ProgressBar(Callbacks):
    """A tqdm bar over env steps showing SPS (since compilation ended) and the latest return."""

    def __init__(self, total_steps: int, steps_per_update: int, desc: str = "train"):
        self.total, self.steps_per_update, self.desc = total_steps, steps_per_update, desc
        self.bar = None

    def on_start(self, first_update: int) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=self.total, initial=first_update * self.steps_per_update,
                        desc=self.desc, unit="step", unit_scale=True, dynamic_ncols=True,
                        mininterval=0.5)

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        steps = int(rows["env_steps"][-1])
        self.bar.update(max(steps - self.bar.n, 0))
        ret = float(rows["episode_return"][-1])
        self.bar.set_postfix_str(f"return={ret:.1f}" if math.isfinite(ret) else "return=n/a")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def final_return(metrics: dict[str, np.ndarray], last: int = 10) -> float:
    """Mean episodic return over the last ``last`` updates (NaN-aware)."""
    returns = np.asarray(metrics["episode_return"], dtype=np.float64)[-last:]
    finite = returns[np.isfinite(returns)]
    return float(finite.mean()) if finite.size else float("nan")


def plot_learning_curve(metrics: dict[str, np.ndarray], path: str | Path, title: str) -> Path:
    """Save mean episodic return against env steps as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(np.asarray(metrics["env_steps"]), np.asarray(metrics["episode_return"]), lw=1.5)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean episodic return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_json(path: str | Path, data: Any) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2, default=_clean) + "\n")


class Fanout(Callbacks):
    """Forward every callback to several sinks."""

    def __init__(self, sinks: list[Callbacks]):
        self.sinks = sinks

    def on_start(self, first_update: int) -> None:
        for sink in self.sinks:
            sink.on_start(first_update)

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        for sink in self.sinks:
            sink.on_metrics(first_update, rows)

    def on_state(self, state, final: bool) -> None:
        for sink in self.sinks:
            sink.on_state(state, final)
