"""`mutransfer report` (the study's HTML page) and `mutransfer trials` (one row per trial) on real study folders.

Two tiny sweeps run once for the module on a real local Ray and a real MLflow sqlite store: one with
--verify and --baseline direct, one without. The commands then run as a user runs them (subprocesses).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.repo_paths import ROOT
from tests.sweep_helpers import mlflow_runs, write_tiny_data, write_tiny_study

TRIAL_COLUMNS = [
    "number",
    "trial_id",
    "status",
    "lr",
    "batch_size",
    "epochs",
    "best_error",
    "final_error",
    "device_seconds",
]


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "mutransfer", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


class Result:
    """The outcome of one in-process `mutransfer` call (what subprocess.run gives, without the 5 s start-up)."""

    def __init__(self, capsys, *args):
        from mutransfer.cli.main import main

        capsys.readouterr()
        self.returncode = main([str(a) for a in args])
        captured = capsys.readouterr()
        self.stdout, self.stderr = captured.out, captured.err


def assert_one_line_error(proc, *fragments) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


class Page(HTMLParser):
    """The parts of the page the tests check: every src/href, section ids, figures, tables by id (cell text)."""

    def __init__(self, text: str):
        super().__init__()
        self.links, self.ids, self.figures, self.tables, self.tags = [], set(), [], {}, set()
        self._table, self._row, self._cell = None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.links += [v for k, v in attrs if k in ("src", "href") and v is not None]
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "figure":
            self.figures.append(a)
        if tag == "table" and a.get("id"):
            self._table = self.tables.setdefault(a["id"], [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


# --------------------------------------------------------------------------- real studies (slow)


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """Two real tiny sweeps in one runs directory: 'full' (--verify, --baseline direct) and 'plain', trained in process
    (the report reads the folder and the store; which executor trained them is tests/sweep/test_executors.py's)."""
    from mutransfer.cli.main import main

    work = tmp_path_factory.mktemp("report")
    data = write_tiny_data(work / "burgers_tiny.h5")
    runs, uri = work / "runs", f"sqlite:///{work / 'mlflow.db'}"
    full = write_tiny_study(work, data, name="full", trials=4, epochs=3, grace=1, target_epochs=3)
    plain = write_tiny_study(work, data, name="plain", trials=2, epochs=2, grace=1)
    common = ["--runs-dir", str(runs), "--tracking-uri", uri, "--json", "--executor", "inprocess"]
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        assert (
            main(
                [
                    "sweep",
                    "--study",
                    str(full),
                    *common,
                    "--verify",
                    "--verify-points",
                    "3",
                    "--verify-seeds",
                    "1",
                    "--baseline",
                    "direct",
                ]
            )
            == 0
        )
        assert main(["sweep", "--study", str(plain), *common]) == 0
    return work, runs, uri


def _report_json(runs: Path, name: str) -> dict:
    return json.loads((runs / name / "report.json").read_text())


@pytest.mark.slow
def test_the_page_is_self_contained_and_shows_the_study(studies, tmp_path):
    work, runs, _ = studies
    out = tmp_path / "full.html"
    proc = cli("report", "full", "--runs-dir", runs, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    text = out.read_text()
    page = Page(text)
    # one file: every image inline, no stylesheet, script or link to fetch
    assert page.links and all(link.startswith("data:image/png;base64,") for link in page.links), page.links
    assert not {"script", "link", "iframe"} & page.tags
    assert "http://" not in text and "https://" not in text
    assert "<title>mutransfer study full</title>" in text and "<h1>Study full</h1>" in text

    # the transfer table holds report.json's values (6 significant digits)
    report = _report_json(runs, "full")
    rows = page.tables["transfer"]
    assert rows[0] == ["quantity", "proxy", "factor", "target", "rule"]
    quantities = report["transfer"]["quantities"]
    assert [r[0] for r in rows[1:]] == [q["name"] for q in quantities]
    for row, q in zip(rows[1:], quantities):
        for cell, key in zip(row[1:4], ("proxy", "factor", "target")):
            assert float(cell) == pytest.approx(q[key], rel=1e-5)
        assert row[4] == q["rule"]

    # one learning curve per trial; the sections of --verify and --baseline direct
    curves = [f for f in page.figures if "data-curves" in f]
    assert len(curves) == 1 and int(curves[0]["data-curves"]) == report["trials"]["total"] == 4
    assert {"verification", "baseline", "settings", "trials", "result", "compute"} <= page.ids
    assert len(page.tables["trials"]) == 1 + 4
    assert "Hyperparameter importances." in text  # drawn: 4 trials reported different errors
    assert "notes" not in page.ids  # nothing missing
    # captions name the error the plots show, and 4 trials' importance bars carry their caveat
    assert "last reported validation error" in text and "last reported test error" not in text
    assert "from 4 trials" in text and "a rough hint, not a measurement" in text
    # where the trained target is, and how an MLflow client loads it
    result = {row[0]: row[1] for row in page.tables["result"]}
    assert result["trained model"].startswith(str(runs / "full" / "model"))
    assert result["MLflow run model"].startswith(report["model"]["run_uri"])

    # the sweep wrote the same page into the study folder and logged it on the MLflow parent run
    assert (runs / "full" / "report.html").is_file()


@pytest.mark.slow
def test_each_sweep_logs_the_page_on_its_parent_run(studies):
    from mlflow.tracking import MlflowClient

    _, runs, uri = studies
    parents = [r for r in mlflow_runs(uri) if r.data.tags.get("mutransfer.kind") == "study"]
    assert len(parents) == 2
    for run in parents:
        logged = [a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id, "report")]
        assert "report/report.html" in logged, logged
        name = run.data.tags["mutransfer.study"]
        assert f"<h1>Study {name}</h1>" in (runs / name / "report.html").read_text()


@pytest.mark.slow
def test_a_study_without_verify_or_baseline_has_no_such_sections(studies, tmp_path, capsys):
    _, runs, _ = studies
    out = tmp_path / "plain.html"
    assert Result(capsys, "report", runs / "plain", "--out", out).returncode == 0  # by folder path this time
    page = Page(out.read_text())
    assert "verification" not in page.ids and "baseline" not in page.ids
    assert {"settings", "transfer", "trials"} <= page.ids
    assert int(next(f for f in page.figures if "data-curves" in f)["data-curves"]) == 2


@pytest.mark.slow
def test_learning_curves_draw_one_line_per_trial_and_mark_asha_stops(studies):
    from mutransfer._reporting.figures import learning_curves_axes, optuna_study
    from mutransfer._reporting.study_files import load_study_files

    _, runs, _ = studies
    files = load_study_files("full", str(runs))
    ax = learning_curves_axes(optuna_study(files)[0])
    lines = [line for line in ax.get_lines() if line.get_label().startswith("trial ")]
    assert sorted(line.get_label() for line in lines) == sorted(f"trial {t.index}" for t in files.trials)
    for t in files.trials:  # each line is the trial's history.json
        line = next(x for x in lines if x.get_label() == f"trial {t.index}")
        assert list(line.get_ydata()) == pytest.approx([r.test_error for r in files.histories[t.trial_id]])
    stopped = [t for t in files.trials if t.status == "pruned"]
    marks = [c for c in ax.collections if c.get_label() == "stopped by ASHA"]
    assert len(marks) == (1 if stopped else 0)
    if stopped:  # an X at the last epoch of each trial ASHA stopped
        assert sorted(map(tuple, marks[0].get_offsets())) == sorted(
            (t.epochs, files.histories[t.trial_id][-1].test_error) for t in stopped
        )


@pytest.mark.slow
def test_missing_or_corrupt_histories_are_noted_in_the_page(studies, tmp_path, capsys):
    _, runs, _ = studies
    copy = tmp_path / "copied-study"
    shutil.copytree(runs / "full", copy, ignore=shutil.ignore_patterns("tune", "target", "direct"))
    trials = json.loads((copy / "state.json").read_text())["trials"]
    (copy / "trials" / trials[0]["trial_id"] / "history.json").unlink()
    (copy / "trials" / trials[1]["trial_id"] / "history.json").write_text("{not json")
    out = tmp_path / "copy.html"
    proc = Result(capsys, "report", copy, "--out", out)
    assert proc.returncode == 0, proc.stderr
    page = Page(out.read_text())
    assert "notes" in page.ids
    text = out.read_text()
    assert f"trial {trials[0]['index']} ({trials[0]['trial_id']}):" in text and "history.json is missing" in text
    assert (
        f"trial {trials[1]['index']} ({trials[1]['trial_id']}):" in text and "is unreadable (JSONDecodeError)" in text
    )
    assert int(next(f for f in page.figures if "data-curves" in f)["data-curves"]) == len(trials) - 2
    # the trials table keeps every trial; the best error of the two is unknown
    rows = Result(capsys, "trials", copy, "--json")
    records = {r["trial_id"]: r for r in json.loads(rows.stdout)}
    assert len(records) == len(trials)
    assert records[trials[0]["trial_id"]]["best_error"] is None and records[trials[1]["trial_id"]]["best_error"] is None
    assert records[trials[2]["trial_id"]]["best_error"] is not None


@pytest.mark.slow
def test_importances_need_two_trials_that_reported(studies, tmp_path, capsys):
    _, runs, _ = studies
    copy = tmp_path / "one-reported"
    shutil.copytree(runs / "plain", copy, ignore=shutil.ignore_patterns("tune", "target"))
    state = json.loads((copy / "state.json").read_text())
    for t in state["trials"][1:]:
        t.update(status="failed", val_error=None)
    (copy / "state.json").write_text(json.dumps(state))
    out = tmp_path / "one.html"
    assert Result(capsys, "report", copy, "--out", out).returncode == 0
    text = out.read_text()
    assert "importance needs at least 2 trials that reported an error (this study has 1)" in text
    assert "Hyperparameter importances." not in text  # no figure, the sentence instead


@pytest.mark.slow
def test_trials_table_one_row_per_trial_sorted_and_as_json(studies, capsys):
    _, runs, _ = studies
    state = json.loads((runs / "full" / "state.json").read_text())
    proc = Result(capsys, "trials", "full", "--runs-dir", runs)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split() == TRIAL_COLUMNS and len(lines) == 1 + len(state["trials"])

    records = json.loads(cli("trials", "full", "--runs-dir", runs, "--json").stdout)
    assert isinstance(records, list) and [list(r) for r in records] == [TRIAL_COLUMNS] * len(state["trials"])
    for record in records:
        t = next(t for t in state["trials"] if t["trial_id"] == record["trial_id"])
        assert record["number"] == t["index"] and record["status"] == t["status"] and record["epochs"] == t["epochs"]
        assert {k: record[k] for k in t["config"]} == t["config"]
        assert record["final_error"] == t["val_error"] and record["device_seconds"] == t["device_seconds"]
        history = json.loads((runs / "full" / "trials" / t["trial_id"] / "history.json").read_text())
        assert record["best_error"] == min(r["test_error"] for r in history)

    by_error = json.loads(
        Result(capsys, "trials", "full", "--runs-dir", runs, "--json", "--sort", "final_error").stdout
    )
    errors = [r["final_error"] for r in by_error]
    assert errors == sorted(errors) and {r["trial_id"] for r in by_error} == {r["trial_id"] for r in records}
    by_lr = Result(capsys, "trials", "full", "--runs-dir", runs, "--sort", "lr").stdout.strip().splitlines()[1:]
    lrs = [float(line.split()[3]) for line in by_lr]
    assert lrs == sorted(lrs)

    proc = cli("trials", "full", "--runs-dir", runs, "--sort", "speed")
    assert_one_line_error(proc, "--sort 'speed' is not a column", "use one of: " + ", ".join(TRIAL_COLUMNS))
    assert proc.stdout == ""


# --------------------------------------------------------------------------- bad input (fast)


def test_an_unknown_study_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    proc = cli("report", "no-such-study", cwd=tmp_path)  # as a user runs it: exit code 2, one line
    assert_one_line_error(
        proc, "STUDY 'no-such-study': no study folder with a state.json", "mutransfer-runs", "--runs-dir"
    )
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(Result(capsys, "trials", "no-such-study"), "STUDY 'no-such-study'")
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_state_is_one_line(tmp_path, capsys):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "state.json").write_text("{torn")
    for command in ("report", "trials"):
        assert_one_line_error(Result(capsys, command, folder), "state.json is unreadable")
    assert sorted(p.name for p in folder.iterdir()) == ["state.json"]
    # at the end of a sweep the same folder costs one warning line, not the sweep
    from mutransfer._reporting.html import write_study_page

    said = []
    assert write_study_page(folder, said.append) is None
    assert len(said) == 1 and "report page not written" in said[0] and f"mutransfer report {folder}" in said[0]
    assert sorted(p.name for p in folder.iterdir()) == ["state.json"]
    (folder / "state.json").write_text(json.dumps({"study": "broken", "phase": "proxies"}))
    assert write_study_page(folder, said.append) == folder / "report.html" and len(said) == 1


