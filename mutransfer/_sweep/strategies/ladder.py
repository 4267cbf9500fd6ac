"""The model-size ladder as a strategy (study field ``ladder``): rungs after the proxies (mutransfer._sweep.ladder).

Its phase, ``climb_ladder``, runs after the proxies; the ladder's last rung becomes the search the transfer and
top-k draw from (``Made.final_search``). Report key ``rungs`` (a table after the best proxy); the rungs above the
proxies count on μTransfer's side of the cost, beside the proxies.
"""

from __future__ import annotations

from typing import Any

from mutransfer._sweep.cost import add_to_mutransfer
from mutransfer._sweep.ladder import NAME, LadderResults, climb_ladder, rung_lines, rung_metrics
from mutransfer._sweep.session import Made, Prepared, Session
from mutransfer._sweep.strategies.base import CostShare, ExtraCosts, Placement, Strategy


def count_ladder(compute: dict, rungs: list[dict]) -> float:
    """Add the rungs above the proxies to muTransfer's cost (device-seconds, FLOPs, training time and the
    ratios to direct tuning); returns their training time (trainer seconds x devices)."""
    extra = [r["cost"] for r in rungs[1:]]
    training = sum(c.get("trainer_device_seconds") or 0.0 for c in extra)
    compute["ladder_device_seconds"] = sum(c["device_seconds"] for c in extra)
    compute["ladder_trainer_device_seconds"] = training
    compute["ladder_flops"] = None if any(c.get("flops") is None for c in extra) else sum(c["flops"] for c in extra)
    add_to_mutransfer(compute, compute["ladder_flops"], training)
    return training


class Ladder(Strategy):
    name = NAME
    report_key = "rungs"
    text_place = "search"

    def active(self, study: Prepared) -> bool:
        return bool(study.study.ladder_sizes())

    def phases(self) -> tuple[Placement, ...]:
        return (Placement("run_proxies", climb_ladder),)

    def section(self, made: Made) -> list[dict] | None:
        ladder = made.record(NAME, LadderResults)
        return ladder.summaries() if ladder is not None else None

    def count_cost(self, compute: dict, section: Any) -> CostShare:
        return CostShare(search=count_ladder(compute, section)) if section else CostShare()

    def extra_costs(self, session: Session, made: Made) -> ExtraCosts:
        ladder = made.record(NAME, LadderResults)
        return ExtraCosts(search=tuple(ladder.extra_cost())) if ladder is not None else ExtraCosts()

    def text_lines(self, section: Any, report: dict) -> list[str]:
        return rung_lines(section)

    def metrics(self, section: Any, timestamp_ms: int) -> list[tuple]:
        return [(name, value, timestamp_ms, 0) for name, value in rung_metrics(section)]
