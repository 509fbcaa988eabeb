"""Weights & Biases tracking, offline (``WANDB_MODE=offline``: no network): the tracker run's
history equals ``metrics.jsonl`` row for row; a run stopped (Ctrl-C, or a crash past its
checkpoint) and resumed logs every update exactly once, in the same tracker run; without the
option wandb is never imported.

The offline run is read back from its ``.wandb`` file with a reader written here from the
format (a LevelDB-style log of ``Record`` protobufs), not with the sink's own code."""

from __future__ import annotations

import _thread
import json
import math
import struct
import sys
import zlib
from pathlib import Path

import pytest

import jaxrl_async as jra
from jaxrl_async.cli.command import main
from jaxrl_async.run import checkpoint
from jaxrl_async.runners.state import Callbacks
from tests.wandb_offline import records, tracker_runs

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


def wandb_file(payloads: list[bytes]) -> bytes:
    """A ``.wandb`` log holding ``payloads`` as whole records (the writer's format: a 7-byte
    header, then per record a chunk header of crc32(type + data), length and type 1)."""
    out = bytearray(b":W&B\xe1\xbe\x00")
    for data in payloads:
        out += struct.pack("<IHB", zlib.crc32(data, zlib.crc32(b"\x01")), len(data), 1) + data
    return bytes(out)


# --------------------------------------------------------------------------- tests
def test_the_reader_stops_at_a_record_still_being_written(tmp_path):
    """The service process writes the file while the test reads it: a record cut short, or
    its bytes not yet all there, is the unfinished tail, not a corrupt file (make test-latest
    once failed on it)."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = [pb.Record(history=pb.HistoryRecord(item=[pb.HistoryItem(
        key="_step", value_json=str(i))])) for i in range(1, 4)]
    whole = wandb_file([r.SerializeToString() for r in rows])
    path = tmp_path / "run.wandb"
    path.write_bytes(whole)
    assert records(path) == rows
    last = len(rows[-1].SerializeToString())
    for cut in range(1, last + 7):  # within the last record's header or its data
        path.write_bytes(whole[:len(whole) - cut])
        assert records(path) == rows[:2], cut
    half_written = bytearray(whole)
    half_written[-last // 2:] = bytes(last // 2)  # the length is there, the bytes not yet
    path.write_bytes(bytes(half_written))
    assert records(path) == rows[:2]


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

