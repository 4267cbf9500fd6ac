"""The values a sweep's steps pass along (mutransfer._sweep.session): what a step made is read as made, or the read
names the step that makes it; each step returns a new value, the one it was given unchanged; an open session
carries every part of the prepared study it was made from."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from mutransfer._study import load_study
from mutransfer._sweep.context import NotMadeYet, ProxyResults, StudyData, StudyRun, TrainedTarget, pick_best
from mutransfer._sweep.rescale import transfer_phase
from mutransfer._sweep.session import NO_EARLY_TARGET, Made, Prepared, Session
from mutransfer._sweep.target import TargetOutcome
from tests.sweep.test_strategies import _trial
from tests.sweep_helpers import prepared_by_hand, session_by_hand


def _session(tmp_path) -> Session:
    study, _ = load_study(None)
    fit = SimpleNamespace(train_x=torch.zeros(4, 64, 1), train_y=torch.zeros(4, 64, 2))
    data = StudyData(fit, fit, fit, tmp_path / "data.h5")
    return session_by_hand(prepared_by_hand(study, tmp_path / "s"), data, run=StudyRun("e1", "p1"))


@pytest.mark.parametrize(
    ("read", "step"),
    [
        (lambda m: m.proxies, "run_proxies"),
        (lambda m: m.transfer, "transfer_phase"),
        (lambda m: m.target, "train_target"),
        (lambda m: m.target_run_id, "train_target"),
    ],
)
def test_a_record_read_before_its_step_names_the_step(read, step):
    with pytest.raises(NotMadeYet, match=step):
        read(Made())


def test_a_phase_placed_before_the_proxies_is_refused_by_name_not_an_attribute_error(tmp_path):
    """The transfer phase run first (a strategy that placed a phase wrongly) fails on the missing proxies, in words."""
    with pytest.raises(NotMadeYet, match="the proxies' results is read before the proxy phase"):
        transfer_phase(_session(tmp_path), Made())


def test_a_step_returns_a_new_value_and_leaves_the_one_it_was_given_as_it_was(tmp_path):
    session = _session(tmp_path)
    trials = [_trial(0, 0.3), _trial(1, 0.2)]
    before = Made(made_proxies=ProxyResults(trials, pick_best(trials), 1))
    after = transfer_phase(session, before)
    assert before.made_transfer is None and after.transfer.source_key == "t0001"
    assert after.proxies is before.proxies
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.report = {}  # type: ignore[misc]


def test_a_record_once_made_is_read_as_made(tmp_path):
    session = _session(tmp_path)
    outcome = TargetOutcome("completed", 0.25, 2)
    made = dataclasses.replace(Made(), trained=TrainedTarget(outcome, "r1"))
    assert (session.experiment_id, session.parent_id, made.target, made.target_run_id) == ("e1", "p1", outcome, "r1")
    assert session.study_data.channels == (1, 2)  # the plans are made for the data's channels


def test_an_open_session_carries_every_part_of_the_prepared_study(tmp_path):
    """Session.of lists the prepared study's fields one by one: a field added to Prepared and not carried fails
    here."""
    prepared = prepared_by_hand(load_study(None)[0], tmp_path / "s", {"phase": "proxies"})
    session = session_by_hand(prepared, StudyData(None, None, None, tmp_path / "d.h5"))  # type: ignore[arg-type]
    for field in dataclasses.fields(Prepared):
        assert getattr(session, field.name) is getattr(prepared, field.name), field.name
    prepared.update_state(phase="target")  # one state mirror: what either writes, both read
    assert session.state["phase"] == "target"
    assert session.early is NO_EARLY_TARGET and session.early.take(tmp_path) is None
