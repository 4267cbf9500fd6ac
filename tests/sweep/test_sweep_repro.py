"""Reproducible searches: two sweeps of the same study file and seed give the same trials and the same winner.

Two real sweeps (separate processes, so separate hash seeds, working directories and MLflow stores) of a tiny
TPE + ASHA study: the same configurations, statuses, test errors and winner, by default. docs/sweep.md
("Reproducible searches") says what is guaranteed. Both train in process (``--executor inprocess``): that Ray, with
2 trials at a time, trains the same trials as the in-process executor is tested in tests/sweep/test_executors.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.sweep_helpers import IN_PROCESS, write_tiny_data, write_tiny_study


def _sweep(directory, study, *flags: str) -> dict:
    env = dict(
        os.environ,
        MLFLOW_DISABLE_TELEMETRY="true",
        RAY_USAGE_STATS_ENABLED="0",
        TQDM_DISABLE="1",
        MUTRANSFER_CACHE=str(directory / "cache"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study), "--json", *flags],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_two_sweeps_of_the_same_study_give_the_same_trials_and_winner(tmp_path):
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(tmp_path, data, name="repro", trials=6, epochs=4, grace=1, max_concurrent=2)
    reports = []
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        reports.append(_sweep(tmp_path / run, study, *IN_PROCESS))
    tables = [[(t["trial_id"], t["config"], t["status"], t["val_error"]) for t in r["trial_table"]] for r in reports]
    assert tables[0] == tables[1]
    assert len({json.dumps(c, sort_keys=True) for _k, c, _s, _e in tables[0]}) == 6
    assert reports[0]["best_proxy"]["trial_id"] == reports[1]["best_proxy"]["trial_id"]
    assert reports[0]["best_proxy"]["config"] == reports[1]["best_proxy"]["config"]
    assert reports[0]["target"]["test_error"] == reports[1]["target"]["test_error"]
