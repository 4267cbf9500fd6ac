"""Defaults of the sweep's checks, declared once (the CLI's flags, ``SweepOptions`` and the summary's cost hints),
and the checks the CLI and the Python API share that import nothing heavy."""

from __future__ import annotations

from mutransfer.errors import UserInputError

#: sweep --verify's grid: LRs around the transferred one (--verify-points), seeds at each (--verify-seeds)
VERIFY_POINTS, VERIFY_SEEDS = 5, 3
#: their bounds: an optimum needs 3 LRs; more than 41 points (10 decades) or 100 seeds is a typo, not a grid
MIN_VERIFY_POINTS, MAX_VERIFY_POINTS, MAX_VERIFY_SEEDS = 3, 41, 100


def check_model_name(value: object, field: str = "--register") -> str:
    """A model registry name MLflow accepts (not blank, no '/' or ':'), stripped; else a one-line UserInputError
    naming ``field``."""
    name = value.strip() if isinstance(value, str) else ""
    if not name or "/" in name or ":" in name or name in (".", ".."):
        named = f"{field} " if field else ""
        raise UserInputError(
            f"{named}{value!r:.60} is not a model name; use letters, digits, '-', '_' or '.', without '/' or ':' "
            "(e.g. burgers-fno)"
        )
    return name


def check_verify_points(points: int) -> None:
    """--verify-points: enough learning rates for an optimum (:data:`MIN_VERIFY_POINTS`); else one line."""
    if points < MIN_VERIFY_POINTS:
        raise UserInputError(
            f"--verify-points {points}: an optimum needs at least {MIN_VERIFY_POINTS} LRs; use {VERIFY_POINTS} (the "
            "default) or more"
        )
