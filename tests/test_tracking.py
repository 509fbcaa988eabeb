"""Weights & Biases tracking, offline (``WANDB_MODE=offline``: no network): the tracker run's
history equals ``metrics.jsonl`` row for row; a run stopped (Ctrl-C, or a crash past its
checkpoint) and resumed logs every update exactly once, in the same tracker run; without the
option wandb is never imported.

The offline run is read back from its ``.wandb`` file with a reader written here from the
format (a LevelDB-style log of ``Record`` protobufs), not with the sink's own code."""

from __future__ import annotations

import _thread
import csv
import json
import math
import struct
import sys
import time
from pathlib import Path

import pytest

import jaxrl_async as jra
from jaxrl_async import checkpoint
from jaxrl_async.cli import main
from jaxrl_async.runners.state import Callbacks

pytest.importorskip("wandb")

# One config for every test here, so the training program compiles once in this process.
TINY = dict(env="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=2 * 8 * 12,
            num_minibatches=1, update_epochs=1, hidden_sizes=(16,), log_every=2,
            checkpoint_every=4, fast_compile=True)


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))


# --------------------------------------------------------------------------- offline reader
def records(path: Path) -> list:
    """The ``Record`` protobufs of a ``.wandb`` file: a 7-byte header, then 32 KiB blocks of
    chunks (crc32 u32, length u16, type u8: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, pending, out = path.read_bytes(), 7, 32768, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the block's zero-filled tail
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def finished_records(path: Path, wait_s: float = 60.0) -> list:
    """``records(path)`` once the file ends with the run's exit record (wandb's service
    process may still be writing it when ``finish()`` has returned)."""
    deadline = time.time() + wait_s
    while True:
        found = records(path)
        if (found and found[-1].WhichOneof("record_type") == "exit") or time.time() > deadline:
            return found
        time.sleep(0.2)


def tracker_runs(run_dir: Path) -> list[dict]:
    """Each offline tracker session under ``run_dir/wandb`` (oldest first): its run id, config,
    history rows (without wandb's own ``_`` keys, with ``_step``) and summary keys."""
    sessions = []
    for path in run_dir.glob("wandb/offline-run-*/run-*.wandb"):
        found = {"id": None, "config": {}, "history": [], "summary": set(), "start": None}
        for r in finished_records(path):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                found["id"] = r.run.run_id
                found["config"] = {_key(i): json.loads(i.value_json) for i in r.run.config.update}
            elif kind == "history":
                row = {_key(i): json.loads(i.value_json) for i in r.history.item}
                found["start"] = found["start"] or row.get("_timestamp")
                found["history"].append({k: v for k, v in row.items()
                                         if not k.startswith("_") or k == "_step"})
            elif kind == "summary":
                found["summary"] |= {_key(i) for i in r.summary.update}
            elif kind == "exit":
                found["exit_code"] = r.exit.exit_code
        sessions.append(found)
    return sorted(sessions, key=lambda s: s["start"] or 0)


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def jsonl_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def same_row(logged: dict, written: dict) -> bool:
    """A history row equals a metrics.jsonl row: the same keys (plus ``_step`` = update), the
    same values (NaN logged where JSONL writes null)."""
    logged = dict(logged)
    if logged.pop("_step") != written["update"] or logged.keys() != written.keys():
        return False
    return all((v is None and isinstance(logged[k], float) and math.isnan(logged[k]))
               or logged[k] == v for k, v in written.items())


# --------------------------------------------------------------------------- tests
@pytest.mark.timeout(300)
def test_cli_track_logs_config_every_row_and_the_evaluation(tmp_path):
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"algo": "ppo", **TINY, "hidden_sizes": [16], "seed": 3}))
    run = tmp_path / "run"
    code = main(["train", "--config", str(settings), "--track", "--wandb-project", "tests",
                 "--run-dir", str(run), "--no-progress", "--eval-episodes", "2"])
    assert code == 0
    [session] = tracker_runs(run)
    written = jsonl_rows(run)
    assert len(written) == 12 == len(session["history"])
    assert all(same_row(a, b) for a, b in zip(session["history"], written))
    config = json.loads((run / "config.json").read_text())
    assert session["config"]["lr"] == config["lr"]
    assert session["config"]["seed"] == 3
    assert session["config"]["runner"]["_type"] == "SyncConfig"
    assert {"learning_curve", "final_return", "eval/mean_return", "eval/returns"} <= \
        session["summary"]
    assert json.loads((run / "wandb.json").read_text())["last_update"] == 12


class StopAt(Callbacks):
    """Ctrl-C (as the terminal sends it) or a crash (no final checkpoint) once update
    ``after`` is reported."""

    def __init__(self, after: int, how: str):
        self.after, self.how, self.done = after, how, False

    def on_metrics(self, first_update, rows):
        if not self.done and first_update + len(rows["env_steps"]) >= self.after:
            self.done = True
            if self.how == "crash":
                raise RuntimeError("simulated crash")
            _thread.interrupt_main()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["ctrl-c", "crash"])
