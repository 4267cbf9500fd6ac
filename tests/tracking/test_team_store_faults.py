"""Faults of a team's tracking store (slow): the MLflow server goes away while a study runs.

The module starts one PostgreSQL + `mlflow server` (tests/team_store.py); each test runs its own study with
`mutransfer sweep --tracking-uri http://127.0.0.1:PORT` as a user would, in its own session. The server is stopped (SIGTERM to
its process group: the port refuses connections) and started again on the same port and store:

- twice for :data:`OUTAGE_S` seconds, once in the middle of the proxies and once during the target: the
  study completes in one command;
- once with the driver SIGKILLed while the server is down; ``--resume`` after it is back completes it.

Afterwards every trial has exactly one run, FINISHED, with its whole metric history (one point per epoch), the
target one run with all its epochs, and PostgreSQL holds no metric twice (same run, key and step). The
figures (outage seconds, trials that finished while the server was down, metrics stored, wall time) are
printed; docs/robustness.md quotes them with ``python -m pytest -s`` on this file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.journal_helpers import held_by_key
from tests.sweep_helpers import driver_command, write_tiny_data, write_tiny_study
from tests.team_store import TeamStore, team_store_or_skip

pytestmark = pytest.mark.slow

OUTAGE_S = 20.0  # longer than MLflow's first three retries (0 + 4 + 8 s): writes wait on a refused port
TRIALS, EPOCHS = 6, 20  # long enough that the first outage falls inside the proxies
TARGET_EPOCHS = 120  # long enough that the second falls inside the target's training
RESUMED_EPOCHS, RESUMED_TARGET_EPOCHS = 8, 10  # the kill test: its trials need not outlast an outage


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One PostgreSQL + server for the module (each test its own study, so its own runs); the first test leaves the
    server running again."""
    reason = team_store_or_skip()
    if reason:
        pytest.skip(reason)
    team = TeamStore(tmp_path_factory.mktemp("store"))
    yield team
    team.close()


def _setup(tmp_path: Path, name: str, epochs: int, target_epochs: int) -> tuple[list[str], dict, Path]:
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(
        tmp_path, data, name=name, trials=TRIALS, epochs=epochs, grace=epochs, target_epochs=target_epochs
    )
    cmd, env = driver_command(study, tmp_path)
    return cmd, env, tmp_path / "mutransfer-runs" / name


def _wait(proc: subprocess.Popen, ready, what: str, err: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not ready():
        assert proc.poll() is None, f"the sweep ended before {what}: {err.read_text()[-3000:]}"
        time.sleep(0.1)
    assert ready(), f"never reached {what}"


def _done(folder: Path) -> int:
    return sum(trial.status is not None for trial in held_by_key(folder).values())


def _check_store(store: TeamStore, report: dict, epochs: int, target_epochs: int) -> dict:
    """Every trial one FINISHED run with one point per epoch; the target all its epochs; no metric twice."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store.uri)
    runs = client.search_runs([report["mlflow"]["experiment_id"]], max_results=1000)
    runs = [r for r in runs if r.data.tags.get("mutransfer.study") == report["study"]]  # the store is the module's
    trials = [r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    assert sorted(r.data.tags["mutransfer.trial_id"] for r in trials) == [f"t{i:04d}" for i in range(TRIALS)]
    assert [r for r in runs if r.data.tags.get("mutransfer.kind") == "study"]
    assert all(r.info.status == "FINISHED" for r in runs), [(r.info.run_name, r.info.status) for r in runs]
    for run in trials:
        history = client.get_metric_history(run.info.run_id, "val_error")
        assert len(history) == int(run.data.metrics["epochs"]) == epochs, (run.info.run_name, len(history))
        assert len({m.step for m in history}) == len(history)
    (target,) = [r for r in runs if r.data.tags.get("mutransfer.kind") == "target"]
    history = client.get_metric_history(target.info.run_id, "test_error")
    assert len({m.step for m in history}) == len(history) == target_epochs
    twice = store.postgres.query(
        "mlflow", "SELECT run_uuid, key, step FROM metrics GROUP BY run_uuid, key, step HAVING count(*) > 1"
    )
    assert not twice, twice
    return {
        "runs": len(runs),
        "metrics_stored": store.count(
            "SELECT count(*) FROM metrics JOIN tags USING (run_uuid) "
            f"WHERE tags.key = 'mutransfer.study' AND tags.value = '{report['study']}'"
        ),
        "server_errors": len(store.server.errors()),
    }


def test_two_outages_of_the_tracking_server_the_study_completes_and_logs_everything_once(store, tmp_path):
    cmd, env, folder = _setup(tmp_path, "outage", EPOCHS, TARGET_EPOCHS)
    err = tmp_path / "sweep.err"
    figures: dict = {"outage_s": OUTAGE_S}
    start = time.monotonic()
    with err.open("w") as stderr, (tmp_path / "sweep.out").open("w") as stdout:
        proc = subprocess.Popen(
            [*cmd, "--tracking-uri", store.uri],
            cwd=tmp_path,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            _wait(proc, lambda: any((folder / "trials").glob("*/executions.jsonl")), "the first trial", err)
            before = _done(folder)
            store.server.stop()
            time.sleep(OUTAGE_S)
            figures["proxies"] = {"trials_done_before": before, "trials_done_while_down": _done(folder) - before}
            store.server.start()

            progress = folder / "target" / "progress.jsonl"
            _wait(proc, progress.exists, "the target", err)
            epochs_before = len(progress.read_text().splitlines())
            store.server.stop()
            time.sleep(OUTAGE_S)
            figures["target"] = {
                "epochs_before": epochs_before,
                "epochs_while_down": len(progress.read_text().splitlines()) - epochs_before,
            }
            store.server.start()
            assert proc.wait(timeout=900) == 0, err.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    figures["wall_s"] = round(time.monotonic() - start, 1)
    report = json.loads((tmp_path / "sweep.out").read_text())
    assert report["target"]["status"] == "completed"
    # the trials and the target kept training while the server was down
    assert figures["proxies"]["trials_done_while_down"] >= 1, figures
    assert figures["target"]["epochs_while_down"] >= 1, figures
    figures.update(_check_store(store, report, EPOCHS, TARGET_EPOCHS))
    print("tracking outage figures:", json.dumps(figures))


def test_the_driver_killed_while_the_server_is_down_resumes_after_it_is_back(store, tmp_path):
    cmd, env, folder = _setup(tmp_path, "outage-kill", RESUMED_EPOCHS, RESUMED_TARGET_EPOCHS)
    cmd = [*cmd, "--tracking-uri", store.uri]
    err = tmp_path / "first.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
        try:
            _wait(proc, lambda: _done(folder) >= 1, "a finished trial", err)
            store.server.stop()
            time.sleep(5)  # the driver is waiting on the store now
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    done_at_kill = _done(folder)
    store.server.start()
    resumed = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert report["target"]["status"] == "completed"
    figures = {
        "trials_done_at_kill": done_at_kill,
        **_check_store(store, report, RESUMED_EPOCHS, RESUMED_TARGET_EPOCHS),
    }
    print("driver killed during an outage:", json.dumps(figures))