def test_a_bad_out_path_is_refused_before_rendering(tmp_path, capsys):
    folder = tmp_path / "started"
    folder.mkdir()
    (folder / "state.json").write_text(json.dumps({"study": "started", "phase": "proxies"}))
    assert_one_line_error(
        Result(capsys, "report", folder, "--out", tmp_path / "missing" / "x.html"), "--out", "existing folder"
    )
    assert_one_line_error(Result(capsys, "report", folder, "--out", tmp_path), "--out")
    # a study that has only started: the page says so, nothing is invented
    out = tmp_path / "started.html"
    assert Result(capsys, "report", folder, "--out", out).returncode == 0
    text = out.read_text()
    assert "no proxy trial records yet (phase proxies)" in text and "No transfer yet" in text


def test_the_importance_caveat_holds_below_thirty_trials_only():
    """The caveat is said of 29 trials and not of 30 or more: the caption can go either way."""
    from mutransfer._reporting.html import IMPORTANCE_TRIALS, importance_caption

    assert IMPORTANCE_TRIALS == 30
    assert "from 29 trials (20 ran to the end) these bars are a rough hint" in importance_caption(29, 20)
    for trials in (30, 64):
        caption = importance_caption(trials, trials)
        assert "rough hint" not in caption and caption.endswith("for the validation error.")
