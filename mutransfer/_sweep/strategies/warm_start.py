"""The warm start as a strategy (``sweep --warm-start STUDY``; mutransfer._sweep.warm_start, warm_plan).

It has no phase of its own: ``prepare`` reads the source (or, on resume, the stored warm start); its record
seeds the proxy search's first trials (``seed_trials``) and tags their MLflow runs with their source (``trial_tags``). Report key ``warm_start`` (the provenance of the warm trials, after the target).
"""

from __future__ import annotations

from typing import Any

from mutransfer._sweep.session import Made, Prepared, Session
from mutransfer._sweep.strategies.base import Strategy, number
from mutransfer._sweep.warm_plan import (
    NAME,
    WARM_TAG_FROM,
    WarmStart,
    resolve_warm_start,
    start_warm,
    warm_start_section,
)


def warm_start_lines(w: dict | None) -> list[str]:
    """The warm start's provenance (mutransfer._sweep.warm_plan): which trials came from which source trials."""
    if not w:
        return []
    lines = ["", f"warm start from study {w['source']} ({w['location']}): {w['trials']} trial(s)"]
    for row in w["from_source"]:
        lines.append(
            f"  {row['trial_id']} <- {row['source_trial']}: val rel. L2 {number(row['val_error'])} here "
            f"({row['status'] or '-'}), {number(row['source_error'])} there; "
            f"effective LR x {row['lr_factor']:.4g}"
        )
    return lines + [f"  note: {note}" for note in w["notes"]]


class WarmStartStrategy(Strategy):
    name = NAME
    report_key = "warm_start"

    def active(self, study: Prepared) -> bool:
        return study.record(NAME, WarmStart) is not None

    def prepare(self, study: Prepared) -> WarmStart | None:
        return resolve_warm_start(study.options, study.study, study.tracking_uri, study.state)  # refusals: one line

    def seed_trials(self, session: Session) -> list[tuple[dict, dict]]:
        return start_warm(session)  # asked for the study's own search only (mutransfer._sweep.proxies)

    def trial_tags(self, study: Prepared) -> dict[str, dict[str, str]]:
        warm = study.record(NAME, WarmStart)
        if warm is None:
            return {}
        return {key: {WARM_TAG_FROM: source} for key, source in warm.sources().items()}

    def section(self, made: Made) -> dict | None:
        return warm_start_section(
            made.record(NAME, WarmStart), made.made_proxies.trials if made.made_proxies is not None else []
        )

    def text_lines(self, section: Any, report: dict) -> list[str]:
        return warm_start_lines(section)
