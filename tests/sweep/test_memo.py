"""Resume as memoisation (mutransfer._sweep._memo): a step's result is made once for its inputs and read back after,
a result stored from other inputs is refused in one line, and a folder written before the inputs were kept resumes as
it is. Shown on the bare function and on the target step, which trains nothing when its result is stored."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from mutransfer._study import load_study
from mutransfer._sweep._memo import INPUTS_KEY, Memo, remembered
from mutransfer._sweep.context import ProxyResults, StudyData, TransferResult, pick_best
from mutransfer._sweep.rescale import transfer
from mutransfer._sweep.session import Made
from mutransfer._sweep.target import TargetOutcome
from mutransfer._sweep.train_target import TARGET_KEY, train_target
from mutransfer.errors import UserInputError
from tests.sweep.test_strategies import _trial
from tests.sweep_helpers import prepared_by_hand, session_by_hand

MEMO = Memo("answer", lambda d: int(d["value"]), lambda v: {"value": v}, "the fix")


def _made(calls: list[int]):
    def make() -> int:
        calls.append(1)
        return 42

    return make


def test_a_result_is_made_once_for_its_inputs_and_read_back_after(tmp_path):
    study = prepared_by_hand(load_study(None)[0], tmp_path)
    tmp_path.mkdir(exist_ok=True)
    calls: list[int] = []
    assert remembered(study, MEMO, {"hp": {"lr": 0.01}}, _made(calls)) == 42
    assert remembered(study, MEMO, {"hp": {"lr": 0.01}}, _made(calls)) == 42
    assert calls == [1]
    kept = json.loads((tmp_path / "state.json").read_text())
    assert kept["answer"] == {"value": 42} and kept[INPUTS_KEY] == {"answer": {"hp": {"lr": 0.01}}}
    again = prepared_by_hand(study.study, tmp_path, kept)  # a new driver reads the folder
    assert remembered(again, MEMO, {"hp": {"lr": 0.01}}, _made(calls)) == 42 and calls == [1]


def test_a_result_stored_from_other_inputs_is_refused_in_one_line_and_nothing_is_made(tmp_path):
    study = prepared_by_hand(load_study(None)[0], tmp_path)
    tmp_path.mkdir(exist_ok=True)
    calls: list[int] = []
    remembered(study, MEMO, {"hp": {"lr": 0.01}, "points": 5}, _made(calls))
    with pytest.raises(UserInputError) as info:
        remembered(study, MEMO, {"hp": {"lr": 0.01}, "points": 7}, _made(calls))
    message = str(info.value)
    assert "the stored answer was made from points 5, but this run's points is 7; the fix" in message
    assert "\n" not in message and calls == [1]


def test_inputs_that_are_not_a_mapping_are_refused_in_one_line(tmp_path):
    state = {"answer": {"value": 7}, INPUTS_KEY: {"answer": 5}}
    study = prepared_by_hand(load_study(None)[0], tmp_path, state)
    with pytest.raises(UserInputError, match="field 'inputs' entry 'answer' must be a mapping .* found int; the fix"):
        remembered(study, MEMO, {"hp": {"lr": 0.5}}, _made([]))


def test_a_result_kept_before_the_inputs_were_is_read_back_as_it_is(tmp_path):
    """A study folder of an earlier version holds the result without its inputs: it resumes, nothing made again."""
    study = prepared_by_hand(load_study(None)[0], tmp_path, {"answer": {"value": 7}})
    calls: list[int] = []
    assert remembered(study, MEMO, {"hp": {"lr": 0.5}}, _made(calls)) == 7 and calls == []


def _target_session(tmp_path, state: dict):
    study = load_study(None)[0]
    fit = SimpleNamespace(train_x=torch.zeros(4, 64, 1), train_y=torch.zeros(4, 64, 1))
    session = session_by_hand(prepared_by_hand(study, tmp_path, state), StudyData(fit, fit, fit, tmp_path / "d.h5"))
    trials = [_trial(0, 0.3), _trial(1, 0.2)]
    proxies = ProxyResults(trials, pick_best(trials), 1)
    record, hp = transfer(study, proxies.best)
    return session, Made(made_proxies=proxies, made_transfer=TransferResult(record, hp, proxies.best, "t0001"))


def test_the_target_is_read_back_for_its_configuration_and_refused_for_another(tmp_path):
    """The target step trains nothing when state.json holds the target of the same transferred configuration (the
    in-process executor would train it here otherwise: no data to train on, it would fail), and refuses one trained
    at another learning rate."""
    tmp_path.mkdir(exist_ok=True)
    _, made = _target_session(tmp_path, {})
    outcome = TargetOutcome("completed", 0.125, 2, checkpoint_dir="target/final")
    inputs = {"hp": made.transfer.hp, "source": "t0001"}
    state = {TARGET_KEY: outcome.as_dict(), "target_run_id": "run-1", INPUTS_KEY: {TARGET_KEY: inputs}}
    session, made = _target_session(tmp_path, json.loads(json.dumps(state)))
    after = train_target(session, made)
    assert after.target.test_error == 0.125 and after.target_run_id == "run-1"
    assert after.target.checkpoint_dir == str(tmp_path / "target" / "final")  # kept relative, read back whole

    other = json.loads(json.dumps(state))
    other[INPUTS_KEY][TARGET_KEY]["hp"]["lr"] = 1.0
    session, made = _target_session(tmp_path, other)
    with pytest.raises(
        UserInputError,
        match="the stored target_outcome was made from hp .* restore the folder's state.json from a copy",
    ):
        train_target(session, made)


def test_a_resume_that_asks_another_grid_reads_the_finished_verification_back_as_it_ran():
    """`--resume --verify --verify-points 5` of a study whose verification finished at 9 x 2: the options take 9 x 2,
    with a note, before anything is written (the step's inputs then match, and the finished grid is read back); the
    same grid, no verification asked, or none finished: the options as given."""
    from mutransfer._sweep.asked import with_finished_grid
    from mutransfer._sweep.context import SweepOptions

    state = {"verification": {"points": []}, INPUTS_KEY: {"verification": {"hp": {}, "points": 9, "seeds": 2}}}
    options, notes = with_finished_grid(SweepOptions(verify=True, verify_points=5, verify_seeds=3), state)
    assert (options.verify_points, options.verify_seeds) == (9, 2)
    assert notes == [
        "note: the study's verification finished with --verify-points 9 --verify-seeds 2: it is read back as it ran "
        "(another grid: a new study with --verify and --name NEW)"
    ]
    same = SweepOptions(verify=True, verify_points=9, verify_seeds=2)
    assert with_finished_grid(same, state) == (same, [])
    for options, stored in ((SweepOptions(verify_points=5), state), (SweepOptions(verify=True), {"verification": {}})):
        assert with_finished_grid(options, stored) == (options, [])
