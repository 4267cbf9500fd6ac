"""A study logged to a team's store: a real `mlflow server` on a real PostgreSQL (tests/team_store.py).

The sweep is given ``--tracking-uri http://127.0.0.1:PORT`` as a team would give it; what it logged is read
back three ways: through the server's REST API (runs, metric histories, artifacts), from PostgreSQL's own
tables (what the server stored), and from the server's artifact folder on disk. The server's log must hold
no error. Skipped, with the reason, where PostgreSQL or psycopg2 is not installed.
"""

from __future__ import annotations

import pytest

from mutransfer.errors import UserInputError
from tests.sweep_helpers import write_tiny_data, write_tiny_study

EPOCHS, TARGET_EPOCHS, TRIALS = 2, 2, 2


@pytest.fixture(scope="module")
def team_run(team_store, tmp_path_factory):
    """A tiny study logged to the team store, trained in process (what reaches the store is the driver's, on Ray too)."""
    from mutransfer._sweep import SweepOptions, run_sweep

    work = tmp_path_factory.mktemp("team-run")
    data = write_tiny_data(work / "burgers_tiny.h5")
    study = write_tiny_study(work, data, name="teamstudy", trials=TRIALS, epochs=EPOCHS, target_epochs=TARGET_EPOCHS)
    report = run_sweep(
        SweepOptions(
            study_path=str(study),
            runs_dir=str(work / "runs"),
            overrides={"tracking_uri": team_store.uri},
            quiet=True,
            executor="inprocess",
        )
    )
    return report


def _study_runs(uri: str, experiment_id: str) -> list:
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri).search_runs([experiment_id], max_results=1000)


@pytest.mark.slow  # a real PostgreSQL and MLflow server, started once for the session (about 40 s)
def test_a_study_logs_every_run_metric_and_artifact_to_the_team_store(team_store, team_run):
    from mlflow.tracking import MlflowClient

    report = team_run
    assert report["target"]["status"] == "completed"
    client = MlflowClient(team_store.uri)
    runs = _study_runs(team_store.uri, report["mlflow"]["experiment_id"])
    kinds = sorted(r.data.tags.get("mutransfer.kind") for r in runs)
    assert kinds == ["proxy_trial"] * TRIALS + ["study", "target"]
    assert all(r.info.status == "FINISHED" for r in runs)
    trial_ids = [r.data.tags["mutransfer.trial_id"] for r in runs if r.data.tags["mutransfer.kind"] == "proxy_trial"]
    assert len(set(trial_ids)) == TRIALS, "one run per trial, none twice"

    for run in runs:
        kind = run.data.tags["mutransfer.kind"]
        if kind == "study":
            continue
        key, epochs = ("val_error", EPOCHS) if kind == "proxy_trial" else ("test_error", TARGET_EPOCHS)
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        if kind == "proxy_trial" and run.data.tags["mutransfer.status"] == "pruned":
            epochs = len(steps)
        assert sorted(steps) == list(range(1, epochs + 1)) or sorted(steps) == list(range(epochs)), (kind, steps)

    # the server stored them in PostgreSQL: the same runs, their metrics, no row twice
    ids = {r.info.run_id for r in runs}
    in_db = {row[0] for row in team_store.postgres.query("mlflow", "SELECT run_uuid FROM runs")}
    assert ids <= in_db
    duplicates = team_store.postgres.query(
        "mlflow",
        "SELECT run_uuid, key, step, count(*) FROM metrics GROUP BY run_uuid, key, step HAVING count(*) > 1",
    )
    assert not [d for d in duplicates if d[0] in ids]  # this study's runs (the session's store is shared)

    # artifacts go through the server (mlflow-artifacts:/) to its folder: the target's checkpoint, the parent's files
    target = next(r for r in runs if r.data.tags["mutransfer.kind"] == "target")
    parent = next(r for r in runs if r.data.tags["mutransfer.kind"] == "study")
    assert target.info.artifact_uri.startswith("mlflow-artifacts:/")
    assert [a.path for a in client.list_artifacts(target.info.run_id, "checkpoint")]
    assert client.list_artifacts(parent.info.run_id)
    on_disk = [p for p in team_store.server.artifacts.rglob("*") if p.is_file()]
    assert any(target.info.run_id in str(p) for p in on_disk)
    assert any(parent.info.run_id in str(p) for p in on_disk)
    assert team_store.server.errors() == []


@pytest.mark.slow  # a real PostgreSQL and MLflow server, started once for the session (about 40 s)
def test_the_error_log_reader_finds_a_traceback(team_store, tmp_path):
    """The clean-log check above can fail: the reader picks out a traceback and a 500 in a server log."""
    from tests.team_store import MlflowServer

    server = MlflowServer(team_store.server.backend_uri, tmp_path)
    server.log_path.write_text(
        'INFO: 127.0.0.1:1 - "POST /api/2.0/mlflow/runs/log-batch HTTP/1.1" 200 OK\n'
        "Traceback (most recent call last):\n"
        'INFO: 127.0.0.1:1 - "POST /api/2.0/mlflow/runs/create HTTP/1.1" 500 Internal Server Error\n'
    )
    assert len(server.errors()) == 2


