"""The sweep context's records are never None when read: each is there, or the read names the step that makes it."""

from __future__ import annotations

import pytest

from mutransfer._study import load_study
from mutransfer._study_folder.state import StudyDir
from mutransfer._sweep.context import NotMadeYet, StudyRun, SweepContext, SweepOptions, TrainedTarget
from mutransfer._sweep.rescale import transfer_phase
from mutransfer._sweep.target import TargetOutcome


def _context(tmp_path) -> SweepContext:
    study, _ = load_study(None)
    return SweepContext(SweepOptions(quiet=True), study, StudyDir(tmp_path / "s"), [], "sqlite:///x.db", "", {}, 0)


@pytest.mark.parametrize(
    ("read", "step"),
    [
        (lambda c: c.data, "_load_data"),
        (lambda c: c.selection_data, "_load_data"),
        (lambda c: c.parent_id, "_open_parent_run"),
        (lambda c: c.experiment_id, "_open_parent_run"),
        (lambda c: c.proxies, "run_proxies"),
        (lambda c: c.transfer, "transfer_phase"),
        (lambda c: c.target, "train_target"),
        (lambda c: c.target_run_id, "train_target"),
    ],
)
def test_a_record_read_before_its_step_names_the_step(tmp_path, read, step):
    with pytest.raises(NotMadeYet, match=step):
        read(_context(tmp_path))


def test_a_phase_placed_before_the_proxies_is_refused_by_name_not_an_attribute_error(tmp_path):
    """The transfer phase run first (a strategy that placed a phase wrongly) fails on the missing proxies, in words."""
    with pytest.raises(NotMadeYet, match="the proxies' results is read before the proxy phase"):
        transfer_phase(_context(tmp_path))


def test_a_record_once_made_is_read_as_made(tmp_path):
    ctx = _context(tmp_path)
    outcome = TargetOutcome("completed", 0.25, 2)
    ctx.run, ctx.trained = StudyRun("e1", "p1"), TrainedTarget(outcome, "r1")
    assert (ctx.experiment_id, ctx.parent_id, ctx.target, ctx.target_run_id) == ("e1", "p1", outcome, "r1")
    assert ctx.data_channels == (1, 1)  # before the data are read: the lower bound the plans start from
