"""Top-k to the target as a strategy (``search.top_k`` > 1, ``sweep --top-k N``; mutransfer._sweep.topk).

Its phase runs instead of the core ``train_target``: the N best trials each trained at the target, the winner
becomes the target. Report key ``top_k`` (a table after the target); the candidates other than the winner count on
μTransfer's side of the cost, after the target, and the gain compares the target with the winner's own proxy.
"""

from __future__ import annotations

from typing import Any

from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.cost import target_cost
from mutransfer._sweep.session import Made, Prepared, Session
from mutransfer._sweep.strategies.base import CostShare, ExtraCosts, Placement, Strategy
from mutransfer._sweep.topk import NAME, TopK, count_top_k, topk_lines, topk_metrics, train_top_k, winner_proxy
from mutransfer._sweep.train_target import fit_target


def top_k_phase(session: Session, made: Made) -> Made:
    """Train the candidates at the target with the core target's training (mutransfer._sweep.train_target)."""
    return train_top_k(session, made, fit_target)


class TopKStrategy(Strategy):
    name = NAME
    report_key = "top_k"

    def active(self, study: Prepared) -> bool:
        return study.study.search.top_k > 1

    def phases(self) -> tuple[Placement, ...]:
        return (Placement("train_target", top_k_phase, "instead"),)

    def section(self, made: Made) -> list[dict] | None:
        record = made.record(NAME, TopK)
        return record.rows() if record is not None and record.candidates else None

    def count_cost(self, compute: dict, section: Any) -> CostShare:
        return CostShare(target=count_top_k(compute, section)) if section else CostShare()

    def extra_costs(self, session: Session, made: Made) -> ExtraCosts:
        record = made.record(NAME, TopK)
        if record is None:
            return ExtraCosts()
        shape = tuple(session.data.train_x.shape[1:])
        return ExtraCosts(target=tuple(target_cost(session.study, c.outcome, shape) for c in record.others()))

    def gain_source(
        self, section: Any, sections: dict, trials: list[TrialRecord], best: TrialRecord | None
    ) -> TrialRecord | None:
        # the target is the winner: its own proxy is compared with it; with a ladder the candidates are the last
        # rung's trials and the gain stays the best proxy's
        if section and not sections.get("rungs"):
            return winner_proxy(trials, section, best)
        return best

    def text_lines(self, section: Any, report: dict) -> list[str]:
        return topk_lines(section, report["compute"])

    def metrics(self, section: Any, timestamp_ms: int) -> list[tuple]:
        return topk_metrics(section, timestamp_ms)
