"""Two drivers that start together on a new embedded store (edge case 2 of "A team deployment"): before, one of
them failed with MLflow's "table ... already exists" or alembic's "expected to match one row" (3 of 3 tries, 4 of
4 here); MLflow's first-time table creation now runs under a file lock beside the store."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

#: waits for a shared start time, then opens the store and makes (or finds) the experiment
RACE = """
import sys, time
from mutransfer.tracking.runs import Tracker
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
print(Tracker(sys.argv[1]).ensure_experiment("mutransfer"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_creating_a_new_store_at_once_both_succeed(tmp_path, attempt):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    start = str(time.time() + 6)  # both have imported MLflow by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, uri, start], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-1500:]
    assert [out.strip() for out, _ in results] == ["1", "1"], "one experiment, found by both"
