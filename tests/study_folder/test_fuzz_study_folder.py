"""Property-based fuzzing of a whole study folder (issue "Nothing lost", item 5: generated study folders).

A real finished study (a tiny Burgers study, two trials and its target, trained in process; its folder and its SQLite
store copied for each case) has one of its files changed: a trial's ``done.json``, ``history.json`` or
``executions.jsonl`` (or, in the folder turned back into one written before the journal held the trials, its ``config.json`` or
``outcome.json``), the study's ``study.yaml``, ``report.json``, ``costs.jsonl``, the Optuna
journal, the target's ``summary.json`` or ``progress.jsonl``, or a checkpoint: a field replaced by an arbitrary JSON
value, a line replaced or added, the file cut short, replaced by an arbitrary document or bytes, or deleted. Half the
cases also reopen the proxies (``state.json``'s phase set back to ``proxies``), so that ``--resume`` reads every trial's
files again. ``sweep --resume``, ``report``, ``trials`` and ``evaluate`` must then be refused in one line (exit 2, no
traceback, nothing written: tests/fuzz_harness.py), reach compute (the harness stops a resume where a training would
start) or work (exit 0). Never a traceback, several lines, or a file written by a refusal.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_harness import folder_fuzz_settings, record, run_cli
from tests.fuzz_harness import json_values as fuzz_json_values
from tests.journal_helpers import as_legacy
from tests.sweep_helpers import IN_PROCESS, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow  # a study trained first (15 s), then a second per case

SETTINGS = folder_fuzz_settings(60)

json_values = fuzz_json_values(
    "completed", "failed", "pruned", "retrying", "train", "t0000", "t0001", "core", "target", text=12, leaves=8
)

#: the files of a finished study the commands read back (relative to its folder)
FILES = [
    "study.yaml",
    "report.json",
    "costs.jsonl",
    "optuna.journal",
    "target/final/summary.json",
    "target/progress.jsonl",
    "target/final/checkpoint.pt",
    *[f"trials/t0000/{name}" for name in ("done.json", "history.json", "executions.jsonl")],
    "trials/t0001/checkpoint.pt",
    # a folder written before the journal held the trials (turned back into one first: tests/journal_helpers.py)
    *[f"trials/t0000/{name}" for name in ("config.json", "outcome.json")],
    "trials/t0001/outcome.json",
]
LEGACY = ("config.json", "outcome.json")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A folder holding ``tiny.h5``, ``mlflow.db`` and ``mutransfer-runs/sf``: a finished study (2 trials, a target)."""
    import contextlib

    from mutransfer.cli.main import main

    root = tmp_path_factory.mktemp("study-fuzz")
    study = write_tiny_study(root, write_tiny_data(root / "tiny.h5"), name="sf", trials=2)
    with contextlib.chdir(root), pytest.MonkeyPatch.context() as mp:
        mp.setenv("MUTRANSFER_CACHE", str(root / "cache"))
        mp.setenv("TQDM_DISABLE", "1")
        assert main(["sweep", "--study", str(study), *IN_PROCESS]) == 0
    assert json.loads((root / "mutransfer-runs" / "sf" / "state.json").read_text())["phase"] == "done"
    return root


def _edit_json(draw, path: Path) -> str:
    value = json.loads(path.read_text())
    if isinstance(value, dict) and value:
        for key in draw(st.lists(st.sampled_from([*sorted(value), "x"]), min_size=1, max_size=3, unique=True)):
            value[key] = draw(json_values)
    else:
        value = draw(json_values)
    path.write_text(json.dumps(value))
    return "field"


def _edit_lines(draw, path: Path) -> str:
    lines = path.read_text().splitlines()
    line = json.dumps(draw(json_values)) if draw(st.booleans()) else draw(st.text(max_size=30))
    if lines and draw(st.booleans()):
        lines[draw(st.integers(0, len(lines) - 1))] = line
    else:
        lines.insert(draw(st.integers(0, len(lines))), line)
    path.write_text("\n".join(lines) + "\n")
    return "line"


def _edit_yaml(draw, path: Path) -> str:
    study = yaml.safe_load(path.read_text())
    section = study[draw(st.sampled_from(sorted(k for k in study if isinstance(study[k], dict))))]
    section[draw(st.sampled_from([*sorted(section), "x"]))] = draw(json_values)
    path.write_text(yaml.safe_dump(study))
    return "field"


def _edit(draw, path: Path) -> str:
    how = draw(st.sampled_from(["own", "own", "truncated", "document", "bytes", "deleted"]))
    if how == "deleted":
        path.unlink()
    elif how == "bytes":
        path.write_bytes(draw(st.binary(max_size=64)))
    elif how == "document":
        path.write_text(json.dumps(draw(json_values)))
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: draw(st.integers(0, max(len(data) - 1, 0)))])
    elif path.suffix == ".json":
        how = _edit_json(draw, path)
    elif path.suffix in (".jsonl", ".journal"):
        how = _edit_lines(draw, path)
    elif path.suffix == ".yaml":
        how = _edit_yaml(draw, path)
    else:  # a checkpoint: its own edit is a cut
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        how = "truncated"
    return how


@given(
    data=st.data(),
    which=st.sampled_from(FILES),
    command=st.sampled_from(["sweep", "report", "trials", "evaluate"]),
    reopen=st.booleans(),
)
@SETTINGS
def test_a_generated_study_folder_is_refused_in_one_line_or_read(
    finished, tmp_path_factory, data, which, command, reopen
):
    root = tmp_path_factory.mktemp("copy")
    for name in ("mutransfer-runs", "mlruns"):
        shutil.copytree(finished / name, root / name, ignore=shutil.ignore_patterns(".locks"))
    for name in ("mlflow.db", "tiny.h5"):  # the store, and the data where study.yaml finds it (../../tiny.h5)
        shutil.copy(finished / name, root / name)
    folder = root / "mutransfer-runs" / "sf"
    if reopen:  # --resume reads every trial's files again
        state = json.loads((folder / "state.json").read_text())
        (folder / "state.json").write_text(json.dumps({**state, "phase": "proxies"}))
    if which.endswith(LEGACY):
        as_legacy(folder / "trials", "sf")
    edit = _edit(data.draw, folder / which)
    runs, store = ["--runs-dir", str(root / "mutransfer-runs")], ["--tracking-uri", f"sqlite:///{root / 'mlflow.db'}"]
    argv = {
        "sweep": ["sweep", "--resume", "--name", "sf", *runs, *store, *IN_PROCESS],
        "report": ["report", "sf", *runs, "--out", str(root / "page.html")],
        "trials": ["trials", "sf", *runs],
        "evaluate": ["evaluate", "sf", *runs, "--data", str(root / "tiny.h5")],
    }[command]
    outcome = record("study folder", run_cli(argv, watch=(folder,)), f"{which}/{edit}/{command}")
    assert outcome.kind in ("refused", "reached-compute", "accepted"), outcome.describe()
