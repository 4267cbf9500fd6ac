"""Kill the `mutransfer sweep` driver (SIGKILL) in every phase, then `--resume` (real Ray, real MLflow, real subprocesses).

After a resume: no trial that had finished runs again (executions.jsonl), one MLflow parent
run, one child run per trial, one target run, the report logged once. A resume reads JSON
and weights-only checkpoints only: pickles planted in the study folder are never executed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sweep_helpers import IN_PROCESS, mlflow_runs, write_tiny_data, write_tiny_study


class Planted:
    """Unpickling this creates the marker file (pickle calls open(marker, "w"))."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _env(tmp_path, **extra) -> dict:
    return dict(
        os.environ,
        MLFLOW_DISABLE_TELEMETRY="true",
        RAY_USAGE_STATS_ENABLED="0",
        MUTRANSFER_CACHE=str(tmp_path / "cache"),
        TQDM_DISABLE="1",
        PYTHONFAULTHANDLER="1",  # a driver that crashes (a signal) prints where, in the assertion's message
        **extra,
    )


def _sweep(study: Path) -> list[str]:
    return [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study), "--json"]


def _kill_when(cmd, tmp_path, env, ready, what: str) -> None:
    """Start the driver in its own session, wait until ``ready()``, then SIGKILL it and everything it started."""
    with open(tmp_path / "first.err", "w") as err:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
        try:
            deadline = time.time() + 600
            while time.time() < deadline and not ready():
                assert proc.poll() is None, (
                    f"the sweep ended before {what}: {(tmp_path / 'first.err').read_text()[-2000:]}"
                )
                time.sleep(0.1)
            assert ready(), f"never reached {what}"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def _executions(trials_dir: Path) -> dict[str, list]:
    from mutransfer._sweep.trial import read_executions

    return {p.name: read_executions(p) for p in sorted(trials_dir.iterdir()) if p.is_dir()}


def _held(trials_dir: Path) -> dict:
    """What the search's journal holds of each trial by key ({} before it holds every trial)."""
    from mutransfer._sweep._trial_journal import read_journal

    held = read_journal(trials_dir.parent / "optuna.journal", trials_dir.parent.name) or {}
    return {f"t{index:04d}": trial for index, trial in held.items()}


def _finished(trials_dir: Path) -> set[str]:
    return {key for key, trial in _held(trials_dir).items() if trial.status is not None}


