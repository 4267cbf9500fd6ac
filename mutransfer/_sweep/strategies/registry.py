"""The registered strategies and the loops the sweep runs over them.

``STRATEGIES`` is filled, in order, by mutransfer._sweep.strategies (its ``__init__``); the order is the order of
their phases after one anchor, of their report sections, text lines, costs and metrics. This module imports no
strategy, so a strategy's own module may use these loops (the direct baseline counts the others' trainings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep._ledger import Booking, booked_cost, tagged_bookings
from mutransfer._sweep.context import StrategyRecord
from mutransfer._sweep.cost import add_to_mutransfer
from mutransfer._sweep.session import Made, Prepared, Session
from mutransfer._sweep.strategies.base import CostShare, ExtraCosts, Phase, Strategy, run_phase

#: every strategy the sweep knows, in order
STRATEGIES: list[Strategy] = []


def register(strategy: Strategy) -> Strategy:
    """Add ``strategy`` (last); a strategy of the same name is replaced in its place."""
    for i, known in enumerate(STRATEGIES):
        if known.name == strategy.name:
            STRATEGIES[i] = strategy
            return strategy
    STRATEGIES.append(strategy)
    return strategy


def unregister(name: str) -> None:
    """Remove the strategy called ``name`` (nothing when none is)."""
    STRATEGIES[:] = [s for s in STRATEGIES if s.name != name]


def by_name(name: str) -> Strategy | None:
    return next((s for s in STRATEGIES if s.name == name), None)


def prepare_strategies(study: Prepared) -> dict[str, StrategyRecord]:
    """Every strategy's ``prepare`` (mutransfer._sweep.prepare, before any compute); the records they know up front,
    by strategy name."""
    found = {s.name: s.prepare(study) for s in STRATEGIES}
    return {name: record for name, record in found.items() if record is not None}


def seed_trials(session: Session) -> list[tuple[dict, dict]]:
    """The active strategies' first trials of the study's own search (mutransfer._sweep.plan.SearchPlan's
    ``seeds``)."""
    return [seed for s in STRATEGIES if s.active(session) for seed in s.seed_trials(session)]


def trial_tags(study: Prepared) -> dict[str, dict[str, str]]:
    """The active strategies' extra MLflow tags of the study's own search's trials, by trial key."""
    tags: dict[str, dict[str, str]] = {}
    for s in STRATEGIES:
        if s.active(study):
            for key, more in s.trial_tags(study).items():
                tags.setdefault(key, {}).update(more)
    return tags


def ordered_phases(core: tuple[Phase, ...], study: Prepared, *, only_active: bool = False) -> list[tuple[str, Phase]]:
    """(hold-point name, phase) in the order the sweep runs them: each core phase (or the active strategy's phase
    that replaces it), then the strategies' phases placed after it (``only_active``: the active strategies' only;
    otherwise every strategy's, each of which does nothing when its strategy is not active)."""
    out: list[tuple[str, Phase]] = []
    for phase in core:
        anchor = phase.__name__
        instead = [
            (s, p)
            for s in STRATEGIES
            for p in s.phases()
            if p.anchor == anchor and p.where == "instead" and s.active(study)
        ]
        if instead:
            strategy, placement = instead[0]
            phase = run_phase(strategy, placement.phase)
        out.append((anchor, phase))
        out += [
            (p.phase.__name__, run_phase(s, p.phase))
            for s in STRATEGIES
            for p in s.phases()
            if p.anchor == anchor and p.where == "after" and (s.active(study) or not only_active)
        ]
    return out


def sections(made: Made) -> dict[str, Any]:
    """Every strategy's report value, by its report key (None for one that did not run)."""
    return {s.report_key: s.section(made) for s in STRATEGIES}


def _counts_itself(s: Strategy) -> bool:
    """Whether ``s`` counts its trainings in its own words (overrides ``count_cost``), not from its bookings."""
    return type(s).count_cost is not Strategy.count_cost


