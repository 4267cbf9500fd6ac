"""Property-based fuzzing of a study folder's state.json (issue "Nothing lost", item 5: generated state files).

A study folder (a tiny study's ``study.yaml``, one trial's files or none) is given a generated ``state.json``: a realistic
state with some fields replaced by arbitrary JSON values, an arbitrary JSON document, or arbitrary bytes. Every command
that reads the folder (``sweep --resume``, ``report``, ``trials``) must then end in one of three ways: refused (exit 2,
one line, no traceback, nothing written: tests/fuzz_harness.py), going on to compute (a state the sweep can resume
from; the harness stops it where Ray would start), or done (exit 0: ``trials`` lists a folder it can read). Never a
traceback, several lines, or a file written by a refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_harness import folder_fuzz_settings, record, run_cli
from tests.fuzz_harness import json_values as fuzz_json_values
from tests.sweep_helpers import write_tiny_data, write_tiny_study

SETTINGS = folder_fuzz_settings(100)

GOOD = {
    "study": "fz",
    "phase": "proxies",
    "overrides": [],
    "source_text": "",
    "created": 1.0,
    "experiment_id": "1",
    "parent_run_id": "0123456789abcdef0123456789abcdef",
    "search_window": 2,
    "trials": [],
    "version": 1,
}

json_values = fuzz_json_values(text=20, leaves=12)
#: the fields the sweep writes, and a few it does not
fields = st.sampled_from(sorted(GOOD) + ["phase", "report", "best", "target_outcome", "model", "tracking_db", "x"])


def _state_text(draw) -> bytes:
    how = draw(st.sampled_from(["fields", "fields", "document", "bytes"]))
    if how == "bytes":
        return draw(st.binary(max_size=64))
    if how == "document":
        return json.dumps(draw(json_values)).encode()
    state = dict(GOOD)
    for key in draw(st.lists(fields, min_size=1, max_size=4, unique=True)):
        state[key] = draw(json_values)
    if draw(st.booleans()):
        state["phase"] = draw(st.sampled_from(["proxies", "target", "done", "", "later"]))
    return json.dumps(state).encode()


@pytest.fixture(scope="module")
def study_yaml(tmp_path_factory) -> str:
    """A tiny study's resolved file (its data: a 32-sample Burgers file, read in milliseconds)."""
    from mutransfer._study import load_study

    d = tmp_path_factory.mktemp("fuzz-study")
    study, _ = load_study(str(write_tiny_study(d, write_tiny_data(d / "tiny.h5"), name="fz")))
    return study.to_yaml()


@given(data=st.data(), command=st.sampled_from(["sweep", "report", "trials"]))
@SETTINGS
def test_a_generated_state_is_refused_in_one_line_or_read(study_yaml, tmp_path_factory, data, command):
    runs = tmp_path_factory.mktemp("runs")
    folder = runs / "fz"
    folder.mkdir()
    if data.draw(st.booleans(), label="with a trial"):  # without: a state naming no runs may be resumed
        (folder / "trials" / "t0000").mkdir(parents=True)
        (folder / "trials" / "t0000" / "config.json").write_text(json.dumps({"lr": 0.001, "batch_size": 10}))
    (folder / "study.yaml").write_text(study_yaml)
    (folder / "state.json").write_bytes(_state_text(data.draw))
    argv = {
        "sweep": ["sweep", "--resume", "--name", "fz", "--runs-dir", str(runs)],  # Ray's start: where compute starts
        "report": ["report", "fz", "--runs-dir", str(runs), "--out", str(runs / "page.html")],
        "trials": ["trials", "fz", "--runs-dir", str(runs)],
    }[command]
    outcome = record("state.json", run_cli(argv, watch=(folder,)), command)
    assert outcome.kind in ("refused", "reached-compute", "accepted"), outcome.describe()


def test_the_property_fails_on_a_traceback(tmp_path):
    """The check can fail: a state the harness cannot classify as refused (here a crash it is shown) is caught."""
    from tests.fuzz_harness import Outcome, classify

    crash = Outcome(["trials", "quick"], "crash", "", "Traceback (most recent call last):\n  ...\nKeyError: 'x'\n")
    assert classify(crash) == "crash"
    two_lines = Outcome(["sweep"], 2, "", "mutransfer sweep: error: a\nmore\n")
    assert classify(two_lines) == "bad-refusal"
    written = Outcome(["sweep"], 2, "", "mutransfer sweep: error: a\n", changed=[str(Path(tmp_path) / "f")])
    assert classify(written) == "bad-refusal"
