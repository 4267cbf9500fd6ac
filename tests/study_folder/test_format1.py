"""Study folders of format 1, as mutransfer wrote them at the commit ``tests/fixtures/format1.json`` names, frozen in
``tests/fixtures/format1.tar.xz`` (written by ``tests/fixtures/make_format1.py``): whatever later versions change
inside, these folders keep working (issue "A library with a CLI on top", item 6). The finished study lists the same
trials, its report opens, its trained target gives the same test error from its folder and from the model registry,
predicts, and a resume reports it without training; the study whose driver was killed during its proxies resumes
and finishes without training its finished trials again; the Python API opens both.

Extracted in a fresh folder, elsewhere than where they were written: the folders and their store move too."""

from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path

import pytest

from mutransfer.cli.main import main
from tests.journal_helpers import held_by_key
from tests.repo_paths import ROOT

pytestmark = pytest.mark.slow  # one resumed tiny study in process (about 10 s)

FIXTURES = ROOT / "tests" / "fixtures"
SAID = json.loads((FIXTURES / "format1.json").read_text())


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    with tarfile.open(FIXTURES / "format1.tar.xz") as archive:
        archive.extractall(tmp_path, filter="data")
    monkeypatch.chdir(tmp_path / "format1")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return tmp_path / "format1"


def _json(capsys, *argv: str) -> object:
    capsys.readouterr()
    assert main(list(argv)) == 0, capsys.readouterr().err[-2000:]
    return json.loads(capsys.readouterr().out)


def _close(a: list[dict], b: list[dict]) -> bool:
    return [r["resolution"] for r in a] == [r["resolution"] for r in b] and all(
        math.isclose(x["relative_l2"], y["relative_l2"], rel_tol=1e-5) for x, y in zip(a, b, strict=True)
    )


def test_a_finished_format1_study_lists_reports_evaluates_predicts_and_resumes_without_training(folder, capsys):
    assert _json(capsys, "trials", "format1", "--json") == SAID["trials"]
    evaluate = ["--data", "data.h5", "--resolution", "64", "--json"]
    for source in ("format1", "models:/fixture-fno/1"):
        assert _close(_json(capsys, "evaluate", source, *evaluate)["results"], SAID["evaluate"]), source
    assert main(["predict", "format1", "--data", "data.h5", "--out", "predicted.h5"]) == 0
    assert main(["data", "inspect", "predicted.h5"]) == 0
    assert main(["report", "format1", "--out", "page.html"]) == 0
    assert "format1" in (folder / "page.html").read_text()
    again = _json(capsys, "sweep", "--resume", "--name", "format1", "--json", "--executor", "inprocess")
    assert again["already_complete"], again
    assert _json(capsys, "trials", "format1", "--json") == SAID["trials"]


def test_a_format1_study_killed_during_its_proxies_resumes_and_trains_only_what_it_had_not(folder, capsys):
    trials = folder / "mutransfer-runs" / "format1-cut" / "trials"
    done = SAID["cut_trials_done"]
    before = {key: (trials / key / "outcome.json").read_text() for key in done}
    _json(capsys, "sweep", "--resume", "--name", "format1-cut", "--json", "--executor", "inprocess")
    rows = _json(capsys, "trials", "format1-cut", "--json")
    assert [r["trial_id"] for r in rows] == ["t0000", "t0001", "t0002", "t0003"], rows
    assert all(r["status"] == "completed" for r in rows), rows
    held = held_by_key(trials.parent, "format1-cut")  # brought into a journal, the files left as they were
    for key in done:  # trained once, before the kill; their outcome as it was
        assert len((trials / key / "executions.jsonl").read_text().splitlines()) == 1, key
        assert (trials / key / "outcome.json").read_text() == before[key], key
        assert held[key].status == json.loads(before[key])["status"] == "completed", key


def test_the_python_api_opens_format1_studies(folder):
    import mutransfer as mt

    study = mt.load_study("format1", storage="mutransfer-runs")
    best = min((t for t in SAID["trials"] if t["status"] == "completed"), key=lambda t: t["final_error"])
    assert study.best_params == {"lr": best["lr"], "batch_size": best["batch_size"]}
    assert [t.params for t in study.optuna_study.trials] == [
        {"lr": t["lr"], "batch_size": t["batch_size"]} for t in SAID["trials"]
    ]


def test_the_fixtures_study_run_afresh_gives_the_trials_and_the_target_error_it_recorded(folder, capsys):
    """The record half of "behaviour that must not change": the fixture's seeded study (the default study shrunk),
    run again from its file by this version, trains the trials the recording version trained (configurations and
    statuses exactly, errors to float rounding) and a target of the same test error."""
    inprocess = ("--executor", "inprocess")
    where = ("--runs-dir", "again", "--tracking-uri", f"sqlite:///{folder / 'again.db'}")
    assert main(["sweep", "--study", "format1.yaml", *where, "--json", *inprocess]) == 0, capsys.readouterr().err
    rows = _json(capsys, "trials", "format1", "--runs-dir", "again", "--json")
    exact = ("number", "trial_id", "status", "lr", "batch_size", "epochs")
    assert [{k: r[k] for k in exact} for r in rows] == [{k: r[k] for k in exact} for r in SAID["trials"]]
    for got, said in zip(rows, SAID["trials"], strict=True):
        for key in ("best_error", "final_error"):
            assert math.isclose(got[key], said[key], rel_tol=1e-3), (got["trial_id"], key, got[key], said[key])
    evaluate = ["--data", "data.h5", "--resolution", "64", "--json", *where]
    got = _json(capsys, "evaluate", "format1", *evaluate)["results"]
    assert [r["resolution"] for r in got] == [r["resolution"] for r in SAID["evaluate"]]
    assert math.isclose(got[0]["relative_l2"], SAID["evaluate"][0]["relative_l2"], rel_tol=1e-3), got