def count_costs(compute: dict, values: dict[str, Any], bookings: Sequence[Booking] = ()) -> CostShare:
    """Every strategy's trainings added to the report's ``compute``; the sum of what they add to the critical path.

    A strategy that counts its trainings itself (``count_cost``) does; any other's booked trainings
    (mutransfer._sweep._ledger) go to ``compute["strategy_costs"][name]`` and, on μTransfer's side
    (``cost_side``), into the ratios to direct tuning."""
    search = target = 0.0
    booked: dict[str, dict] = {}
    for s in STRATEGIES:
        share = s.count_cost(compute, values.get(s.report_key)) if _counts_itself(s) else None
        if share is None:
            mine = tagged_bookings(bookings, s.name)
            if not mine:
                continue
            cost = dict(booked_cost(mine), side=s.cost_side)
            booked[s.name] = cost
            if s.cost_side != "mutransfer":
                continue
            add_to_mutransfer(compute, cost["flops"], cost["trainer_device_seconds"])
            share = CostShare(cost["search_trainer_seconds"], cost["target_trainer_seconds"])
        search, target = search + share.search, target + share.target
    if booked:
        compute["strategy_costs"] = booked
    return CostShare(search, target)


def _booked_extra(bookings: Sequence[Booking]) -> ExtraCosts:
    """Bookings as the direct baseline's cost records: trials before the target, other trainings after it."""

    def record(b: Booking) -> dict:
        return {
            "device_seconds": b.device_seconds,
            "trainer_device_seconds": b.trainer_device_seconds,
            "overhead_device_seconds": max(0.0, b.device_seconds - b.trainer_device_seconds),
            "flops": b.flops,
        }

    return ExtraCosts(
        tuple(record(b) for b in bookings if b.kind == "trial"),
        tuple(record(b) for b in bookings if b.kind != "trial"),
    )


def extra_costs(session: Session, made: Made) -> ExtraCosts:
    """Every strategy's trainings on μTransfer's side as measured cost records, before and after the target: its own
    (``extra_costs``) where it counts them itself, else its bookings (mutransfer._sweep._ledger)."""
    bookings = session.executor.ledger.bookings()
    parts = [
        s.extra_costs(session, made)
        if _counts_itself(s)
        else _booked_extra(tagged_bookings(bookings, s.name) if s.cost_side == "mutransfer" else [])
        for s in STRATEGIES
    ]
    return ExtraCosts(tuple(c for p in parts for c in p.search), tuple(c for p in parts for c in p.target))


def gain_source(values: dict[str, Any], trials: list[TrialRecord], best: TrialRecord | None) -> TrialRecord | None:
    """The proxy trial the target is compared with, after every strategy had its say."""
    for s in STRATEGIES:
        best = s.gain_source(values.get(s.report_key), values, trials, best)
    return best


def refine_gain(gain: dict, values: dict[str, Any], best: TrialRecord) -> None:
    for s in STRATEGIES:
        s.refine_gain(gain, values.get(s.report_key), best)


def text_lines(report: dict, place: str) -> list[str]:
    """The strategies' lines of the text report at ``place`` ("search" or "result")."""
    return [
        line for s in STRATEGIES if s.text_place == place for line in s.text_lines(report.get(s.report_key), report)
    ]


def verdicts(report: dict) -> list[str]:
    """The strategies' findings in words, for the summary (those that ran and have one)."""
    out = []
    for s in STRATEGIES:
        section = report.get(s.report_key)
        text = s.verdict(section, report) if section else None
        if text:
            out.append(text)
    return out


def suggestions(report: dict) -> list[tuple[str, str]]:
    """(flag, what it adds and, where known, what it would cost) of the strategies that did not run and have
    something to offer."""
    return [
        (s.flag, s.suggestion + (f"; {s.cost_hint(report)}" if s.cost_hint(report) else ""))
        for s in STRATEGIES
        if s.flag and s.suggestion and not report.get(s.report_key)
    ]


def html_sections(report: dict | None, state: dict) -> list[str]:
    """The strategies' sections of the HTML page, from the report (or ``state.json`` while the study runs)."""
    out = []
    for s in STRATEGIES:
        value = (report or {}).get(s.report_key) or state.get(s.name)
        if value:
            html = s.html_section(value)
            if html:
                out.append(html)
    return out


def metrics(report: dict, timestamp_ms: int) -> list[tuple]:
    """The strategies' metrics for the MLflow parent run."""
    return [m for s in STRATEGIES for m in s.metrics(report.get(s.report_key), timestamp_ms)]


def asked_but_missing(study: Prepared, report: dict) -> list[str]:
    """The flags asking for a strategy that a completed study's report does not have."""
    return [s.flag for s in STRATEGIES if s.flag and s.active(study) and not report.get(s.report_key)]
