"""Load (slow): :data:`STUDIES` studies per store at once on the 2-node loopback Ray cluster, each logging to one of
two tracking stores (2 per store in the suite; ``MUTRANSFER_LOAD_STUDIES=4`` for the figures docs/robustness.md
quotes: eight drivers).

Each study has :data:`TRIALS` proxy trials, :data:`AT_ONCE` at a time, and a target; the drivers
(`mutransfer sweep --address HOST:PORT`) start together and share the cluster's two CPUs. One store is a real
`mlflow server` on PostgreSQL (tests/team_store.py), the other the embedded default, one SQLite file (WAL mode)
that its four drivers write. Afterwards: every study has one parent run, one run per trial (none twice), each with
one point per epoch, one target run with its checkpoint artifacts, all FINISHED; PostgreSQL holds no metric twice and the server's log no
error. The figures (studies, trials, metrics stored, wall time) are printed; docs/robustness.md quotes them
(``MUTRANSFER_LOAD_STUDIES=4 python -m pytest -s`` on this file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.sweep_helpers import write_tiny_data, write_tiny_study
from tests.team_store import TeamStore, team_store_or_skip

pytestmark = pytest.mark.slow

#: studies per store (two stores, started together): 2 in the suite, 4 for the documented load (eight drivers)
STUDIES = int(os.environ.get("MUTRANSFER_LOAD_STUDIES", "2"))
TRIALS, AT_ONCE, EPOCHS = 4, 2, 2


def _check_study(client, report: dict) -> int:
    """The runs of one study are complete; returns the number of metric points its trials and target hold."""
    runs = client.search_runs([report["mlflow"]["experiment_id"]], max_results=1000)
    mine = [r for r in runs if r.data.tags.get("mutransfer.study") == report["study"]]
    assert len([r for r in mine if r.data.tags.get("mutransfer.kind") == "study"]) == 1
    trials = [r for r in mine if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    assert sorted(r.data.tags["mutransfer.trial_id"] for r in trials) == [f"t{i:04d}" for i in range(TRIALS)]
    targets = [r for r in mine if r.data.tags.get("mutransfer.kind") == "target"]
    assert len(targets) == 1
    assert client.list_artifacts(targets[0].info.run_id, "checkpoint"), "the target's checkpoint artifacts"
    assert all(r.info.status == "FINISHED" for r in mine), [(r.info.run_name, r.info.status) for r in mine]
    points = 0
    for run in trials:
        history = client.get_metric_history(run.info.run_id, "val_error")
        assert len(history) == len({m.step for m in history}) == int(run.data.metrics["epochs"]), run.info.run_name
        points += len(history)
    return points


def test_studies_at_once_on_the_cluster_several_per_store_lose_and_repeat_nothing(cluster, tmp_path):
    """Both stores in one go (one cluster, every driver started together): STUDIES studies write the PostgreSQL-backed
    server, as many the one SQLite file; without PostgreSQL the SQLite half runs alone."""
    from mlflow.tracking import MlflowClient

    team = None if team_store_or_skip() else TeamStore(tmp_path / "store")
    try:
        stores = {"sqlite": f"sqlite:///{tmp_path / 'mlflow.db'}"}
        if team is not None:
            stores["postgresql"] = team.uri
        data = write_tiny_data(tmp_path / "burgers_tiny.h5")
        env = dict(cluster.env, MUTRANSFER_CACHE=str(tmp_path / "cache"))
        start = time.monotonic()
        procs = []
        for backend, uri in stores.items():
            for i in range(STUDIES):
                study = write_tiny_study(
                    tmp_path,
                    data,
                    name=f"load-{backend}-{i}",
                    trials=TRIALS,
                    epochs=EPOCHS,
                    grace=EPOCHS,
                    max_concurrent=AT_ONCE,
                )
                cmd = [
                    *(sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study)),
                    *("--address", f"127.0.0.1:{cluster.gcs_port}", "--tracking-uri", uri),
                    *("--runs-dir", str(tmp_path / "runs"), "--json"),
                ]
                err = open(tmp_path / f"{study.stem}.err", "w")  # closed when its driver ends
                procs.append(
                    (
                        backend,
                        study.stem,
                        err,
                        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True),
                    )
                )
        reports: dict[str, list[dict]] = {backend: [] for backend in stores}
        for backend, name, err, proc in procs:
            out, _ = proc.communicate(timeout=1500)
            err.close()
            assert proc.returncode == 0, f"{name}: {(tmp_path / f'{name}.err').read_text()[-3000:]}"
            reports[backend].append(json.loads(out))
        wall = time.monotonic() - start

        for backend, uri in stores.items():
            client = MlflowClient(uri)
            points = sum(_check_study(client, report) for report in reports[backend])
            figures = {
                "backend": backend,
                "studies": STUDIES,
                "trials": STUDIES * TRIALS,
                "trial_metric_points": points,
                "wall_s_all_stores": round(wall, 1),
            }
            if backend == "postgresql":
                assert team is not None
                twice = team.postgres.query(
                    "mlflow", "SELECT run_uuid, key, step FROM metrics GROUP BY run_uuid, key, step HAVING count(*) > 1"
                )
                assert not twice, twice
                figures["metrics_stored"] = team.count("SELECT count(*) FROM metrics")
                figures["runs_stored"] = team.count("SELECT count(*) FROM runs")
                assert team.server.errors() == [], team.server.errors()[:5]
            print("load figures:", json.dumps(figures))
    finally:
        if team is not None:
            team.close()
