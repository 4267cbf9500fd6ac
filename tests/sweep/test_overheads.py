"""The overhead breakdown: each part is what its definition says, and a slow start-up shows where it happened."""

import pytest

from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.overheads import describe, overheads


def trial(wall: float, trainer: float) -> TrialRecord:
    return TrialRecord(
        "t", 1, "completed", {}, {}, 0.1, 5, trainer_seconds=trainer, wall_seconds=trainer, span_seconds=wall
    )


def breakdown(trials, **kw):
    args = dict(
        concurrency=2,
        setup_seconds=5.0,
        proxy_phase_seconds=20.0,
        target_wall_seconds=12.0,
        target_trainer_seconds=10.0,
        wall_seconds=40.0,
    )
    return overheads(trials, **{**args, **kw})


def test_the_parts_add_up_and_each_is_its_definition():
    o = breakdown([trial(10, 8), trial(10, 8), trial(16, 14)])
    assert o["trial_startup_seconds"] == pytest.approx(6 / 2)  # 2 s per trial, two lanes
    assert o["trial_startup_mean_seconds"] == pytest.approx(2.0)
    assert o["proxy_scheduling_seconds"] == pytest.approx(20 - 36 / 2)
    assert o["target_startup_seconds"] == pytest.approx(2.0)
    assert o["other_seconds"] == pytest.approx(40 - 5 - 20 - 12)
    assert o["fixed_seconds"] == pytest.approx(5 + 3 + 2 + 2) and o["fixed_share"] == pytest.approx(12 / 40)
    assert "fixed overhead 12.0 s = 30% of the wall time" in describe(o)


def test_a_slow_start_is_charged_to_its_own_part():
    """The breakdown can tell the overheads apart: a trial start-up 10 s slower moves only that part."""
    fast = breakdown([trial(10, 8), trial(10, 8)])
    slow = breakdown([trial(20, 8), trial(10, 8)], proxy_phase_seconds=25.0, wall_seconds=45.0)
    assert slow["trial_startup_seconds"] - fast["trial_startup_seconds"] == pytest.approx(5.0)
    assert slow["target_startup_seconds"] == fast["target_startup_seconds"]
    assert slow["setup_seconds"] == fast["setup_seconds"]
    slow_target = breakdown([trial(10, 8), trial(10, 8)], target_wall_seconds=22.0, wall_seconds=50.0)
    assert slow_target["target_startup_seconds"] - fast["target_startup_seconds"] == pytest.approx(10.0)
    assert slow_target["trial_startup_seconds"] == fast["trial_startup_seconds"]


def test_without_the_phase_times_there_is_no_breakdown():
    assert breakdown([trial(10, 8)], setup_seconds=None) is None
    assert breakdown([trial(10, 8)], wall_seconds=0.0) is None


def test_the_line_says_how_much_of_the_targets_start_up_ran_beside_the_proxies():
    early = breakdown([trial(10, 8)], target_head_start_seconds=4.2)
    assert ", after 4.2 s started beside the last proxies" in describe(early)
    assert early["target_startup_seconds"] == pytest.approx(2.0)  # the head start is not counted again
    assert "beside the last proxies" not in describe(breakdown([trial(10, 8)]))
