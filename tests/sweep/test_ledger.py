"""The cost ledger (mutransfer._sweep._ledger): every training goes through the study's executor, which books it.

A toy strategy with no cost code of its own trains the target twice more after the study's target; the report's
ratios to direct tuning grow by exactly those trainings. The same toy saying its trainings are a check leaves the
ratios as they were (the check above can fail). Trained in process (the in-process executor is a real one: it
trains), on the tiny Burgers study.
"""

from __future__ import annotations

import json

import pytest

from mutransfer._sweep import strategies
from mutransfer._sweep._executors import TargetJob
from mutransfer._sweep._ledger import LEDGER_FILE, Booking, Ledger
from mutransfer._sweep.cost import model_epoch_flops
from mutransfer._sweep.session import Made, Prepared, Session
from mutransfer._sweep.strategies import Placement, Strategy
from tests.sweep_helpers import write_tiny_study

pytestmark = pytest.mark.slow

#: the toy's extra trainings of the target
EXTRA = 2


class Retrain(Strategy):
    """Trains the target ``EXTRA`` more times after the study's own, through the study's executor; no cost code."""

    name = "retrain"
    report_key = "retrain"

    def __init__(self, cost_side: str = "mutransfer"):
        self.cost_side = cost_side  # type: ignore[assignment]

    def active(self, study: Prepared) -> bool:
        return True

    def phases(self) -> tuple[Placement, ...]:
        def retrain(session: Session, made: Made) -> Made:
            for i in range(EXTRA):
                job = TargetJob(
                    session.study,
                    made.transfer.hp,
                    session.data,
                    session.study_dir.root / "retrain" / str(i),
                    False,
                    session.study.budget.max_failures,
                )
                session.executor.target(job, None)
            return made

        return (Placement("train_target", retrain),)


def _sweep(tmp_path, tiny_data, toy: Strategy | None) -> tuple[dict, list[Booking]]:
    from mutransfer._sweep import SweepOptions, run_sweep

    study = write_tiny_study(tmp_path, tiny_data, name="ledger", trials=2, target_epochs=3)
    if toy is not None:
        strategies.register(toy)
    try:
        report = run_sweep(
            SweepOptions(
                study_path=str(study),
                runs_dir=str(tmp_path / "runs"),
                overrides={"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
                quiet=True,
                executor="inprocess",
            )
        )
    finally:
        if toy is not None:
            strategies.unregister(toy.name)
    return report, Ledger(tmp_path / "runs" / "ledger").bookings()


def _study(tmp_path):
    from mutransfer._study import load_study

    (path,) = tmp_path.glob("*.yaml")
    return load_study(path)[0]


def test_a_strategy_with_no_cost_code_changes_the_ratio_by_exactly_its_trainings(tiny_data, tmp_path):
    report, bookings = _sweep(tmp_path, tiny_data, Retrain())
    c = report["compute"]
    core = [b for b in bookings if b.tag == "core"]
    mine = [b for b in bookings if b.tag == "retrain"]
    # every training the study ran is booked once: its 2 trials and its target under "core", the toy's 2 as its own
    assert sorted(b.key for b in core) == ["t0000", "t0001", "target"]
    assert sorted(b.key for b in mine) == ["retrain/0/target", "retrain/1/target"]
    assert all(b.epochs == 3 and b.kind == "target" for b in mine)
    # the ledger's core bookings are the report's own proxies and target
    assert sum(b.flops for b in core if b.kind == "trial") == pytest.approx(c["proxy_flops"])
    assert next(b.flops for b in core if b.kind == "target") == pytest.approx(c["target_flops"])
    per_epoch = model_epoch_flops(_study(tmp_path), at_target=True)
    assert [b.flops for b in mine] == [pytest.approx(3 * per_epoch)] * EXTRA

    # the ratio: proxies + target + the toy's trainings, over direct tuning
    toy_flops = sum(b.flops for b in mine)
    assert c["mutransfer_vs_direct_flops"] == pytest.approx(
        (c["proxy_flops"] + c["target_flops"] + toy_flops) / c["direct_sweep_flops"]
    )
    assert c["strategy_costs"]["retrain"]["trainings"] == EXTRA
    assert c["strategy_costs"]["retrain"]["flops"] == pytest.approx(toy_flops)
    assert c["strategy_costs"]["retrain"]["side"] == "mutransfer"
    # and the training-time ratio by the toy's training time
    toy_seconds = sum(b.trainer_device_seconds for b in mine)
    plain = c["mutransfer_vs_direct_training_seconds"] - toy_seconds / c["direct_sweep_training_seconds_estimate"]
    target_seconds = next(b.trainer_device_seconds for b in core if b.kind == "target")
    proxy_seconds = sum(b.trainer_device_seconds for b in core if b.kind == "trial")
    assert plain == pytest.approx((proxy_seconds + target_seconds) / c["direct_sweep_training_seconds_estimate"])
    # the report on disk says the same
    on_disk = json.loads((tmp_path / "runs" / "ledger" / "report.json").read_text())
    assert on_disk["compute"]["strategy_costs"]["retrain"]["trainings"] == EXTRA
    assert (tmp_path / "runs" / "ledger" / LEDGER_FILE).exists()


def test_a_strategy_whose_trainings_are_a_check_leaves_the_ratio_as_it_was(tiny_data, tmp_path):
    """The check above can fail: the same trainings, declared a check, are booked but not in the ratio."""
    report, bookings = _sweep(tmp_path, tiny_data, Retrain(cost_side="check"))
    c = report["compute"]
    assert len([b for b in bookings if b.tag == "retrain"]) == EXTRA
    assert c["mutransfer_vs_direct_flops"] == pytest.approx(
        (c["proxy_flops"] + c["target_flops"]) / c["direct_sweep_flops"]
    )
    assert c["strategy_costs"]["retrain"]["side"] == "check"


def test_a_booking_read_back_keeps_the_latest_line_of_each_training_and_skips_a_cut_line(tmp_path):
    ledger = Ledger(tmp_path)
    first = Booking("core", "t0000", "trial", 2, 1.0, 1.5, 10.0, 1.0)
    again = Booking("core", "t0000", "trial", 4, 2.0, 2.5, 20.0, 2.0)  # resumed and trained again
    other = Booking("ladder", "rungs/r1/t0000", "trial", 2, 1.0, 1.0, None, 1.0)
    for b in (first, other, again):
        ledger.book(b)
    with (tmp_path / LEDGER_FILE).open("a") as f:
        f.write('{"tag": "core", "key": "t00')  # a driver killed mid-line
    assert ledger.bookings() == [again, other]
    assert ledger.key(tmp_path / "rungs" / "r1", "t0000") == "rungs/r1/t0000"
    assert ledger.key(tmp_path, "target") == "target"
