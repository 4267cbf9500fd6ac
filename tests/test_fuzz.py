"""Property-based fuzzing of every bad input: CLI flags, study files, data files (docs/robustness.md).

Property: a bad input ends with exit code 2, one line on stderr, no traceback, and
no file created or changed. The fast tests run a few dozen generated inputs per
family in-process (tests/fuzz_harness.py); the ``slow`` ones run thousands, and
with MUTRANSFER_FUZZ_REPORT=FILE write the counts per family and outcome to FILE.
A few real subprocesses check that the in-process runner tells the truth.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FRESH_PROCESS_ENV
from tests.fuzz_harness import COUNTS, assert_refused, record, run_cli, write_grid_file
from tests.fuzz_inputs import (
    BAD_YAML,
    DATA_CORRUPTIONS,
    bad_flag_values,
    bad_study_texts,
    corrupt,
    flag_argv,
    splice,
    value_actions,
    walk_parsers,
)
from tests.repo_paths import ROOT

_COMMON = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)
# both draw the same inputs on every run (CI stays reproducible); MUTRANSFER_FUZZ_RANDOM=1 makes the long one draw new ones
FAST = settings(max_examples=int(os.environ.get("MUTRANSFER_FUZZ_EXAMPLES", 50)), derandomize=True, **_COMMON)
SLOW = settings(
    max_examples=int(os.environ.get("MUTRANSFER_FUZZ_SLOW_EXAMPLES", 400)),  # 4,000 for the documented run
    derandomize=os.environ.get("MUTRANSFER_FUZZ_RANDOM", "") not in ("1", "true"),
    **_COMMON,
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Fixture files outside the fuzzed working directories (watched: they must not change)."""
    return make_files(tmp_path_factory.mktemp("fuzz-files"))


