"""Kill the `mutransfer sweep` driver mid-sweep, then `--resume` (slow; real Ray, real MLflow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sweep_helpers import mlflow_runs, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow


def test_resume_after_killing_the_driver(tmp_path):
    from mutransfer.sweep.trial import read_executions

    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    # 5 sequential trials long enough (30 epochs) that the driver can be killed between them
    study = write_tiny_study(tmp_path, data, name="killme", trials=5, epochs=30, grace=30, max_concurrent=1)
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", MUTRANSFER_CACHE=str(tmp_path / "cache"), TQDM_DISABLE="1")
    cmd = [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study), "--json"]
    trials_dir = tmp_path / "mutransfer-runs" / "killme" / "trials"

    # The driver runs in its own session so that it and the Ray processes it started can be killed together.
    with open(tmp_path / "first.err", "w") as err:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            deadline = time.time() + 400
            while time.time() < deadline and not list(trials_dir.glob("*/done.json")):
                assert proc.poll() is None, f"the sweep ended before it could be killed: {(tmp_path / 'first.err').read_text()[-2000:]}"
                time.sleep(0.1)
            assert list(trials_dir.glob("*/done.json")), "no trial finished in time"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything in its session
            proc.wait(timeout=60)
    finished_before = {p.parent.name for p in trials_dir.glob("*/done.json")}
    assert finished_before
    state = json.loads((tmp_path / "mutransfer-runs" / "killme" / "state.json").read_text())
    assert state["phase"] == "proxies" and state["parent_run_id"]

    # Without --resume the study directory is protected.
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "--resume" in again.stderr and len(again.stderr.strip().splitlines()) == 1

    resumed = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["study"] == "killme" and report["trials"]["total"] == 5

    # No trial that had finished before the kill trained again (a replay re-reports its stored result).
    for tid in finished_before:
        kinds = [e["kind"] for e in read_executions(trials_dir / tid)]
        assert kinds.count("train") == 1, (tid, kinds)
    # Every trial of the final result trained to the end exactly once, or resumed from its own checkpoint.
    for t in report["trial_table"]:
        starts = [e for e in read_executions(trials_dir / t["trial_id"]) if e["kind"] == "train"]
        assert starts and all(e["resumed_from_epoch"] is not None for e in starts[1:])

    # One parent run (reused), one child run per trial id, nothing left RUNNING.
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parents = [r for r in runs if r.data.tags.get("mutransfer.kind") == "study"]
    assert len(parents) == 1 and parents[0].info.run_id == state["parent_run_id"] == report["mlflow"]["parent_run_id"]
    assert parents[0].info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial" and r.data.tags.get("mutransfer.superseded") != "true"]
    ids = [r.data.tags["mutransfer.trial_id"] for r in children]
    assert len(ids) == len(set(ids)) == 5 and set(ids) == {t["trial_id"] for t in report["trial_table"]}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for r in children:  # every epoch logged, even for trials that straddled the kill
        assert int(r.data.metrics["epochs"]) == 30
        steps = sorted(m.step for m in client.get_metric_history(r.info.run_id, "test_error"))
        assert steps == list(range(1, 31)), (r.data.tags["mutransfer.trial_id"], steps)
    assert len([r for r in runs if r.data.tags.get("mutransfer.kind") == "target"]) == 1
    assert not [r for r in runs if r.info.status == "RUNNING"]
    # The report was produced once (by the resumed driver) and stored.
    state = json.loads((tmp_path / "mutransfer-runs" / "killme" / "state.json").read_text())
    assert state["phase"] == "done" and state["report"]["best_proxy"] == report["best_proxy"]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _target_has_checkpoint(target_dir) -> bool:
    """True once Ray Train has registered a target checkpoint (its snapshot names one)."""
    snapshot = target_dir / "checkpoint_manager_snapshot.json"
    try:
        return json.loads(snapshot.read_text()).get("latest_checkpoint_result") is not None
    except (OSError, ValueError):
        return False


def test_ctrl_c_during_the_target_then_resume(tmp_path):
    """SIGINT while Ray Train runs the target: exit 130 with a --resume hint, runs KILLED; --resume continues from its checkpoint."""
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(tmp_path, data, name="ctrlc", trials=2, epochs=2, target_epochs=200)
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", MUTRANSFER_CACHE=str(tmp_path / "cache"), TQDM_DISABLE="1")
    cmd = [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study), "--json"]
    target_dir = tmp_path / "mutransfer-runs" / "ctrlc" / "target"
    # A child inherits an ignored SIGINT (and Python then keeps ignoring it), as a user's terminal never
    # would pass on: start the driver with the default disposition, whatever earlier tests left behind.
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    try:
        deadline = time.time() + 400
        while time.time() < deadline and not _target_has_checkpoint(target_dir):
            assert proc.poll() is None, "the sweep ended before the target could be interrupted"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert f"continue it with `mutransfer sweep --resume --study {study}`" in err
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    status = {r.data.tags.get("mutransfer.kind"): r.info.status for r in runs if r.data.tags.get("mutransfer.kind") != "proxy_trial"}
    assert status == {"study": "KILLED", "target": "KILLED"}

    resumed = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["target"]["status"] == "completed" and report["target"]["epochs"] == 200
    assert report["target"]["resumed_from_epoch"] is not None and report["target"]["resumed_from_epoch"] > 0
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert sorted(r.data.tags.get("mutransfer.kind") for r in runs) == ["proxy_trial", "proxy_trial", "study", "target"]
    assert all(r.info.status == "FINISHED" for r in runs)