def test_a_postgres_uri_without_its_driver_is_one_line_before_anything_starts():
    """SQLAlchemy 2.1 maps postgresql:// to psycopg 3, which is not installed: one line naming the package."""
    from mutransfer._sweep.endpoints import check_tracking_uri

    try:
        import psycopg  # noqa: F401

        pytest.skip("psycopg 3 is installed here: postgresql:// has its driver")
    except ImportError:
        pass
    with pytest.raises(UserInputError, match=r"driver psycopg is not installed; pip install 'psycopg\[binary\]'"):
        check_tracking_uri("postgresql://mlflow@127.0.0.1:5432/mlflow")
    with pytest.raises(UserInputError, match="Can't load plugin"):
        check_tracking_uri("postgresql+nosuchdriver://mlflow@127.0.0.1:5432/mlflow")


@pytest.mark.slow  # a real PostgreSQL and MLflow server, started once for the session (about 40 s)
def test_the_team_stores_postgres_uri_passes_the_check(team_store):
    """postgresql+psycopg2:// with a running PostgreSQL passes the endpoint check (driver present, port open)."""
    from mutransfer._sweep.endpoints import check_tracking_uri

    check_tracking_uri(team_store.server.backend_uri)


def test_the_sweep_refuses_a_postgres_uri_without_its_driver_with_exit_2_and_creates_nothing(tmp_path, monkeypatch):
    from mutransfer.cli.main import main

    try:
        import psycopg  # noqa: F401

        pytest.skip("psycopg 3 is installed here: postgresql:// has its driver")
    except ImportError:
        pass
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--tracking-uri", "postgresql://mlflow@127.0.0.1:5432/mlflow"]) == 2
    assert list(tmp_path.iterdir()) == []  # no study folder, no store


@pytest.mark.slow  # a real PostgreSQL and MLflow server, started once for the session (about 40 s)
def test_the_duplicate_query_finds_a_metric_logged_twice(team_store):
    """The 'no metric twice' check of the team-store tests can fail: one key and step logged at two times is found."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(team_store.uri)
    experiment = client.create_experiment("duplicate-check")
    run = client.create_run(experiment).info.run_id
    client.log_metric(run, "final_val_error", 0.5, timestamp=1, step=4)
    client.log_metric(run, "final_val_error", 0.5, timestamp=2, step=4)
    twice = team_store.postgres.query(
        "mlflow", "SELECT run_uuid, key, step FROM metrics GROUP BY run_uuid, key, step HAVING count(*) > 1"
    )
    assert (run, "final_val_error", 4) in twice


def _tag_at_once(uri: str, setter, experiments: int = 12, drivers: int = 6) -> list[str]:
    """``drivers`` threads write the experiment-kind tag on each of ``experiments`` fresh experiments at one
    moment (a barrier), as studies that start together do; returns the errors they met."""
    import threading

    from mlflow.tracking import MlflowClient

    from mutransfer._tracking.views import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

    client = MlflowClient(uri)
    errors: list[str] = []
    for i in range(experiments):
        experiment = client.create_experiment(f"tag-race-{setter.__name__}-{i}")
        barrier = threading.Barrier(drivers)

        def one(barrier: threading.Barrier = barrier, experiment: str = experiment) -> None:
            barrier.wait()
            try:
                setter(MlflowClient(uri), experiment, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            except Exception as exc:  # noqa: BLE001 - collected and asserted on below
                errors.append(str(exc).splitlines()[0])

        threads = [threading.Thread(target=one) for _ in range(drivers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return errors


@pytest.mark.slow  # a real PostgreSQL and MLflow server, started once for the session (about 40 s)
def test_studies_starting_together_tag_their_experiment_without_a_duplicate_key(team_store):
    """CI found it (four studies at once on PostgreSQL): two drivers writing the same experiment tag at one
    moment both insert it, and MLflow refuses the second for a duplicate key. mutransfer's writer tries again."""
    from mutransfer._tracking.views import set_experiment_tag

    assert _tag_at_once(team_store.uri, set_experiment_tag) == []


@pytest.mark.slow  # a real PostgreSQL and MLflow server, started once for the session (about 40 s)
def test_mlflows_own_tag_write_can_meet_the_duplicate_key(team_store):
    """The check above can fail: MLflow's own call, raced the same way, meets the duplicate key."""

    def raw(client, experiment, key, value):
        client.set_experiment_tag(experiment, key, value)

    errors = _tag_at_once(team_store.uri, raw, experiments=30)
    if not errors:
        pytest.skip("no two writes met in 30 tries on this machine (the race is timing-dependent)")
    assert any("duplicate key" in e or "UNIQUE" in e for e in errors), errors


@pytest.mark.slow  # a real PostgreSQL and MLflow server, started once for the session (about 40 s)
def test_the_target_from_the_team_store_evaluates_and_leaves_no_download_behind(team_store, team_run, tmp_path, capsys):
    """`evaluate runs:/<target run>/model --tracking-uri http://…`: the model is downloaded from the server into a
    temporary folder, read whole, and that folder removed (the attack re-run found /tmp filling with leftovers)."""
    import tempfile
    from pathlib import Path

    from mutransfer.cli.main import main
    from mutransfer.serving._load import DOWNLOADED

    data = write_tiny_data(tmp_path / "eval.h5")
    before = set(Path(tempfile.gettempdir()).glob(f"{DOWNLOADED}*"))
    uri = team_run["model"]["run_uri"]
    assert main(["evaluate", uri, "--tracking-uri", team_store.uri, "--data", str(data), "--json"]) == 0
    assert "relative_l2" in capsys.readouterr().out
    assert set(Path(tempfile.gettempdir()).glob(f"{DOWNLOADED}*")) == before