def make_files(d: Path) -> dict:
    """A valid Burgers file, a small valid study on it, and broken files (empty, text, truncated HDF5) in ``d``."""
    burgers = write_grid_file(d / "burgers.h5", n=12, resolution=64)
    (d / "empty.h5").write_bytes(b"")
    (d / "text.txt").write_text("not a data file\n")
    data = burgers.read_bytes()
    (d / "truncated.h5").write_bytes(data[: len(data) // 2])
    study = yaml.safe_load((ROOT / "mutransfer/studies_data/quick.yaml").read_text())
    study["problem"].update(data=str(burgers), generated_resolution=None, resolution=64, n_train=8, n_test=4)
    study.update(proxy_K=4, target_K=8)
    study["search"]["num_trials"] = 2
    study["budget"].update(epochs=1, grace_period=1)
    study["target"]["epochs"] = 1
    (d / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    return {
        "dir": str(d),
        "burgers": str(burgers),
        "empty": str(d / "empty.h5"),
        "text": str(d / "text.txt"),
        "truncated": str(d / "truncated.h5"),
        "study": str(d / "study.yaml"),
        "study_dict": study,
    }


def base_argv(command: tuple, files: dict) -> list:
    """A valid, tiny invocation of ``command`` (argv pieces); a flag under test replaces its piece."""
    data = files["burgers"]
    bases = {
        ("train",): ["train", ["--problem", "burgers"], ["--data", data], ["--epochs", "1"], ["--no-progress"]],
        ("coord-check",): [
            "coord-check",
            ["--problem", "burgers"],
            ["--data", data],
            ["--modes", "2", "4"],
            ["--seeds", "1"],
            ["--steps", "1"],
            ["--out", "cc"],
            ["--no-progress"],
        ],
        ("sweep",): ["sweep", ["--study", files["study"]]],
        ("landscape",): [
            "landscape",
            ["--study", files["study"]],
            ["--modes", "2", "4"],
            ["--lrs", "1e-3", "1e-2"],
            ["--seeds", "1"],
            ["--epochs", "1"],
            ["--out", "ls"],
        ],
        ("transfer",): ["transfer", ["--dim", "1"], ["--proxy-K", "4"], ["--target-K", "8"], ["--lr", "1e-3"]],
        ("plan",): [
            "plan",
            ["--dim", "1"],
            ["--modes", "8"],
            ["--width", "16"],
            ["--layers", "2"],
            ["--grid", "64"],
            ["--device", "cpu"],
        ],
        ("data", "generate"): [
            "data",
            "generate",
            ("POSITIONAL", "problem"),
            ["--n", "2"],
            ["--resolution", "16"],
            ["--out", "g.h5"],
            ["--no-progress"],
        ],
        ("data", "inspect"): ["data", "inspect", ("POSITIONAL", "file")],
    }
    defaults = {("data", "generate"): {"problem": ["burgers"]}, ("data", "inspect"): {"file": [data]}}
    base = bases.get(command, list(command))
    fill = defaults.get(command, {})
    return [fill.get(p[1], p) if isinstance(p, tuple) else p for p in base], fill


def _flag_cases(files: dict) -> list:
    """(command, parser, action, strategy of bad values) for every value-taking flag the suite can break."""
    from mutransfer.cli.main import build_parser

    cases = []
    for command, parser in walk_parsers(build_parser()):
        for action in value_actions(parser):
            values = bad_flag_values(" ".join(command), action, files)
            if values is not None:
                cases.append((command, parser, action, values))
    return cases


@st.composite
def cli_case(draw, files):
    command, parser, action, values = draw(st.sampled_from(_flag_cases(files)))
    bad = draw(values)
    if action.nargs in ("+", "*"):
        values = draw(st.sampled_from([[bad], ["4", bad], [bad, "4"]]))
    elif isinstance(action.nargs, int):
        values = ["1e-3"] * (action.nargs - 1) + [bad]
    else:
        values = [bad]
    base, fill = base_argv(command, files)
    if not action.option_strings and action.dest in fill:
        base = [("POSITIONAL", action.dest) if p == fill[action.dest] else p for p in base]
    return splice(base, parser, action, flag_argv(action, values))


def _check_cli(argv, files):
    command = " ".join(argv[:2]) if argv[0] == "data" else argv[0]
    assert_refused(record("cli-flags", run_cli(argv, watch=(files["dir"],)), command))


def _check_unknown_flag(command, flag, files):
    base, _ = base_argv(command, files)
    argv = [x for p in base for x in (p if isinstance(p, list) else [p])] + [flag]
    assert_refused(record("cli-unknown-flags", run_cli(argv, watch=(files["dir"],))))


def _check_study(text, files, tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "study.yaml"
    path.write_text(text)
    assert_refused(record("study-files", run_cli(["sweep", "--study", str(path)], watch=(files["dir"], str(path)))))


def _check_data(kind, where, command, files, tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    path = write_grid_file(d / "bad.h5", n=12, resolution=64)
    corrupt(path, kind, where)
    if command in ("sweep", "landscape"):
        study = dict(files["study_dict"], problem=dict(files["study_dict"]["problem"], data=str(path)))
        (d / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
        argv = [command, "--study", str(d / "study.yaml")] + (
            ["--modes", "2", "4", "--lrs", "1e-3", "1e-2", "--out", "ls"] if command == "landscape" else []
        )
    else:
        argv = [command, "--problem", "burgers", "--data", str(path), "--no-progress"] + (
            ["--epochs", "1"] if command == "train" else ["--modes", "2", "4", "--out", "cc"]
        )
    assert_refused(record("data-files", run_cli(argv, watch=(files["dir"], str(d))), kind))


unknown_flags = st.text(st.characters(codec="ascii", exclude_characters="\x00"), min_size=1, max_size=10).map(
    lambda t: "--zz" + t
)
commands = st.sampled_from([c for c, _ in walk_parsers(__import__("mutransfer.cli.main").cli.main.build_parser())])
data_cases = (
    st.sampled_from(DATA_CORRUPTIONS),
    st.floats(0.0, 1.0, allow_subnormal=False),
    st.sampled_from(["train", "coord-check", "sweep", "landscape"]),
)
study_texts = st.one_of(st.sampled_from(BAD_YAML).map(lambda t: ("bad yaml", t)), st.deferred(lambda: _STUDIES))
_STUDIES = bad_study_texts(yaml.safe_load((ROOT / "mutransfer/studies_data/quick.yaml").read_text()))


# ----------------------------------------------------------------------------- the fast suite


@pytest.mark.fresh_process
@FAST
@given(data=st.data())
def test_bad_cli_flags_are_refused(files, data):
    _check_cli(data.draw(cli_case(files)), files)


@pytest.mark.fresh_process
@settings(FAST, max_examples=max(5, FAST.max_examples // 4))
@given(command=commands, flag=unknown_flags)
def test_unknown_flags_are_refused(files, command, flag):
    _check_unknown_flag(command, flag, files)


@pytest.mark.fresh_process
@FAST
@given(case=study_texts)
def test_bad_study_files_are_refused(files, tmp_path_factory, case):
    _check_study(case[1], files, tmp_path_factory)


@pytest.mark.fresh_process
@FAST
@given(kind=data_cases[0], where=data_cases[1], command=data_cases[2])
def test_bad_data_files_are_refused(files, tmp_path_factory, kind, where, command):
    _check_data(kind, where, command, files, tmp_path_factory)


# ----------------------------------------------------------------------------- the long suite


@pytest.mark.fresh_process
@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_bad_cli_flags_are_refused_long(files, data):
    _check_cli(data.draw(cli_case(files)), files)


@pytest.mark.fresh_process
@pytest.mark.slow
@settings(SLOW, max_examples=max(20, SLOW.max_examples // 5))
@given(command=commands, flag=unknown_flags)
def test_unknown_flags_are_refused_long(files, command, flag):
    _check_unknown_flag(command, flag, files)


@pytest.mark.fresh_process
@pytest.mark.slow
@SLOW
@given(case=study_texts)
def test_bad_study_files_are_refused_long(files, tmp_path_factory, case):
    _check_study(case[1], files, tmp_path_factory)


@pytest.mark.fresh_process
@pytest.mark.slow
@settings(SLOW, max_examples=max(50, SLOW.max_examples // 3))
@given(kind=data_cases[0], where=data_cases[1], command=data_cases[2])
def test_bad_data_files_are_refused_long(files, tmp_path_factory, kind, where, command):
    _check_data(kind, where, command, files, tmp_path_factory)


@pytest.fixture(scope="module", autouse=True)
def _write_counts():
    """With MUTRANSFER_FUZZ_REPORT=FILE: the counts per family and outcome, summed over the tests' fresh processes."""
    target = os.environ.get("MUTRANSFER_FUZZ_REPORT")
    if target and not os.environ.get(FRESH_PROCESS_ENV):
        target = str(Path(target).resolve())  # the children run from the repository root
        os.environ["MUTRANSFER_FUZZ_REPORT"] = target
        Path(target).unlink(missing_ok=True)  # this session starts the report; each test's child process adds to it
    yield
    if target:
        totals = json.loads(Path(target).read_text()) if Path(target).exists() else {}
        for family, counts in COUNTS.items():
            mine = totals.setdefault(family, {})
            for outcome, n in counts.items():
                mine[outcome] = mine.get(outcome, 0) + n
        Path(target).write_text(json.dumps(dict(sorted(totals.items())), indent=2) + "\n")


# ----------------------------------------------------------------------------- real subprocesses


@pytest.mark.parametrize(
    "argv",
    [
        ["transfer", "--dim", "4", "--proxy-K", "4", "--target-K", "8", "--lr", "1e-3"],
        ["plan", "--dim", "1", "--modes", "100", "--width", "8", "--layers", "2", "--grid", "64"],
        ["train", "--problem", "burgers", "--data", "{text}", "--epochs", "1"],
        ["sweep", "--study", "{truncated}"],
    ],
)
def test_bad_inputs_refused_by_the_real_command(files, tmp_path, argv):
    """The in-process property holds for the installed command too: exit 2, one line, nothing written."""
    argv = [a.format(**files) for a in argv]
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUTRANSFER_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "mutransfer", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- the harness can see a failure


def test_the_harness_stops_valid_inputs_at_compute_and_flags_bad_refusals(files):
    """A valid input is caught where compute starts (not refused), and each broken refusal is told apart."""
    from tests.fuzz_harness import Outcome, classify

    base, _ = base_argv(("train",), files)
    argv = [x for p in base for x in (p if isinstance(p, list) else [p])]
    assert run_cli(argv, watch=(files["dir"],)).kind == "reached-compute"
    assert run_cli(["transfer", "--dim", "1", "--proxy-K", "4", "--target-K", "8", "--lr", "1e-3"]).kind == "accepted"
    assert classify(Outcome([], 2, "", "mutransfer: error: x\n")) == "refused"
    assert classify(Outcome([], 2, "", "line one\nline two\n")) == "bad-refusal"
    assert classify(Outcome([], 2, "", "Traceback (most recent call last): x\n")) == "bad-refusal"
    assert classify(Outcome([], 2, "", "mutransfer: error: x\n", changed=["/tmp/study"])) == "bad-refusal"
    assert classify(Outcome([], "crash", "", "")) == "crash"
