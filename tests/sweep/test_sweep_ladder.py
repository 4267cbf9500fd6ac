"""A model-size ladder end to end from the CLI (real Ray, real sqlite MLflow, real subprocesses), and a resume mid-ladder."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.journal_helpers import held_by_key
from tests.sweep.test_sweep_resume import _env, _executions, _kill_when, _sweep
from tests.sweep_helpers import IN_PROCESS, mlflow_runs, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow


def _rung_runs(runs, kind="ladder_rung"):
    return [r for r in runs if r.data.tags.get("mutransfer.kind") == kind]


def test_ladder_runs_end_to_end_and_resumes_mid_ladder(tmp_path):
    """--ladder 6 12 16 on a tiny study: killed before rung 2, resumed: rungs 0 and 1 not re-run; the report shows the
    rungs, MLflow one run per rung and one child run per trial per rung, and the target trains the last rung's best."""
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(tmp_path, data, name="lad", trials=3, epochs=2, target_epochs=2)
    cmd = _sweep(study) + ["--ladder", "6", "12", "16", *IN_PROCESS]
    root = tmp_path / "mutransfer-runs" / "lad"
    env = _env(tmp_path, MUTRANSFER_HOLD_AT="rung_2")
    _kill_when(cmd, tmp_path, env, lambda: (root / "held-at-rung_2").exists(), "the hold before rung 2")
    env.pop("MUTRANSFER_HOLD_AT")
    before = {0: _executions(root / "trials"), 1: _executions(root / "rungs" / "r1" / "trials")}
    assert len(before[0]) == 3 and len(before[1]) == 2 and not (root / "rungs" / "r2").exists()

    resumed = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _executions(root / "trials") == before[0]  # finished rungs: no trial ran again, not even a replay
    assert _executions(root / "rungs" / "r1" / "trials") == before[1]
    report = json.loads(resumed.stdout)
    rungs = report["rungs"]
    assert [(r["rung"], r["K"], r["trials"], r["kept"]) for r in rungs] == [(0, 6, 3, 2), (1, 12, 2, 1), (2, 16, 1, 1)]
    for lower, upper in zip(rungs, rungs[1:]):  # each rung trains exactly what the one below promoted, same config
        assert sorted(row["from"] for row in upper["table"]) == sorted(lower["promoted"])
        configs = {row["trial_id"]: row["config"] for row in lower["table"]}
        for row in upper["table"]:
            assert row["config"] == configs[row["from"]]
    last_best = next(row for row in rungs[2]["table"] if row["trial_id"] == rungs[2]["best_trial_id"])
    assert report["transfer"]["proxy_modes"] == 16 and report["transfer"]["target_modes"] == 24
    assert report["target_hyperparameters"]["lr"] == pytest.approx(last_best["config"]["lr"])
    assert report["compute"]["ladder_device_seconds"] > 0
    # the executor booked the rungs' trials under the ladder's tag, in both sessions: what its table counts
    from mutransfer._sweep._ledger import Ledger

    booked = [b for b in Ledger(root).bookings() if b.tag == "ladder"]
    assert sorted(b.key for b in booked) == ["rungs/r1/t0000", "rungs/r1/t0001", "rungs/r2/t0000"]
    assert sum(b.flops for b in booked) == pytest.approx(report["compute"]["ladder_flops"])
    assert "model-size ladder" in (root / "report.txt").read_text()

    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parents = [r for r in runs if r.data.tags.get("mutransfer.kind") == "study"]
    assert len(parents) == 1
    parent = parents[0]
    rung_runs = _rung_runs(runs)
    assert sorted(r.data.tags["mutransfer.rung"] for r in rung_runs) == ["1", "2"]
    assert all(
        r.data.tags["mlflow.parentRunId"] == parent.info.run_id and r.info.status == "FINISHED" for r in rung_runs
    )
    by_rung = {}
    for r in _rung_runs(runs, "proxy_trial"):
        by_rung.setdefault(r.data.tags["mutransfer.rung"], []).append(r)
    assert {k: len(v) for k, v in by_rung.items()} == {"0": 3, "1": 2, "2": 1}  # one child run per trial per rung
    rung_parent = {r.data.tags["mutransfer.rung"]: r.info.run_id for r in rung_runs}
    for rung, children in by_rung.items():
        expected = parent.info.run_id if rung == "0" else rung_parent[rung]
        assert all(c.data.tags["mlflow.parentRunId"] == expected for c in children)
    assert len(_rung_runs(runs, "target")) == 1
    assert parent.data.metrics["rung2_trials"] == 1 and "rung1_best_error" in parent.data.metrics


def test_a_driver_killed_inside_a_rung_resumes_that_rung_from_its_checkpoints(tmp_path):
    """SIGKILL while a rung-1 trial trains (its checkpoint exists, it has no outcome): --resume re-runs no proxy
    trial, continues the rung-1 trial from its own checkpoint, and the study ends with one run per rung."""
    from mutransfer._training.checkpoint import CHECKPOINT_NAME

    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(
        tmp_path, data, name="ladin", trials=2, epochs=30, grace=30, target_epochs=2, max_concurrent=1
    )
    cmd = _sweep(study) + ["--ladder", "6", "12", *IN_PROCESS]
    root = tmp_path / "mutransfer-runs" / "ladin"
    rung = root / "rungs" / "r1" / "trials" / "t0000"
    env = _env(tmp_path)
    _kill_when(
        cmd,
        tmp_path,
        env,
        lambda: (
            (rung / CHECKPOINT_NAME).exists()
            and held_by_key(root / "rungs" / "r1").get("t0000", None) is not None
            and held_by_key(root / "rungs" / "r1")["t0000"].status is None
        ),
        "a rung-1 checkpoint",
    )
    proxies = _executions(root / "trials")
    resumed = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _executions(root / "trials") == proxies  # the proxies finished before the kill: none ran again
    starts = [e for e in _executions(root / "rungs" / "r1" / "trials")["t0000"] if e["kind"] == "train"]
    assert len(starts) == 2 and (starts[1]["resumed_from_epoch"] or 0) > 0  # continued, not started over
    report = json.loads(resumed.stdout)
    assert [(r["rung"], r["trials"]) for r in report["rungs"]] == [(0, 2), (1, 1)]
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert (
        len(_rung_runs(runs)) == 1
        and len([r for r in _rung_runs(runs, "proxy_trial") if r.data.tags.get("mutransfer.rung") == "1"]) == 1
    )
