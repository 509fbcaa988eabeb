"""A dead process in a 2-process ``jax.distributed`` run (127.0.0.1, gloo): the other one stops
with an error naming the lost process within the heartbeat timeout (plus polling slack) instead
of waiting forever in a collective; whether the lost process is a worker or the coordinator."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_distributed import free_port

ROOT = Path(__file__).resolve().parents[1]
HEARTBEAT_S = 3
SLACK_S = 10  # the service's polling, the abort, the parent's polling, on a loaded machine
# What the survivor says, naming the process that died.
LOST = {1: r"unhealthy \(stopped sending heartbeats\):\s*1\b",  # process 1 died
        0: r"the leader task was preempted/died"}  # process 0 (the coordinator) died


@pytest.mark.timeout(120)
def test_a_dead_process_stops_the_other_within_the_heartbeat_timeout():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    runs = {}
    for dies in (1, 0):  # both scenarios at once: 4 processes
        port = free_port()
        runs[dies] = [subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fault_worker.py"), "peer", str(i), str(port),
             str(HEARTBEAT_S), str(dies)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True) for i in range(2)]
    try:
        ended = {}
        deadline = time.time() + 100
        while len(ended) < 4 and time.time() < deadline:
            for dies, procs in runs.items():
                for i, p in enumerate(procs):
                    if (dies, i) not in ended and p.poll() is not None:
                        ended[dies, i] = time.time()
            time.sleep(0.05)
        outputs = {dies: [p.communicate(timeout=10)[0] if (dies, i) in ended else "hung"
                          for i, p in enumerate(procs)] for dies, procs in runs.items()}
    finally:
        for procs in runs.values():
            for p in procs:
                p.kill()
    for dies, (first, second) in outputs.items():
        dead, alive = (first, second)[dies], (first, second)[1 - dies]
        survivor = runs[dies][1 - dies]
        assert (dies, 1 - dies) in ended, f"process {1 - dies} hung after {dies} died: {alive}"
        killed = float(re.search(r"KILLED (\S+)", dead).group(1))
        assert f"process {1 - dies} in step" in alive
        assert survivor.returncode != 0, alive[-2000:]
        assert re.search(LOST[dies], alive), alive[-3000:]
        assert ended[dies, 1 - dies] - killed < HEARTBEAT_S + SLACK_S, alive[-2000:]
