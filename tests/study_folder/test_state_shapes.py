"""A wrong-shaped state.json is one line and exit 2 in every command that reads it, never a traceback further on
(issue "Nothing lost", finding 5: `[]`, `null`, `phase: done` without a report, fields of the wrong type)."""

from __future__ import annotations

import json

import pytest

from mutransfer.cli.main import main
from tests.sweep_helpers import K_ONLY_STUDY

TRIAL = {"trial_id": "t0000", "index": 0, "status": "completed", "config": {}, "hp": {}, "val_error": 0.5, "epochs": 2}
GOOD = {"phase": "proxies", "study": "quick", "tracking_db": "../../mlflow.db", "overrides": [], "trials": []}
BAD = {
    "a list": ([], "must be a JSON mapping of the study's state, found list"),
    "null": (None, "must be a JSON mapping of the study's state, found null"),
    "a number": (3, "must be a JSON mapping of the study's state, found int"),
    "done without a report": (dict(GOOD, phase="done"), "says the study is done but holds no report"),
    "a phase of no sweep": (dict(GOOD, phase="hacked"), "field 'phase' must be one of proxies, target, done"),
    "a report that is a list": (dict(GOOD, report=[]), "field 'report' must be a mapping, found list"),
    "trials as a mapping": (dict(GOOD, trials={"a": 1}), "field 'trials' must be a list, found dict"),
    "the model as text": (dict(GOOD, model="x"), "field 'model' must be a mapping, found str"),
    "seconds as text": (dict(GOOD, wall_seconds="fast"), "field 'wall_seconds' must be a number, found str"),
    "overrides of numbers": (dict(GOOD, overrides=[1, 2]), "field 'overrides' must be a list of mappings"),
    "the store as a number": (dict(GOOD, tracking_db=5), "field 'tracking_db' must be a string, found int"),
    "a window that is true": (dict(GOOD, search_window=True), "field 'search_window' must be a number, found bool"),
    "a trial that is null": (dict(GOOD, trials=[None]), "field 'trials' entry 0 must be a mapping"),
    "a trial without its id": (
        dict(GOOD, trials=[dict(TRIAL, trial_id=None)]),
        "field 'trials' entry 0 needs 'trial_id' as a string",
    ),
    "a trial's error as text": (
        dict(GOOD, trials=[dict(TRIAL, val_error="low")]),
        "field 'trials' entry 0 has 'val_error' that is not a number",
    ),
    "a best trial of no trial": (
        dict(GOOD, trials=[TRIAL], best={"trial_id": "t9999"}),
        "field 'best' names no trial of field 'trials'",
    ),
    "a verification no flag could ask for": (
        dict(
            GOOD,
            asked={"coord_check": False, "verify": True, "verify_points": 10_000, "verify_seeds": 3, "baseline": None},
        ),
        "field 'asked' must map coord_check and verify to true/false, verify_points to 3..41",
    ),
    "a trained target without its run": (
        dict(GOOD, phase="target", target_outcome={"status": "completed"}),
        "holds the trained target but not its MLflow run (target_run_id)",
    ),
    "a newer format": (dict(GOOD, version=99), "written by a newer mutransfer (study folder format 99;"),
    "a newer format whose fields changed": (
        dict(GOOD, version=3, trials={"t0000": {}}),
        "written by a newer mutransfer (study folder format 3;",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_wrong_shaped_state_is_one_line_in_every_command(tmp_path, monkeypatch, capsys, case):
    state, expected = BAD[case]
    _folder(tmp_path, monkeypatch, state)
    for argv in (["sweep", "--resume"], ["report", "quick"], ["trials", "quick"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"state.json: {expected}" in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mutransfer-runs"]  # no store, nothing else made


@pytest.mark.slow  # a whole study (the default suite stays under 5 min)
def test_a_state_naming_an_experiment_the_store_does_not_hold_is_refused_not_started_afresh(tmp_path, capsys):
    """Finding 5: state.json's experiment id of no experiment in the store was MLflow's "No Experiment with id=..."
    traceback on --resume. It is one line naming the id and the store, exit 2, and the store gains no run; with the
    id put back the study resumes."""
    import mutransfer as mt
    from tests.sweep_helpers import IN_PROCESS, mlflow_runs, write_tiny_data, write_tiny_study

    path = write_tiny_study(tmp_path, write_tiny_data(tmp_path / "tiny.h5"), name="lost", trials=2, epochs=1)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with mt.create_study(
        mt.StudySpec.from_yaml(path), storage=tmp_path / "runs", executor="inprocess", tracking_uri=uri
    ) as study:
        study.optimize()  # closed after its search: a study to resume
    state_file = tmp_path / "runs" / "lost" / "state.json"
    state = json.loads(state_file.read_text())
    runs = len(mlflow_runs(uri))
    state_file.write_text(json.dumps(dict(state, experiment_id="99999")))
    argv = ["sweep", "--study", str(path), "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", uri, "--resume"]
    capsys.readouterr()
    assert main([*argv, *IN_PROCESS]) == 2
    err = capsys.readouterr().err  # the override's note, then the line
    assert "Traceback" not in err and "names MLflow experiment '99999', which the store" in err.splitlines()[-1], err
    assert len(mlflow_runs(uri)) == runs  # no second parent run, nothing logged
    state_file.write_text(json.dumps(state))
    assert main([*argv, *IN_PROCESS]) == 0


def _folder(tmp_path, monkeypatch, state: dict):
    from mutransfer._study import load_study
    from mutransfer._study_folder.state import StudyDir

    monkeypatch.chdir(tmp_path)
    study, _ = load_study(K_ONLY_STUDY)
    sdir = StudyDir(tmp_path / "mutransfer-runs" / "quick")
    sdir.root.mkdir(parents=True)
    sdir.study_file.write_text(study.to_yaml())
    sdir.state_file.write_text(json.dumps(state))
    return sdir


def test_a_damaged_study_yaml_is_one_line_for_a_resume_and_shown_as_it_is_by_report(tmp_path, monkeypatch, capsys):
    """Found by the study-folder fuzz (tests/study_folder/test_fuzz_study_folder.py): a study.yaml of a NUL byte or
    of bytes that are not UTF-8 was a YAML or decoding traceback in `sweep --resume`, `trials` and `report`. A resume
    refuses it in one line; `report` and `trials`, which only show the folder, show it as it is."""
    sdir = _folder(tmp_path, monkeypatch, GOOD)
    for damage in (b"\x00", b"\x80\x81 not text"):
        sdir.study_file.write_bytes(damage)
        assert main(["sweep", "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "study.yaml" in err and "Traceback" not in err, err
        assert main(["trials", "quick"]) == 0
        assert main(["report", "quick", "--out", str(tmp_path / "page.html"), "--force"]) == 0
        capsys.readouterr()


def test_a_report_json_of_wrong_types_is_one_line(tmp_path, monkeypatch, capsys):
    """Found by the study-folder fuzz: report.json with ``best_proxy: true`` (any field of another type than the
    pages read) was an AttributeError traceback in `report`; it is one line naming the field, and a report of the
    right shape renders."""
    from mutransfer._reporting.study_files import check_report

    sdir = _folder(tmp_path, monkeypatch, GOOD)
    out = ["report", "quick", "--out", str(tmp_path / "page.html")]
    for report, said in (
        ({"best_proxy": True}, "'best_proxy' is not a dict"),
        ({"verdict": "good"}, "'verdict' is not a list"),
        ({"trial_table": [1]}, "'trial_table' holds a row that is not an object"),
        ([], "is not a JSON object"),
    ):
        (sdir.root / "report.json").write_text(json.dumps(report))
        assert main(out) == 2, report
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err, (report, err)
    good = {"best_proxy": {"index": 1}, "verdict": ["fine"], "trial_table": [{"trial_id": "t0000"}], "rungs": None}
    assert check_report(good, sdir.root / "report.json") == good


#: trial files the attack run of issue "Nothing lost" edited, each a traceback or a hang on `sweep --resume` before
TRIAL_FILES = {
    "an LR of inf": ("config.json", {"lr": float("inf"), "batch_size": 10}, "lr 'inf' is not a value of the study's"),
    "an LR as text": ("config.json", {"lr": "x", "batch_size": 10}, "lr 'x' is not a value of the study's search"),
    "metrics as text": ("outcome.json", {"status": "completed", "metrics": "abc"}, "'metrics' must map names to"),
    "a NaN error": (
        "outcome.json",
        {"status": "completed", "metrics": {"val_error": float("nan")}},
        "must be a finite",
    ),
    "rungs as a list": ("outcome.json", {"status": "completed", "metrics": {}, "rungs": [1]}, "'rungs' must map"),
    "an unknown status": ("outcome.json", {"status": "hacked", "metrics": {}}, "'status' must be one of completed"),
    "an LR outside the space": (
        "config.json",
        {"lr": 50.0, "batch_size": 10},
        "lr '50.0' is not a value of the study's search space",
    ),
    "a symlinked config": ("config.json", "link", "config.json is a symbolic link; a study folder holds its own"),
    "a symlinked trial folder": ("t0000", "link", "t0000 is a symbolic link; a study folder holds its own files"),
    "a folder": ("outcome.json", None, "outcome.json is not a file (a folder, a FIFO or a device)"),
    "a FIFO": ("config.json", "fifo", "config.json is not a file (a folder, a FIFO or a device)"),
    "trials/ a file": ("..", "trials file", "trials is not a folder; move it aside"),
    "a key of 200,000 characters": (
        "config.json",
        {"lr": 0.001, "batch_size": 10, "K" * 200_000: 1},
        "holds 'KKKKKKKKKKKKKKKKKKKKKKKKKKKKKK', 'batch_size', 'lr', not the study's search space",
    ),
}


@pytest.mark.parametrize("case", list(TRIAL_FILES))
def test_a_trial_file_of_wrong_types_is_one_line_before_a_resume_starts(tmp_path, monkeypatch, capsys, case):
    """Each edited trial file is one line and exit 2 on `sweep --resume`, before MLflow, Ray or a training starts
    (the store named is never made) and without a wait on a FIFO; the file is left as it was."""
    import os
    import shutil

    ids = {"experiment_id": "1", "parent_run_id": "0123456789abcdef0123456789abcdef"}
    sdir = _folder(tmp_path, monkeypatch, dict(GOOD, **ids))
    trial = sdir.trials_dir / "t0000"
    trial.mkdir(parents=True)
    (trial / "config.json").write_text(json.dumps({"lr": 0.001, "batch_size": 10}))
    name, content, said = TRIAL_FILES[case]
    if content == "trials file":
        shutil.rmtree(sdir.trials_dir)
        sdir.trials_dir.write_text("x")
    elif content is None:
        (trial / name).mkdir()
    elif content == "link":  # a link to a copy elsewhere: what a resume reads and writes would leave the folder
        elsewhere = tmp_path / "mutransfer-runs" / "elsewhere"
        shutil.copytree(trial, elsewhere) if name == "t0000" else shutil.copy(trial / name, elsewhere)
        shutil.rmtree(trial) if name == "t0000" else (trial / name).unlink()
        (sdir.trials_dir / name if name == "t0000" else trial / name).symlink_to(elsewhere)
    elif content == "fifo":
        (trial / name).unlink()
        os.mkfifo(trial / name)
    else:
        (trial / name).write_text(json.dumps(content))
    assert main(["sweep", "--resume", "--executor", "inprocess"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and len(err) < 1000, err[:2000]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mutransfer-runs"]  # no store made, nothing else


#: the same edits made in the journal, where a study written since 2026-11-30 keeps its trials (an attribute of trial
#: t0000 set to a value, or the whole journal replaced)
JOURNAL_EDITS = {
    "metrics as text": ("mutransfer.metrics", "abc", "'metrics' must map names to"),
    "a NaN error": ("mutransfer.metrics", {"val_error": float("nan")}, "metrics 'val_error' must be a finite"),
    "an unknown status": ("mutransfer.status", "hacked", "'status' must be one of completed"),
    "an LR outside the space": ("param.lr", 50.0, "(trial t0000): lr '50.0' is not a value of the study's search"),
    "a key of 200,000 characters": (
        "param." + "K" * 200_000,
        1,
        "holds 'KKKKKKKKKKKKKKKKKKKKKKKKKKKKKK', 'batch_size'",
    ),
    "an error as a number": ("mutransfer.error", 3, "'error' must be text or null"),
    "a damaged line": (None, "line", "optuna.journal: line 3 is not an Optuna journal entry; restore it from a copy"),
    "a folder": (None, "folder", "optuna.journal is not a file; restore it from a copy"),
    "a FIFO": (None, "fifo", "optuna.journal is not a file; restore it from a copy"),
}


@pytest.mark.parametrize("case", list(JOURNAL_EDITS))
def test_a_journal_edited_is_one_line_before_a_resume_starts(tmp_path, monkeypatch, capsys, case):
    """Each edit of the journal (its trials' one store) is one line and exit 2 on `sweep --resume`, before MLflow,
    Ray or a training starts, and without a wait on a FIFO."""
    import os

    from mutransfer._study import load_study
    from mutransfer._sweep._trial_journal import TrialJournal
    from mutransfer._sweep.sampling import search_distributions
    from tests.journal_helpers import set_trial_attr

    ids = {"experiment_id": "1", "parent_run_id": "0123456789abcdef0123456789abcdef"}
    sdir = _folder(tmp_path, monkeypatch, dict(GOOD, **ids))
    study, _ = load_study(K_ONLY_STUDY)
    journal = TrialJournal(sdir.root / "optuna.journal", study.name, search_distributions(study))
    config = {"lr": 0.001, "batch_size": 10}
    journal.finished(0, "t0000", config, "completed", 0.5, [(2, 0.5)], {"epoch": 2, "val_error": 0.5})
    (sdir.trials_dir / "t0000").mkdir(parents=True)
    attr, content, said = JOURNAL_EDITS[case]
    path = sdir.root / "optuna.journal"
    if attr is not None:
        set_trial_attr(sdir.trials_dir, study.name, 0, attr, content)
    elif content == "line":
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join([*lines[:2], b'{"op_code": "x"', *lines[2:]]))
    elif content == "folder":
        path.unlink()
        path.mkdir()
    else:
        path.unlink()
        os.mkfifo(path)
    before = None if content in ("folder", "fifo") else path.read_bytes()
    assert main(["sweep", "--resume", "--executor", "inprocess"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and len(err) < 1000, err[:2000]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mutransfer-runs"]  # no store made, nothing else
    assert before is None or path.read_bytes() == before  # left as it was


@pytest.mark.parametrize("kind", ["nested 5,000 deep", "a FIFO", "a symbolic link"])
def test_a_state_nested_thousands_deep_or_a_fifo_is_one_line(tmp_path, monkeypatch, capsys, kind):
    """Found by the attack re-run: a state.json of JSON nested 5,000 deep was a RecursionError traceback in `trials`,
    `report` and `sweep --resume`; a FIFO in its place would be waited on for ever. One line each."""
    import os

    sdir = _folder(tmp_path, monkeypatch, GOOD)
    if kind == "a FIFO":
        sdir.state_file.unlink()
        os.mkfifo(sdir.state_file)
    elif kind == "a symbolic link":  # its target would be read, and the next write would replace the link
        sdir.state_file.rename(tmp_path / "mutransfer-runs" / "state-elsewhere.json")
        sdir.state_file.symlink_to(tmp_path / "mutransfer-runs" / "state-elsewhere.json")
    else:
        sdir.state_file.write_text("[" * 5000 + "]" * 5000)
    for argv in (["sweep", "--resume", "--executor", "inprocess"], ["report", "quick"], ["trials", "quick"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "state.json" in err and "Traceback" not in err, (argv, err)


#: links the second attack re-run planted in a study folder (each was followed: read from, or written to, elsewhere)
LINKS = {
    "study.yaml": "/etc/hostname",
    "optuna.journal": "/etc/passwd",
    "report.json": "/etc/passwd",
    "model": "elsewhere",
    "target": "elsewhere",
    "trials/t0000/history.json": "/dev/zero",
}


@pytest.mark.parametrize("link", list(LINKS))
def test_a_symbolic_link_anywhere_in_a_study_folder_is_one_line(tmp_path, monkeypatch, capsys, link):
    """Found by the second attack re-run: a link as study.yaml (to /etc/hostname, whose contents the message then
    showed), optuna.journal or report.json (to /etc/passwd, read), model/ or target/ (to a folder elsewhere) or a
    trial's history.json (to /dev/zero) was followed by `sweep --resume`, `report`, `trials`, `evaluate` and (the
    third re-run) `dashboard`, which serves and writes the journal. Each
    command refuses the folder in one line naming the link; nothing is read through it."""
    sdir = _folder(tmp_path, monkeypatch, GOOD)
    (sdir.trials_dir / "t0000").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    place = sdir.root / link
    place.unlink(missing_ok=True)
    place.symlink_to(tmp_path / LINKS[link] if LINKS[link] == "elsewhere" else LINKS[link])
    for argv in (
        ["sweep", "--resume", "--executor", "inprocess"],
        ["report", "quick"],
        ["trials", "quick"],
        ["evaluate", "quick", "--data", "d.h5"],
        ["dashboard", "quick", "--port", "1"],  # refused before its port is looked at
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{link} is a symbolic link; a study folder holds its own" in err, (
            argv,
            err,
        )
