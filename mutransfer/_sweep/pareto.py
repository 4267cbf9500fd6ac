"""The Pareto front of a two-objective search (``search.objectives: error+seconds``): the proxy trials no other
trial beats on both the validation error and the training seconds.

Only trials that ran their whole budget are on it (a pruned trial's seconds are a part of a training's, and its
error an early epoch's). The winner the target trains is still the lowest validation error (the front's first
point): the front shows what a cheaper configuration would have cost in error.
"""

from __future__ import annotations

from mutransfer._study_folder.records import TrialRecord


def pareto_front(trials: list[TrialRecord]) -> list[TrialRecord]:
    """The completed trials with an error and measured seconds (0: not measured) that no other such trial
    dominates (lower or equal on both objectives, lower on one), by validation error (then seconds, then index)."""
    points = [t for t in trials if t.status == "completed" and t.val_error is not None and t.trainer_seconds > 0]
    front = [
        t
        for t in points
        if not any(
            o.val_error <= t.val_error  # type: ignore[operator]
            and o.trainer_seconds <= t.trainer_seconds
            and (o.val_error < t.val_error or o.trainer_seconds < t.trainer_seconds)  # type: ignore[operator]
            for o in points
        )
    ]
    return sorted(front, key=lambda t: (t.val_error, t.trainer_seconds, t.index))


def pareto_section(objectives: str, trials: list[TrialRecord]) -> dict | None:
    """The report's ``pareto_front`` (None for a one-objective search): the objectives and the front's trials."""
    if objectives == "error":
        return None
    front = pareto_front(trials)
    return {
        "objectives": ["val_error", "trainer_seconds"],
        "trials": [
            {"trial_id": t.trial_id, "val_error": t.val_error, "trainer_seconds": t.trainer_seconds, "config": t.config}
            for t in front
        ],
        "completed": sum(1 for t in trials if t.status == "completed"),
    }


def pareto_lines(section: dict | None) -> list[str]:
    """The summary's lines for the front (none for a one-objective search)."""
    if not section:
        return []
    points = section["trials"]
    shown = "; ".join(f"{p['trial_id']} {p['val_error']:.4g} in {p['trainer_seconds']:.1f} s" for p in points)
    return [
        f"Pareto front (validation error vs training seconds), {len(points)} of {section['completed']} completed "
        f"trials: {shown or 'none yet'}"
    ]
