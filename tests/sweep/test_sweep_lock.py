"""One driver per study, end to end: real `mutransfer sweep` processes, real Ray, real MLflow, real SIGKILL (slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.sweep_helpers import IN_PROCESS, mlflow_runs, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow


def _env(tmp_path):
    return dict(
        os.environ,
        MLFLOW_DISABLE_TELEMETRY="true",
        RAY_USAGE_STATS_ENABLED="0",
        TQDM_DISABLE="1",
        MUTRANSFER_CACHE=str(tmp_path / "cache"),
    )


def _wait_for(proc, what, predicate, errfile, timeout=400):
    deadline = time.time() + timeout
    while time.time() < deadline and not predicate():
        assert proc.poll() is None, f"the sweep ended before {what}: {errfile.read_text()[-2000:]}"
        time.sleep(0.1)
    assert predicate(), f"no {what} in time"


def _session_open(study_dir):
    try:
        return bool(json.loads((study_dir / "state.json").read_text()).get("parent_run_id"))
    except (OSError, ValueError):
        return False


def _lease_experiments(uri):
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    return [
        e
        for e in MlflowClient(uri).search_experiments(view_type=ViewType.ALL)
        if e.name.startswith("mutransfer-lease/")
    ]


class Driver:
    """A `mutransfer sweep --json` of a tiny study, started in its own session (so it and its Ray can be killed)."""

    def __init__(self, tmp_path, name: str, trials: int, epochs: int):
        study = write_tiny_study(
            tmp_path,
            write_tiny_data(tmp_path / "burgers_tiny.h5"),
            name=name,
            trials=trials,
            epochs=epochs,
            grace=epochs,
            max_concurrent=1,
        )
        self.env, self.uri, self.cwd = _env(tmp_path), f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path
        # in process: the lock is the driver's, whichever executor trains
        self.sweep = [
            sys.executable,
            "-m",
            "mutransfer.cli.main",
            "sweep",
            "--study",
            str(study),
            "--json",
            *IN_PROCESS,
        ]
        self.study_dir = tmp_path / "mutransfer-runs" / name
        self.holder_file = tmp_path / "mutransfer-runs" / ".locks" / f"{name}.holder.json"
        self.errfile = tmp_path / "first.err"
        with open(self.errfile, "w") as err:
            self.proc = subprocess.Popen(
                self.sweep,
                cwd=tmp_path,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # the driver and its Ray: no cleanup runs
        self.proc.wait(timeout=60)


def test_a_second_driver_on_a_running_study_is_refused_and_changes_nothing(tmp_path):
    driver = Driver(tmp_path, "dup", trials=4, epochs=10)
    first, env, uri, sweep = driver.proc, driver.env, driver.uri, driver.sweep
    study_dir, holder_file, errfile = driver.study_dir, driver.holder_file, driver.errfile
    try:
        _wait_for(
            first, "its lock and MLflow parent run", lambda: holder_file.exists() and _session_open(study_dir), errfile
        )
        # Freeze the first driver (its process, hence its lock, lives on) so that it is still running, and writes
        # nothing, while the second drivers try, however fast this machine is.
        os.kill(first.pid, signal.SIGSTOP)
        before = {
            "study": (study_dir / "study.yaml").read_bytes(),
            "study_mtime": (study_dir / "study.yaml").stat().st_mtime_ns,
            "holder": holder_file.read_text(),
            "parent": json.loads((study_dir / "state.json").read_text())["parent_run_id"],
            "leases": [(e.experiment_id, e.lifecycle_stage) for e in _lease_experiments(uri)],
        }
        seconds = {"--resume": sweep + ["--resume", "--name", "dup"], "new": sweep + ["--name", "dup"]}
        procs = {
            k: subprocess.Popen(c, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for k, c in seconds.items()
        }
        for kind, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 2, (kind, err[-2000:])
            assert len(err.strip().splitlines()) == 1 and out == "", (kind, err)
            assert "being run by another driver" in err and f"pid {first.pid}," in err and "since" in err, (kind, err)
        assert first.poll() is None
        after = {
            "study": (study_dir / "study.yaml").read_bytes(),
            "study_mtime": (study_dir / "study.yaml").stat().st_mtime_ns,
            "holder": holder_file.read_text(),
            "parent": json.loads((study_dir / "state.json").read_text())["parent_run_id"],
            "leases": [(e.experiment_id, e.lifecycle_stage) for e in _lease_experiments(uri)],
        }
        assert after == before
        assert [r.info.run_id for r in mlflow_runs(uri) if r.data.tags.get("mutransfer.kind") == "study"] == [
            before["parent"]
        ]
        os.kill(first.pid, signal.SIGCONT)
        out, _ = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            driver.kill()
    assert first.returncode == 0, errfile.read_text()[-3000:]
    report = json.loads(out)
    runs = mlflow_runs(uri)
    kinds = [r.data.tags.get("mutransfer.kind") for r in runs]
    assert kinds.count("study") == 1 and kinds.count("target") == 1
    trial_ids = [
        r.data.tags["mutransfer.trial_id"] for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"
    ]
    assert len(trial_ids) == len(set(trial_ids)) == report["trials"]["total"] == 4
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert not holder_file.exists() and all(e.lifecycle_stage == "deleted" for e in _lease_experiments(uri))


def test_a_sigkilled_driver_is_taken_over_on_resume(tmp_path):
    driver = Driver(tmp_path, "gone", trials=3, epochs=20)
    first, env, uri, sweep, holder_file = driver.proc, driver.env, driver.uri, driver.sweep, driver.holder_file
    try:
        _wait_for(
            first,
            "a finished trial",
            lambda: holder_file.exists() and list(driver.study_dir.glob("trials/*/done.json")),
            driver.errfile,
        )
    finally:
        driver.kill()
    assert json.loads(holder_file.read_text())["pid"] == first.pid  # the dead driver's record and lease stay
    assert [e.lifecycle_stage for e in _lease_experiments(uri)] == ["active"]

    resumed = subprocess.run(sweep + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    taken = [line for line in resumed.stderr.splitlines() if "taking over from a driver that is gone" in line]
    assert len(taken) == 1 and f"pid {first.pid}," in taken[0], resumed.stderr[-3000:]
    assert json.loads(resumed.stdout)["trials"]["total"] == 3
    runs = mlflow_runs(uri)
    assert [r.data.tags.get("mutransfer.kind") for r in runs].count("study") == 1
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert not holder_file.exists() and all(e.lifecycle_stage == "deleted" for e in _lease_experiments(uri))
