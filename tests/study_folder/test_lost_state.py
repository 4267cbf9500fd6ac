"""Issue "Nothing lost", finding 4: a study folder whose state.json is missing, emptied, stripped of its MLflow ids, or
names a parent run the store does not hold used to resume by starting MLflow afresh without a word (a second parent
run, the finished trials logged again, the old runs left RUNNING). Each is now refused in one line offering
``--resume --rebuild-state``, and the rebuild keeps every finished trial (none trained again), reuses the study's
MLflow runs and leaves none RUNNING (mutransfer._sweep._rebuild_state)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mutransfer._sweep.trial import read_executions
from mutransfer.cli.main import main
from tests.sweep_helpers import IN_PROCESS, K_ONLY_STUDY, mlflow_runs, write_tiny_data, write_tiny_study

REBUILD = "mutransfer sweep --resume --rebuild-state"


def _lose_missing(state_file: Path, state: dict) -> None:
    state_file.unlink()


def _lose_emptied(state_file: Path, state: dict) -> None:
    state_file.write_text("")


def _lose_ids(state_file: Path, state: dict) -> None:
    kept = {k: v for k, v in state.items() if k not in ("experiment_id", "parent_run_id")}
    state_file.write_text(json.dumps(kept))


def _lose_parent(state_file: Path, state: dict) -> None:
    state_file.write_text(json.dumps(dict(state, parent_run_id="0123456789abcdef0123456789abcdef")))


#: each way the state is lost, and what the refusal says of it
LOSSES = {
    "missing": (_lose_missing, "state.json is missing (the folder holds 2 trial(s)"),
    "emptied": (_lose_emptied, "state.json is unreadable (empty, cut short"),
    "without its MLflow ids": (_lose_ids, "names no MLflow experiment or parent run (the folder holds 2 trial(s)"),
    "naming a parent run of no run": (
        _lose_parent,
        "names MLflow parent run '0123456789abcdef0123456789abcdef', which",
    ),
}


@pytest.mark.slow  # two small in-process studies' worth of training per case (about 15 s)
@pytest.mark.parametrize("case", list(LOSSES))
def test_a_lost_state_is_refused_then_rebuilt_without_a_duplicate(tmp_path, capsys, case):
    import mutransfer as mt

    lose, expected = LOSSES[case]
    path = write_tiny_study(tmp_path, write_tiny_data(tmp_path / "tiny.h5"), name="lost", trials=2, epochs=1)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with mt.create_study(
        mt.StudySpec.from_yaml(path), storage=tmp_path / "runs", executor="inprocess", tracking_uri=uri
    ) as study:
        study.optimize()  # closed after its search: both trials finished, the target not trained
    folder = tmp_path / "runs" / "lost"
    state = json.loads((folder / "state.json").read_text())
    parent = state["parent_run_id"]
    before = {r.info.run_id: r.info.status for r in mlflow_runs(uri)}
    lose(folder / "state.json", state)

    argv = ["sweep", "--study", str(path), "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", uri, "--resume"]
    capsys.readouterr()
    assert main([*argv, *IN_PROCESS]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert expected in last and REBUILD in last and "Traceback" not in last, last
    assert {r.info.run_id: r.info.status for r in mlflow_runs(uri)} == before  # the store untouched

    assert main([*argv, "--rebuild-state", *IN_PROCESS]) == 0
    runs = mlflow_runs(uri)
    kinds = sorted(r.data.tags.get("mutransfer.kind") for r in runs)
    assert kinds == ["proxy_trial", "proxy_trial", "study", "target"], kinds  # no second parent, no trial twice
    assert all(r.info.status == "FINISHED" for r in runs), [
        (r.data.tags.get("mutransfer.kind"), r.info.status) for r in runs
    ]
    assert next(r.info.run_id for r in runs if r.data.tags.get("mutransfer.kind") == "study") == parent  # reused
    for key in ("t0000", "t0001"):  # finished trials kept: trained once, in the first session
        assert [e["kind"] for e in read_executions(folder / "trials" / key)] == ["train"], key
    rebuilt = json.loads((folder / "state.json").read_text())
    assert rebuilt["phase"] == "done" and rebuilt["parent_run_id"] == parent
    assert rebuilt["search_window"] == state["search_window"]  # taken back from the parent run


def test_rebuild_state_needs_resume(capsys):
    assert main(["sweep", "--rebuild-state", *IN_PROCESS]) == 2
    assert capsys.readouterr().err.strip() == (
        "mutransfer sweep: error: --rebuild-state rebuilds the state of a study being resumed; add --resume"
    )


def test_a_folder_with_trials_and_no_state_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    """Fast (no training): the folder a driver killed after its first trials would leave, less its state.json."""
    from mutransfer._study import load_study
    from mutransfer._study_folder.state import StudyDir

    monkeypatch.chdir(tmp_path)
    study, _ = load_study(K_ONLY_STUDY)
    sdir = StudyDir(tmp_path / "mutransfer-runs" / "quick")
    (sdir.trials_dir / "t0000").mkdir(parents=True)
    sdir.study_file.write_text(study.to_yaml())
    assert main(["sweep", "--resume", *IN_PROCESS]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "state.json is missing (the folder holds 1 trial(s)" in err and REBUILD in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mutransfer-runs"]  # no store made, nothing else
    sdir.state_file.write_text(json.dumps({"phase": "proxies", "study": "quick"}))  # the ids stripped
    assert main(["sweep", "--resume", *IN_PROCESS]) == 2
    assert "names no MLflow experiment or parent run" in capsys.readouterr().err


@pytest.mark.slow  # a small in-process study, then its target again from its last checkpoint (about 15 s)
def test_a_finished_study_whose_state_is_lost_rebuilds_with_its_one_target_run(tmp_path, capsys):
    """The state lost after the target trained: the rebuild takes the target run back (found under the parent), so the
    store still holds one target run, and the report is written again."""
    path = write_tiny_study(tmp_path, write_tiny_data(tmp_path / "tiny.h5"), name="done", trials=2, epochs=1)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["sweep", "--study", str(path), "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", uri, *IN_PROCESS]
    assert main(argv) == 0
    folder = tmp_path / "runs" / "done"
    target = json.loads((folder / "state.json").read_text())["target_run_id"]
    (folder / "state.json").unlink()
    assert main([*argv, "--resume"]) == 2
    assert main([*argv, "--resume", "--rebuild-state"]) == 0
    runs = mlflow_runs(uri)
    assert sorted(r.data.tags.get("mutransfer.kind") for r in runs) == ["proxy_trial", "proxy_trial", "study", "target"]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert json.loads((folder / "state.json").read_text())["target_run_id"] == target
    assert (folder / "report.json").exists()


def test_a_rebuild_of_an_intact_state_is_refused(tmp_path, capsys):
    """--rebuild-state keeps less than an intact state does (a verification's records, the wall time): refused."""
    import mutransfer as mt

    path = write_tiny_study(tmp_path, write_tiny_data(tmp_path / "tiny.h5"), name="whole", trials=2, epochs=1)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with mt.create_study(
        mt.StudySpec.from_yaml(path), storage=tmp_path / "runs", executor="inprocess", tracking_uri=uri
    ) as study:
        study.optimize()
    state = (tmp_path / "runs" / "whole" / "state.json").read_text()
    argv = ["sweep", "--study", str(path), "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", uri, "--resume"]
    capsys.readouterr()
    assert main([*argv, "--rebuild-state", *IN_PROCESS]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith(
            "the state.json of study 'whole' is intact (it names its MLflow runs, which the store holds); resume without "
            "--rebuild-state"
        )
    )
    assert (tmp_path / "runs" / "whole" / "state.json").read_text() == state


def test_a_state_whose_store_is_gone_is_refused_without_making_one(tmp_path, monkeypatch, capsys):
    """Fast (no training): a resumed state names a parent run, and the SQLite store the command names does not exist.
    Refused in one line before anything runs, and the check makes no store (MLflow would create an empty one)."""
    from mutransfer._study import load_study
    from mutransfer._study_folder.state import StudyDir
    from mutransfer._sweep._trial_journal import TrialJournal
    from mutransfer._sweep.sampling import search_distributions

    monkeypatch.chdir(tmp_path)
    study, _ = load_study(K_ONLY_STUDY)
    sdir = StudyDir(tmp_path / "mutransfer-runs" / "quick")
    (sdir.trials_dir / "t0000").mkdir(parents=True)  # a trial handed out, in the journal
    TrialJournal(sdir.root / "optuna.journal", "quick", search_distributions(study)).handed_out(
        0, "t0000", {"lr": 0.001, "batch_size": 10}
    )
    sdir.study_file.write_text(study.to_yaml())
    sdir.write_state({"phase": "proxies", "study": "quick", "experiment_id": "1", "parent_run_id": "a" * 32})
    assert main(["sweep", "--resume", *IN_PROCESS]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"names MLflow parent run '{'a' * 32}', which the store" in err, err
    assert REBUILD in err and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow  # a small in-process study (about 10 s)
def test_from_python_a_lost_state_is_refused_then_rebuilt_by_load_study(tmp_path, monkeypatch):
    """The same from the Python API: `mt.load_study` of a study whose state.json was lost refuses its next step,
    saying how to rebuild it from Python; `load_study(..., rebuild_state=True)` rebuilds it, the same best trial, no
    trial trained twice, no second parent run."""
    import mutransfer as mt

    monkeypatch.chdir(tmp_path)  # the default store, ./mlflow.db, for both calls
    path = write_tiny_study(tmp_path, write_tiny_data(tmp_path / "tiny.h5"), name="lost", trials=2, epochs=1)
    with mt.create_study(mt.StudySpec.from_yaml(path), storage="runs", executor="inprocess") as study:
        study.optimize()
        best = study.best_params
    (tmp_path / "runs" / "lost" / "state.json").unlink()
    with mt.load_study("lost", storage="runs", executor="inprocess") as again, pytest.raises(mt.UserInputError) as err:
        again.best_params  # noqa: B018 -- the next step reads the state
    assert "state.json is missing" in str(err.value) and "mt.load_study(NAME, rebuild_state=True)" in str(err.value)
    with mt.load_study("lost", storage="runs", executor="inprocess", rebuild_state=True) as rebuilt:
        assert rebuilt.best_params == best
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert sorted(r.data.tags.get("mutransfer.kind") for r in runs) == ["proxy_trial", "proxy_trial", "study"]
    for key in ("t0000", "t0001"):
        assert [e["kind"] for e in read_executions(tmp_path / "runs" / "lost" / "trials" / key)] == ["train"], key
