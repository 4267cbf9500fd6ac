"""`mutransfer sweep --warm-start` end to end: a cold tiny study, then two warm-started ones (by name through the
tracking store, and by folder), on a real local Ray and a real sqlite MLflow store (slow)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from mutransfer._sweep._trial_journal import read_journal
from tests.sweep_helpers import IN_PROCESS, mlflow_runs, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow


def _sweep(*args) -> dict:
    from mutransfer.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["sweep", *map(str, args), "--json", *IN_PROCESS])
    assert rc == 0
    return json.loads(out.getvalue())


def test_warm_started_studies_carry_the_cold_studys_best_trials(tmp_path):
    data = write_tiny_data(tmp_path / "burgers.h5")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--tracking-uri", uri, "--proxy-K", "4"]
    cold_study = write_tiny_study(tmp_path, data, name="cold", trials=4)
    cold = _sweep("--study", cold_study, "--runs-dir", tmp_path / "runs", *common)
    assert cold["warm_start"] is None
    completed = sorted((t for t in cold["trial_table"] if t["status"] == "completed"), key=lambda t: t["val_error"])

    # by name: not under this --runs-dir, so it is read from the tracking store; this study's proxy K is 8
    warm_study = write_tiny_study(tmp_path, data, name="warm", trials=4)
    warm = _sweep(
        "--study",
        warm_study,
        "--runs-dir",
        tmp_path / "other",
        "--tracking-uri",
        uri,
        "--proxy-K",
        "8",
        "--warm-start",
        "cold",
        "--warm-start-top",
        "2",
    )
    section = warm["warm_start"]
    assert section["source"] == "cold" and section["location"] == uri and section["trials"] == 2
    assert section["source_size"]["K"] == 4 and section["size"]["K"] == 8
    rows = section["from_source"]
    assert [(r["trial_id"], r["source_trial"]) for r in rows] == [
        ("t0000", completed[0]["trial_id"]),
        ("t0001", completed[1]["trial_id"]),
    ]
    here = {t["trial_id"]: t for t in warm["trial_table"]}
    for row, source in zip(rows, completed):
        assert row["source_error"] == pytest.approx(source["val_error"])
        assert here[row["trial_id"]]["config"] == pytest.approx(source["config"])  # master values carry over
        assert row["val_error"] == here[row["trial_id"]]["val_error"]
        held = read_journal(tmp_path / "other" / "warm" / "optuna.journal", "warm")  # the journal keeps it
        provenance = held[int(row["trial_id"][1:])].seed
        assert provenance["source_trial"] == source["trial_id"] and provenance["rescale"]["lr_factor"] < 1
    state = json.loads((tmp_path / "other" / "warm" / "state.json").read_text())
    assert [t["source_trial"] for t in state["warm_start"]["trials"]] == [r["source_trial"] for r in rows]
    text = (tmp_path / "other" / "warm" / "report.txt").read_text()
    assert "warm start from study cold" in text and f"t0000 <- {completed[0]['trial_id']}" in text

    runs = mlflow_runs(uri)
    parent = next(r for r in runs if r.info.run_id == warm["mlflow"]["parent_run_id"])
    assert parent.data.tags["mutransfer.warm_start"] == "cold" and parent.data.metrics["warm_start_trials"] == 2
    children = {
        r.data.tags["mutransfer.trial_id"]: r.data.tags.get("mutransfer.warm_start_from")
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
        and r.data.tags.get("mutransfer.kind") == "proxy_trial"
    }
    assert children == {
        "t0000": completed[0]["trial_id"],
        "t0001": completed[1]["trial_id"],
        "t0002": None,
        "t0003": None,
    }

    # by folder (the default top: max(1, 4 // 4) = 1)
    folder_study = write_tiny_study(tmp_path, data, name="warm-folder", trials=4)
    by_folder = _sweep(
        "--study", folder_study, "--runs-dir", tmp_path / "other", *common, "--warm-start", tmp_path / "runs" / "cold"
    )
    assert by_folder["warm_start"]["location"] == str(tmp_path / "runs" / "cold")
    assert [r["source_trial"] for r in by_folder["warm_start"]["from_source"]] == [completed[0]["trial_id"]]
    assert by_folder["warm_start"]["from_source"][0]["lr_factor"] == 1.0  # K 4 -> 4
