"""A finished study folder moved elsewhere still works (slow: one real tiny sweep in process, real MLflow sqlite).

Folder A holds the data file, mlflow.db, mlruns/ and mutransfer-runs/. The sweep runs in A
with ``--register``; A is then moved to B (A no longer exists) and every command runs from B
through the real CLI in subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.repo_paths import ROOT
from tests.sweep_helpers import IN_PROCESS, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow


def _run(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, MLFLOW_DISABLE_TELEMETRY="true", RAY_USAGE_STATS_ENABLED="0", TQDM_DISABLE="1", PYTHONPATH=str(ROOT)
    )
    return subprocess.run(
        [sys.executable, "-m", "mutransfer", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=540
    )


def test_a_moved_study_folder_lists_evaluates_and_resumes(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    data = write_tiny_data(a / "data.h5")
    study = write_tiny_study(a, data, trials=2, epochs=1, target_epochs=1)
    first = _run(a, "sweep", "--study", study.name, "--register", "tiny-fno", "--json", *IN_PROCESS)
    assert first.returncode == 0, first.stderr[-2000:]
    report = json.loads(first.stdout)
    assert report["model"]["registered"]["uri"] == "models:/tiny-fno/1"

    sdir = a / "mutransfer-runs" / "tiny"
    state = json.loads((sdir / "state.json").read_text())
    state.pop("report")  # the report records where the study ran (a resumed study reports where it is now)
    state.pop("source_text")  # the study file as the user wrote it, verbatim (here with an absolute data path)
    assert str(a) not in json.dumps(state) + (sdir / "study.yaml").read_text()
    assert state["tracking_db"] == "../../mlflow.db" and state["target_outcome"]["checkpoint_dir"] == "target/final"
    a.rename(b)

    listed = _run(b, "studies", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["study"] for row in json.loads(listed.stdout)] == ["tiny"]

    errors = []
    for source in ("tiny", "models:/tiny-fno/1", report["model"]["run_uri"]):
        done = _run(b, "evaluate", source, "--data", "data.h5", "--resolution", "64", "--json")
        assert done.returncode == 0, done.stderr
        errors.append(json.loads(done.stdout)["results"][0]["relative_l2"])
    assert max(errors) - min(errors) < 1e-6

    again = _run(b, "sweep", "--resume", "--name", "tiny", "--json", *IN_PROCESS)
    assert again.returncode == 0, again.stderr
    resumed = json.loads(again.stdout)
    assert resumed["already_complete"] and resumed["study_dir"] == str(b / "mutransfer-runs" / "tiny")
    assert resumed["mlflow"]["tracking_uri"] == f"sqlite:///{b / 'mlflow.db'}"

    page = _run(b, "report", "tiny", "--out", "page.html")
    assert page.returncode == 0, page.stderr
    assert "tiny" in (b / "page.html").read_text()
    rows = _run(b, "trials", "tiny", "--json")
    assert rows.returncode == 0, rows.stderr
    assert len(json.loads(rows.stdout)) == 2
