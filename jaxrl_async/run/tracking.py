"""Experiment trackers at the host edge: a Weights & Biases sink for ``jra.train`` and the
sweep table ``jaxrl-async sweep --track`` logs.

``wandb`` is an optional extra (``pip install "jaxrl_async[wandb]"``), imported only when a
tracker run starts. Like every sink, ``WandbSink`` gets metrics a chunk of ``log_every`` updates
at a time, on the host, after the device loop handed them over; it puts them in a queue and
returns, and a writer thread of its own calls ``wandb.log`` (a few ms a row), which sends each
row to wandb's service process.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from jaxrl_async.config.shared import to_dict
from jaxrl_async.run.sinks import to_json
from jaxrl_async.runners.state import Callbacks, TrainResult

STATE_FILE = "wandb.json"  # in the run directory: the tracker run's id and last update logged


def wandb_dir(run_dir: str | Path | None) -> str | None:
    """Where a tracker run's files go (``wandb.init(dir=...)``): under the run directory, unless
    the user set ``WANDB_DIR`` (``None`` then: wandb reads it)."""
    if os.environ.get("WANDB_DIR") or run_dir is None:
        return None
    return str(run_dir)


def _wandb():
    try:
        import wandb
    except ImportError:
        raise ImportError("tracking needs the wandb package: pip install "
                          "'jaxrl_async[wandb]' (or pip install wandb)") from None
    return wandb


class WandbSink(Callbacks):
    """Log a run to Weights & Biases: the config, one history row per update (step = the
    update number; the keys of ``metrics.jsonl``), the learning-curve image and the summary
    figures; ``log_evaluation`` adds an evaluation.

    With a run directory, the tracker run's id is kept there (``wandb.json``), so
    ``jra.train(resume=RUN_DIR, callbacks=[WandbSink(...)])`` continues the same tracker run:
    rows start after the checkpoint, and rows a crashed run had already logged past it are not
    logged twice. Only process 0 of a multi-process run logs. ``WANDB_MODE=offline`` writes the
    tracker run under ``<run dir>/wandb`` (``$WANDB_DIR/wandb`` when ``WANDB_DIR`` is set)
    without a network (``wandb sync`` uploads it).

    ``keep_open=True`` leaves the tracker run open when training ends, to log more (an
    evaluation) before calling ``finish()``; by default it finishes with the training.
    Other keyword arguments go to ``wandb.init`` (``group``, ``tags``, ``mode``, ...).
    """

    def __init__(self, project: str | None = None, entity: str | None = None, *,
                 name: str | None = None, keep_open: bool = False, **init_kwargs: Any):
        self.project, self.entity, self.name = project, entity, name
        self.keep_open, self.init_kwargs = keep_open, init_kwargs
        self.run, self.state_path, self.last_update, self.ended = None, None, 0, False
        self.queue: queue.Queue = queue.Queue()
        self.worker: threading.Thread | None = None
        self.error: Exception | None = None

    # ----------------------------------------------------------------- the callbacks
    def on_run(self, cfg: Any, seed: int, run_dir: Path | None) -> None:
        import jax

        if jax.process_index() != 0:  # only the main process logs
            return
        from jaxrl_async.run import sinks

        self.final_window = sinks.final_window(cfg)
        wandb = _wandb()
        saved: dict[str, Any] = {}
        if run_dir is not None:
            self.state_path = Path(run_dir) / STATE_FILE
            if self.state_path.exists():  # a resumed run: the same tracker run
                saved = json.loads(self.state_path.read_text())
        self.last_update = int(saved.get("last_update", 0))
        kwargs = {"dir": wandb_dir(run_dir), **self.init_kwargs}
        self.run = wandb.init(
            project=saved.get("project", self.project), entity=saved.get("entity", self.entity),
            name=self.name or (Path(run_dir).name if run_dir is not None else None),
            id=saved.get("id"), resume="allow", job_type="train",
            config={"seed": seed, **to_dict(cfg)}, **kwargs)
        self._save_state()

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        """Hand the rows to the writer thread and return (the host loop never waits for
        wandb)."""
        if self.run is None:
            return
        if self.worker is None:
            self.worker = threading.Thread(target=self._write_loop, name="wandb-sink-writer",
                                           daemon=True)
            self.worker.start()
        self.queue.put((first_update, {k: np.array(v) for k, v in rows.items()}))

    def _write_loop(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.error is None:
                try:
                    self._write(*item)
                except Exception as e:  # noqa: BLE001 - raised in the caller's thread (flush)
                    self.error = e

    def _write(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        n = len(next(iter(rows.values())))
        for i in range(n):
            update = first_update + i + 1
            if update <= self.last_update:  # logged before a crash, past the checkpoint
                continue
            record = {"update": update}
            record.update({k: v[i].item() for k, v in rows.items()})
            self.run.log(record, step=update)
            self.last_update = update
        self._save_state()

    def flush(self) -> None:
        """Wait until every row handed over is logged (raises what the writer raised)."""
        if self.worker is not None:
            self.queue.put(None)
            self.worker.join()
            self.worker = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def on_end(self, result: TrainResult, run_dir: Path | None) -> None:
        self.ended = True
        if self.run is None or not result.metrics:
            return
        self.flush()
        import tempfile

        from jaxrl_async.run import sinks

        wandb = _wandb()
        figures = result.timing or {}
        self.run.summary.update({
            "final_return": sinks.final_return(result.metrics, self.final_window),
            "updates_done": int(result.state.update),
            **{k: figures[k] for k in ("sps", "sps_collected", "compile_s", "train_s")
               if figures.get(k) is not None}})
        curve = Path(run_dir) / "learning_curve.png" if run_dir is not None else None
        with tempfile.TemporaryDirectory() as tmp:
            if curve is None or not curve.exists():
                curve = sinks.plot_learning_curve(result.metrics, Path(tmp) / "curve.png",
                                                  "learning curve")
            self.run.summary["learning_curve"] = wandb.Image(str(curve))

    def close(self) -> None:
        if not self.keep_open:
            self.finish()

    # ----------------------------------------------------------------- after training
    def log_evaluation(self, evaluation: dict[str, Any]) -> None:
        """Put an evaluation (``jra.evaluate``'s dict) in the tracker run's summary, as
        ``eval/<name>`` (the per-episode lists as a histogram)."""
        if self.run is None:
            return
        wandb = _wandb()
        for name, value in evaluation.items():
            value = np.asarray(value)
            self.run.summary[f"eval/{name}"] = (value.item() if value.ndim == 0
                                                else wandb.Histogram(value))

    def finish(self, exit_code: int | None = None) -> None:
        """Finish the tracker run (idempotent); by default as failed (exit code 1) when the
        training raised before it ended."""
        if self.run is not None:
            try:
                self.flush()
            finally:
                self.run.finish(exit_code=exit_code if exit_code is not None
                                else 0 if self.ended else 1)
                self.run = None

    def _save_state(self) -> None:
        if self.state_path is None or self.run is None:
            return
        data = {"id": self.run.id, "project": self.run.project, "entity": self.entity,
                "last_update": self.last_update}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(to_json(data) + "\n")
        os.replace(tmp, self.state_path)


def log_sweep(out: str | Path, cfg: Any, spec: dict[str, Any], result: Any, *,
              project: str | None = None, entity: str | None = None,
              rank_by: str = "final_return") -> None:
    """One tracker run for a whole sweep (job type ``sweep``): the base config and the swept
    spaces as its config, ``results.csv`` as a table (one row per config and seed), the best
    config by ``rank_by`` in the summary (when one has a score), the sweep plot as an image."""
    import csv

    wandb = _wandb()
    out = Path(out)
    run = wandb.init(project=project, entity=entity, name=out.name, dir=wandb_dir(out),
                     job_type="sweep", config={**to_dict(cfg), "sweep": spec})
    try:
        with (out / "results.csv").open(newline="") as f:
            rows = list(csv.reader(f))
        run.log({"results": wandb.Table(columns=rows[0], data=rows[1:])})
        try:
            best = result.best(rank_by)
        except ValueError:  # no config has a score: no best
            best = None
        if best is not None:
            run.summary.update({"best/" + k: best[k] for k in (*result.fields, rank_by)})
        if (out / "sweep.png").exists():
            run.summary["sweep_plot"] = wandb.Image(str(out / "sweep.png"))
    finally:
        run.finish()


def log_population(out: str | Path, cfg: Any, spec: dict[str, Any], result: Any, *,
                   project: str | None = None, entity: str | None = None) -> None:
    """One tracker run for a whole population (job type ``pbt`` or ``halving``): the base
    config and the space and schedule as its config; the population's mean and best return
    per update as its history; ``members.csv`` and the copy events of the lineage as tables;
    the best member in the summary; the population plot as an image."""
    import csv

    wandb = _wandb()
    out = Path(out)
    run = wandb.init(project=project, entity=entity, name=out.name, dir=wandb_dir(out),
                     job_type=result.schedule.kind, config={**to_dict(cfg), "population": spec})
    try:
        returns = np.asarray(result.curves["episode_return"], np.float64)  # [N, S, T]
        steps = result.curves["env_steps"][0, 0]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, best = np.nanmean(returns, (0, 1)), np.nanmax(returns, (0, 1))
        for t in range(returns.shape[-1]):
            run.log({"env_steps": int(steps[t]), "population/mean_return": float(mean[t]),
                     "population/best_return": float(best[t])}, step=t + 1)
        with (out / "members.csv").open(newline="") as f:
            rows = list(csv.reader(f))
        lin, names = result.lineage, list(result.space.names)
        copies = [[int(lin["update"][e]), result.seeds[s], m, int(lin["source"][e, s, m]),
                   float(lin["score"][e, s, int(lin["source"][e, s, m])]),
                   *[float(lin[f][e + 1, s, m]) for f in names]]
                  for e in range(len(lin["update"])) for s in range(len(result.seeds))
                  for m in range(lin["source"].shape[-1]) if lin["source"][e, s, m] != m]
        run.log({"members": wandb.Table(columns=rows[0], data=rows[1:]),
                 "copies": wandb.Table(columns=["update", "seed", "member", "source",
                                                "source_score", *names], data=copies)})
        top = result.best()
        run.summary.update({"best/" + k: top[k] for k in (*names, "final_return", "member",
                                                          "seed")})
        if (out / "population.png").exists():
            run.summary["population_plot"] = wandb.Image(str(out / "population.png"))
    finally:
        run.finish()
