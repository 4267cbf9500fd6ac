"""Search strategies as plug-ins (mutransfer._sweep.strategies): a toy strategy registered from a test reaches the
sweep's phase order, its resume, the report (JSON, text, cost), the HTML page's sections and the parent run's
metrics, without a line of the sweep naming it; it is unregistered afterwards.

No Ray and no training: the session and what the steps made are made by hand, as the steps would have left them
before the report.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from types import SimpleNamespace

import pytest
import torch

from mutransfer._study import load_study
from mutransfer._study_folder.records import TrialRecord
from mutransfer._study_folder.state import StudyDir
from mutransfer._sweep import strategies
from mutransfer._sweep._memo import Memo, remembered
from mutransfer._sweep.context import (
    ProxyResults,
    StudyData,
    TrainedTarget,
    TransferResult,
    pick_best,
)
from mutransfer._sweep.finish import _build
from mutransfer._sweep.report import format_report
from mutransfer._sweep.runner import PHASES
from mutransfer._sweep.session import Made, Prepared, Session
from mutransfer._sweep.strategies import CostShare, Placement, Strategy
from mutransfer._sweep.target import TargetOutcome
from tests.sweep_helpers import prepared_by_hand, session_by_hand


@dataclass
class AuditRecord:
    """The toy's record: the transferred LR it saw."""

    lr: float

    def as_dict(self) -> dict:
        return asdict(self)


class Audit(Strategy):
    """A toy strategy: a phase after the transfer, a record kept in state.json, a report section, one extra
    training of 2 s after the target, a page section and a metric."""

    name = "audit"
    report_key = "audit"

    def __init__(self):
        self.calls = 0

    def active(self, study: Prepared) -> bool:
        return True

    def phases(self) -> tuple[Placement, ...]:
        def audit_phase(session: Session, made: Made) -> Made:
            def audit() -> AuditRecord:
                self.calls += 1
                return AuditRecord(float(made.transfer.hp["lr"]))

            memo = Memo(self.name, lambda d: AuditRecord(**d), AuditRecord.as_dict)
            return made.with_record(self.name, remembered(session, memo, {"hp": made.transfer.hp}, audit))

        return (Placement("transfer_phase", audit_phase),)

    def section(self, made: Made) -> dict | None:
        record = made.record(self.name, AuditRecord)
        return record.as_dict() if record is not None else None

    def count_cost(self, compute: dict, section) -> CostShare:
        if not section:
            return CostShare()
        compute["audit_trainings"] = 1
        return CostShare(target=2.0)

    def text_lines(self, section, report: dict) -> list[str]:
        return ["", f"audit: the transferred lr {section['lr']:.3g}"] if section else []

    def html_section(self, section) -> str:
        return f'<section id="audit"><h2>Audit</h2><p>lr {section["lr"]}</p></section>'

    def metrics(self, section, timestamp_ms: int) -> list[tuple]:
        return [("audit_lr", section["lr"], timestamp_ms, 0)] if section else []


@pytest.fixture
def audit():
    toy = strategies.register(Audit())
    try:
        yield toy
    finally:
        strategies.unregister(toy.name)
    assert strategies.by_name("audit") is None


def _trial(i: int, error: float) -> TrialRecord:
    hp = {"lr": 1e-3 * (i + 1), "batch_size": 20, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0, "init_scale": 1.0}
    return TrialRecord(
        f"t{i:04d}", i, "completed", {"lr": hp["lr"]}, hp, error, 2, trainer_seconds=1.0, device_seconds=2.0
    )


def _context(root, state: dict) -> tuple[Session, Made]:
    """A session and what its steps made before the report: proxies, transfer, target, data."""
    from mutransfer._sweep.rescale import transfer

    study, _ = load_study(None)
    StudyDir(root).root.mkdir(parents=True, exist_ok=True)
    fit = SimpleNamespace(train_x=torch.zeros(4, 64, 1))
    session = session_by_hand(prepared_by_hand(study, root, state), StudyData(fit, fit, fit, root / "data.h5"))
    trials = [_trial(0, 0.3), _trial(1, 0.2)]
    proxies = ProxyResults(trials, pick_best(trials), 1, seconds=4.0)
    record, hp = transfer(study, proxies.best)
    target = TargetOutcome("completed", 0.1, 2, trainer_seconds=1.5, wall_seconds=4.0, device_seconds=4.0)
    return session, Made(
        made_proxies=proxies,
        made_transfer=TransferResult(record, hp, proxies.best, proxies.best.trial_id),
        trained=TrainedTarget(target, "target-run"),
    )