def _resume_and_check(
    cmd,
    tmp_path,
    env,
    name: str,
    trials: int,
    before: dict[str, list],
    finished: set[str],
    restarted: frozenset = frozenset(),
) -> dict:
    """--resume, then the counts. ``restarted``: trials whose checkpoint was replaced by a planted file (they start over)."""
    resumed = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["study"] == name and report["trials"]["total"] == trials
    trials_dir = tmp_path / "mutransfer-runs" / name / "trials"
    after = _executions(trials_dir)
    for key in finished:  # a finished trial ran no more, not even a replay
        assert after[key] == before[key], (key, before[key], after[key])
    for t in report["trial_table"]:  # every other trial trained once, or continued from its own checkpoint
        starts = [e for e in after[t["trial_id"]] if e["kind"] == "train"]
        assert starts and t["status"] in ("completed", "pruned"), t
        if t["trial_id"] in restarted:  # the planted checkpoint was refused: it trained from scratch
            assert starts[-1]["resumed_from_epoch"] is None, (t["trial_id"], starts)
        else:
            assert all(e["resumed_from_epoch"] is not None for e in starts[1:]), (t["trial_id"], starts)

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = mlflow_runs(uri)
    state = json.loads((tmp_path / "mutransfer-runs" / name / "state.json").read_text())
    parents = [r for r in runs if r.data.tags.get("mutransfer.kind") == "study"]
    assert len(parents) == 1 and parents[0].info.run_id == state["parent_run_id"] == report["mlflow"]["parent_run_id"]
    children = [r.data.tags["mutransfer.trial_id"] for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    assert sorted(children) == [f"t{i:04d}" for i in range(trials)]  # one child run per trial, no superseded extras
    assert len([r for r in runs if r.data.tags.get("mutransfer.kind") == "target"]) == 1
    assert not [r for r in runs if r.info.status != "FINISHED"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    for metric in ("trials_total", "target_test_error", "sweep_wall_seconds"):  # the report was logged once
        assert len(client.get_metric_history(parents[0].info.run_id, metric)) == 1, metric
    assert state["phase"] == "done" and state["report"]["best_proxy"] == report["best_proxy"]
    assert (
        json.loads((tmp_path / "mutransfer-runs" / name / "report.json").read_text())["best_proxy"]
        == report["best_proxy"]
    )
    return report


@pytest.mark.slow  # starts Ray
def test_kill_during_the_proxies_then_resume_runs_nothing_twice_and_unpickles_nothing(tmp_path):
    """SIGKILL once a trial has finished; pickles planted in tune/ and an unfinished trial's checkpoint are never run."""
    import torch

    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(tmp_path, data, name="killme", trials=3, epochs=10, grace=10, max_concurrent=2)
    env, cmd = _env(tmp_path), _sweep(study)
    root = tmp_path / "mutransfer-runs" / "killme"
    trials_dir = root / "trials"
    _kill_when(cmd, tmp_path, env, lambda: bool(_finished(trials_dir)), "a trial finished")
    finished = _finished(trials_dir)
    unfinished = sorted(key for key in _held(trials_dir) if key not in finished)
    state = json.loads((root / "state.json").read_text())
    assert state["phase"] == "proxies" and state["parent_run_id"] and finished

    # Without --resume the study directory is protected.
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "--resume" in again.stderr and len(again.stderr.strip().splitlines()) == 1

    marker = tmp_path / "PWNED"
    evil = Planted(marker)
    import pickle

    for path in (
        root / "tune" / "tuner.pkl",
        root / "tune" / "run-1" / "tuner.pkl",
        root / "tune" / "run-1" / "trainable.pkl",
        root / "tune" / "run-1" / "search_gen_state-x.pkl",
        root / "tune" / "experiment_state-x.pkl",
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(evil))
    planted_pt = [trials_dir / key / "checkpoint.pt" for key in unfinished] or [trials_dir / "t0002" / "checkpoint.pt"]
    for path in planted_pt:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model": evil}, path)
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do; the planted checkpoint is a real threat: a full unpickle would run it
        torch.load(planted_pt[0], weights_only=True)
    assert not marker.exists()

    before = _executions(trials_dir)
    _resume_and_check(cmd, tmp_path, env, "killme", 3, before, finished, frozenset(p.parent.name for p in planted_pt))
    assert not marker.exists(), "a planted pickle was executed"


def _target_has_checkpoint(target_dir) -> bool:
    """True once the target has published a checkpoint (a whole ``epoch_NNNNN/`` folder renamed into place)."""
    return any(target_dir.glob("epoch_*/checkpoint.pt"))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["transfer_phase", "target", "write_report", "report_logged"])
def test_kill_in_a_later_phase_then_resume(tmp_path, point):
    """SIGKILL before the transfer, during the target's training, before the report, after it was logged: --resume finishes once."""
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    name = f"kill-{point.replace('_', '-')}"
    study = write_tiny_study(
        tmp_path, data, name=name, trials=2, epochs=2, target_epochs=60 if point == "target" else 2
    )
    root = tmp_path / "mutransfer-runs" / name
    # on Ray where Ray has a part: the target's training, and the kill at transfer_phase, while the target's workers
    # started early wait (docs/sweep.md); the later phases are the driver's alone and run in process
    cmd = _sweep(study) if point in ("target", "transfer_phase") else [*_sweep(study), *IN_PROCESS]
    if point == "target":
        env = _env(tmp_path)
        _kill_when(cmd, tmp_path, env, lambda: _target_has_checkpoint(root / "target"), "a target checkpoint")
    else:
        env = _env(tmp_path, MUTRANSFER_HOLD_AT=point)
        _kill_when(cmd, tmp_path, env, lambda: (root / f"held-at-{point}").exists(), f"the hold at {point}")
        env.pop("MUTRANSFER_HOLD_AT")
    trials_dir = root / "trials"
    finished = _finished(trials_dir)
    assert finished == {"t0000", "t0001"}
    report = _resume_and_check(cmd, tmp_path, env, name, 2, _executions(trials_dir), finished)
    if point == "target":
        assert report["target"]["epochs"] == 60 and (report["target"]["resumed_from_epoch"] or 0) > 0


@pytest.mark.slow
def test_every_trial_failing_says_what_failed_and_what_to_try(tmp_path):
    """MUTRANSFER_FAIL_TRIALS: each trial fails, is retried, fails again; the sweep stops with the first error and advice."""
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(tmp_path, data, name="allfail", trials=2, max_concurrent=1, max_failures=1)
    done = subprocess.run(
        [*_sweep(study), *IN_PROCESS],  # the trial function's fault and the plan's retries, as on Ray
        cwd=tmp_path,
        env=_env(tmp_path, MUTRANSFER_FAIL_TRIALS="100"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("mutransfer sweep: failed: no proxy trial produced a result: all 2 failed")
    assert (
        "t0000" in last and "injected fault" in last and "unset MUTRANSFER_FAIL_TRIALS" in last and "--name NEW" in last
    )
    trials_dir = tmp_path / "mutransfer-runs" / "allfail" / "trials"
    for key in ("t0000", "t0001"):
        held = _held(trials_dir)[key]
        assert held.status == "failed" and "injected fault" in str(held.error)
    assert len(list((tmp_path / "mutransfer-runs" / "allfail" / "faults").iterdir())) == 4  # 2 trials x (1 + 1 retry)
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    children = [r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    assert len(children) == 2 and all("injected fault" in r.data.tags["mutransfer.error"] for r in children)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_during_the_target_then_resume(tmp_path):
    """SIGINT while Ray Train runs the target: exit 130 with a --resume hint (overrides included), runs KILLED; --resume continues."""
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(tmp_path, data, name="ctrlc", trials=2, epochs=2, target_epochs=2)
    env = _env(tmp_path)
    cmd = _sweep(study) + ["--target-epochs", "60"]
    target_dir = tmp_path / "mutransfer-runs" / "ctrlc" / "target"
    # A child inherits an ignored SIGINT (and Python then keeps ignoring it), as a user's terminal never
    # would pass on: start the driver with the default disposition, whatever earlier tests left behind.
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
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
    assert f"continue it with `mutransfer sweep --resume --study {study} --target-epochs 60`" in err
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    status = {
        r.data.tags.get("mutransfer.kind"): r.info.status
        for r in runs
        if r.data.tags.get("mutransfer.kind") != "proxy_trial"
    }
    assert status == {"study": "KILLED", "target": "KILLED"}

    resumed = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["target"]["status"] == "completed" and report["target"]["epochs"] == 60
    assert report["target"]["resumed_from_epoch"] is not None and report["target"]["resumed_from_epoch"] > 0
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert sorted(r.data.tags.get("mutransfer.kind") for r in runs) == ["proxy_trial", "proxy_trial", "study", "target"]
    assert all(r.info.status == "FINISHED" for r in runs)


@pytest.mark.slow  # starts Ray
def test_a_driver_killed_during_a_retry_resumes_the_trial_as_an_uninterrupted_run_ends_it(tmp_path):
    """Issue 36, finding 1: a trial's first attempt fails (MUTRANSFER_FAIL_TRIALS=1) and Tune retries it; the driver is
    SIGKILLed during the retry. The failure was not an outcome (kept in the journal as ``mutransfer.retrying``, no
    outcome), so --resume
    trains the trial again, and every trial's configuration, status and epochs equal those of an uninterrupted run of
    the same study. (Before, the first failure was written as the trial's outcome and --resume kept it failed.)"""
    from mutransfer._sweep.trial import read_executions

    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    runs = {}
    for name in ("whole", "killed"):
        folder = tmp_path / name
        folder.mkdir()
        study = write_tiny_study(folder, data, name="retry", trials=3, epochs=6, grace=2, max_concurrent=2)
        runs[name] = (folder, study, _env(folder, MUTRANSFER_FAIL_TRIALS="1"))

    folder, study, env = runs["whole"]  # the reference in process: the same plan, trials and retries as on Ray
    whole = subprocess.run(
        [*_sweep(study), *IN_PROCESS], cwd=folder, env=env, capture_output=True, text=True, timeout=900
    )
    assert whole.returncode == 0, whole.stderr[-3000:]
    expected = [(t["trial_id"], t["config"], t["status"], t["epochs"]) for t in json.loads(whole.stdout)["trial_table"]]
    assert all(status in ("completed", "pruned") for _, _, status, _ in expected)

    folder, study, env = runs["killed"]
    root = folder / "mutransfer-runs" / "retry"
    fault = root / "faults" / "attempt-0"

    def retry_started() -> bool:  # the faulted trial started again (the injected fault comes before its first line)
        if not fault.exists() or not fault.read_text():
            return False
        return any(e["kind"] == "train" for e in read_executions(root / "trials" / fault.read_text()))

    _kill_when(_sweep(study), folder, env, retry_started, "the retry of the failed trial")
    retried = fault.read_text()
    from mutransfer._sweep._trial_journal import read_journal

    held = read_journal(root / "optuna.journal", "retry")[int(retried[1:])]
    assert held.retrying is not None and held.retrying["failures"] == 1  # its failure, kept as it is retried
    assert held.status is None, "a retried trial's failure was its outcome"
    resumed = subprocess.run(
        [*_sweep(study), "--resume"], cwd=folder, env=env, capture_output=True, text=True, timeout=900
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = [(t["trial_id"], t["config"], t["status"], t["epochs"]) for t in json.loads(resumed.stdout)["trial_table"]]
    assert got == expected