def test_resume_continues_the_tracker_run_without_gaps_or_duplicates(tmp_path, how):
    cfg = jra.PPOConfig(**TINY)
    run = tmp_path / "run"
    with pytest.raises((jra.TrainingInterrupted, RuntimeError)):
        jra.train(cfg, seed=1, run_dir=run, progress=False,
                  callbacks=[jra.WandbSink(project="tests"), StopAt(5, how)])
    logged = [r["_step"] for r in tracker_runs(run)[0]["history"]]
    assert logged == list(range(1, len(logged) + 1)) and len(logged) < cfg.num_updates
    saved = checkpoint.steps(run)[-1]
    # Ctrl-C: the final checkpoint holds the last update logged; a crash: rows past the
    # checkpoint were logged (the run resumes from update 4 with rows 5-6 in the tracker)
    assert saved == len(logged) if how == "ctrl-c" else saved < len(logged)
    jra.train(resume=run, progress=False, callbacks=[jra.WandbSink(project="tests")])
    sessions = tracker_runs(run)
    assert len(sessions) == 2 and sessions[0]["id"] == sessions[1]["id"]  # the same run
    assert [s["exit_code"] for s in sessions] == [0 if how == "ctrl-c" else 1, 0]
    steps = [r["_step"] for s in sessions for r in s["history"]]
    assert steps == list(range(1, cfg.num_updates + 1))  # no gap, no duplicate, in order
    history = [r for s in sessions for r in s["history"]]
    written = jsonl_rows(run)
    assert len(written) == cfg.num_updates
    if how == "ctrl-c":  # rows 7-8 come from the resumed run: the same as metrics.jsonl
        assert all(same_row(a, b) for a, b in zip(history, written))
    else:  # the sync runner is deterministic: rows 5-6 recomputed equal those logged
        keep = {k for k in written[0] if k not in ("sps",)}
        assert all(same_row({k: a[k] for k in a if k in keep or k == "_step"},
                            {k: b[k] for k in b if k in keep})
                   for a, b in zip(history, written))


class Blocker:
    """A meta-path finder that records, and refuses, any import of wandb."""

    def __init__(self):
        self.tried = []

    def find_spec(self, name, path=None, target=None):
        if name == "wandb" or name.startswith("wandb."):
            self.tried.append(name)
            raise ImportError(f"{name} imported without --track")
        return None


@pytest.mark.timeout(300)
def test_without_track_wandb_is_never_imported(tmp_path, monkeypatch):
    settings = tmp_path / "run.yaml"
    settings.write_text("algo: ppo\n" + "".join(
        f"{k}: {list(v) if isinstance(v, tuple) else v}\n" for k, v in TINY.items()))
    blocker = Blocker()
    for name in [n for n in sys.modules if n == "wandb" or n.startswith("wandb.")]:
        monkeypatch.delitem(sys.modules, name)  # put back after the test
    monkeypatch.setattr(sys, "meta_path", [blocker, *sys.meta_path])
    code = main(["train", "--config", str(settings), "--run-dir", str(tmp_path / "run"),
                 "--no-progress", "--eval-episodes", "2"])
    assert code == 0 and blocker.tried == []
    assert "wandb" not in sys.modules
    with pytest.raises(ImportError):  # the blocker works
        __import__("wandb")


@pytest.mark.timeout(300)
def test_sweep_track_logs_one_run_with_the_results_table(tmp_path):
    (tmp_path / "sweep.yaml").write_text(
        "base: {algo: ppo, env: CartPole-v1, num_envs: 2, num_steps: 8, total_timesteps: 32, "
        "num_minibatches: 1, update_epochs: 1, hidden_sizes: [8], fast_compile: true}\n"
        "grid: {lr: [1.0e-3, 3.0e-4]}\nseeds: 1\n")
    out = tmp_path / "sweep"
    code = main(["sweep", "--config", str(tmp_path / "sweep.yaml"), "--track",
                 "--wandb-project", "tests", "--out", str(out), "--no-progress"])
    assert code == 0
    [session] = tracker_runs(out)
    [row] = session["history"]
    table_file = next(out.glob(f"wandb/offline-run-*/files/{row['results/path']}"))
    table = json.loads(table_file.read_text())
    with (out / "results.csv").open() as f:
        written = list(csv.reader(f))
    assert table["columns"] == written[0]
    assert [[str(v) for v in r] for r in table["data"]] == written[1:]
    assert session["config"]["sweep"]["grid"] == {"lr": [1e-3, 3e-4]}
    assert {"best/lr", "best/final_return", "sweep_plot"} <= session["summary"]