def test_the_registry_holds_the_five_strategies_in_order():
    assert [s.name for s in strategies.STRATEGIES] == [
        "ladder",
        "top_k",
        "verification",
        "direct_baseline",
        "warm_start",
    ]


def test_a_registered_strategy_runs_after_its_anchor_and_resumes_from_its_record(tmp_path, audit):
    session, made = _context(tmp_path / "study", {})
    order = strategies.ordered_phases(PHASES, session)
    names = [name for name, _ in order]
    assert names.index("audit_phase") == names.index("transfer_phase") + 1
    assert names[:3] == ["run_proxies", "climb_ladder", "transfer_phase"] and names[-1] == "write_report"
    after = dict(order)["audit_phase"](session, made)
    assert audit.calls == 1 and after.records["audit"] == AuditRecord(made.transfer.hp["lr"])
    assert "audit" not in made.records  # the step returned its record; what it was given is unchanged
    state = json.loads((tmp_path / "study" / "state.json").read_text())
    assert state["audit"] == {"lr": made.transfer.hp["lr"]}

    resumed, again = _context(tmp_path / "study", StudyDir(tmp_path / "study").read_state())  # a new driver, --resume
    restored = dict(strategies.ordered_phases(PHASES, resumed))["audit_phase"](resumed, again)
    assert audit.calls == 1 and restored.records["audit"] == after.records["audit"]  # restored, not run again


def test_a_registered_strategy_reaches_the_report_text_cost_page_and_metrics(tmp_path, audit):
    plain = _build(*_context(tmp_path / "plain", {}), 20.0)
    session, made = _context(tmp_path / "study", {})
    report = _build(session, made.with_record("audit", AuditRecord(0.002)), 20.0)
    assert report["audit"] == {"lr": 0.002} and plain["audit"] is None
    for key in ("rungs", "top_k", "verification", "direct_baseline", "warm_start"):  # the others did not run
        assert report[key] is None
    c = report["compute"]
    assert c["audit_trainings"] == 1
    assert c["trainer_seconds_critical_path"] == pytest.approx(plain["compute"]["trainer_seconds_critical_path"] + 2.0)
    text = format_report(json.loads(json.dumps(report)))
    assert "audit: the transferred lr 0.002" in text and "audit:" not in format_report(plain)
    assert text.index("audit:") > text.index("target (")  # a "result" section: after the target
    assert strategies.html_sections(report, {}) == ['<section id="audit"><h2>Audit</h2><p>lr 0.002</p></section>']
    assert strategies.html_sections(None, {"audit": {"lr": 0.5}})[0].endswith("<p>lr 0.5</p></section>")  # mid-study
    assert ("audit_lr", 0.002, 7, 0) in strategies.metrics(report, 7) and strategies.metrics(plain, 7) == []


def test_the_page_gets_the_sections_from_its_caller(tmp_path, audit):
    """mutransfer._reporting.html draws what its caller passes in (it imports nothing of the sweep)."""
    from mutransfer._reporting.html import render_report

    files = SimpleNamespace(
        report=None,
        state={},
        name="toy",
        phase="proxies",
        root=tmp_path,
        notes=[],
        study={},
        search_space={},
        study_text="",
        trials={},
        target_history=[],
    )
    page = render_report(files, strategies.html_sections(None, {"audit": {"lr": 0.5}}))
    assert '<section id="audit">' in page and page.index('id="audit"') < page.index("<h2>Compute</h2>")


def test_the_wall_line_counts_populations_where_the_proxies_trained_as_populations(tmp_path):
    """One trial at a time is said in trials; a population executor's lanes are populations (its summary says how
    many trials each held), not trials."""
    report = json.loads(json.dumps(_build(*_context(tmp_path / "study", {}), 20.0)))
    assert "proxies 4.0 s, 1 at a time, target" in format_report(report)
    together = dict(report, search_summary="population executor: 2 of 2 trials trained in 1 population(s) (2 each)")
    assert "proxies 4.0 s, 1 population(s) at a time, target" in format_report(together)
