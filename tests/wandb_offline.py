"""Reading an offline Weights & Biases run back, for the tests: its ``.wandb`` file is a
LevelDB-style log of ``Record`` protobufs, read here from the format (not with the sink's own
code)."""

from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path


def records(path: Path) -> list:
    """The ``Record`` protobufs of a ``.wandb`` file: a 7-byte header, then 32 KiB blocks of
    chunks (crc32 u32 of type + data, length u16, type u8: 1 full, 2 first, 3 middle, 4 last).
    Reading stops at a chunk not yet written whole (wandb's service process writes the file
    while the run goes on): cut short, or its checksum not yet matching."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, pending, out = path.read_bytes(), 7, 32768, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the block's zero-filled tail
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            break
        pending += chunk
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
