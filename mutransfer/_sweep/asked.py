"""What a study was asked to measure when it started, kept in ``state.json``'s ``asked``: the coordinate check,
the verification (its points and seeds) and the direct baseline (``mutransfer sweep``'s ``--coord-check``,
``--verify``, ``--baseline direct``; the Python API's :class:`~mutransfer.CoordCheck`, :class:`~mutransfer.Verify`,
:class:`~mutransfer.DirectBaseline`). A resume that does not ask for them again runs them as first asked, and says
so once: a shorter command (``--resume`` alone, ``mt.load_study(name)``) never drops a measurement the study was
started for. A resume may ask for more; what it asks then is kept too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mutransfer._config.checks import MAX_VERIFY_POINTS, MAX_VERIFY_SEEDS, MIN_VERIFY_POINTS
from mutransfer._sweep.context import SweepOptions
from mutransfer.errors import UserInputError

#: state.json's key
ASKED_KEY = "asked"
#: what it holds
_FIELDS = ("coord_check", "verify", "verify_points", "verify_seeds", "baseline")


def asked(options: SweepOptions) -> dict:
    """What ``options`` ask to measure, as ``state.json`` keeps it."""
    return {
        "coord_check": bool(options.coord_check),
        "verify": bool(options.verify),
        "verify_points": int(options.verify_points),
        "verify_seeds": int(options.verify_seeds),
        "baseline": options.baseline,
    }


def with_asked(options: SweepOptions, state: dict, path: Path) -> tuple[SweepOptions, list[str]]:
    """``options`` with what the study was asked for when it started and this resume does not ask again, and a note
    for each; a stored value of the wrong shape is a one-line UserInputError naming ``path``."""
    stored = state.get(ASKED_KEY)
    if stored is None:  # a study started before this was kept: as asked now
        return options, []
    _check(stored, path)
    notes = []
    coord_check, verify, points, seeds = (
        options.coord_check,
        options.verify,
        options.verify_points,
        options.verify_seeds,
    )
    baseline = options.baseline
    if stored["coord_check"] and not coord_check:
        coord_check = True
        notes.append("--coord-check")
    if stored["verify"] and not verify:
        verify, points, seeds = True, stored["verify_points"], stored["verify_seeds"]
        notes.append(f"--verify (--verify-points {points} --verify-seeds {seeds})")
    if stored["baseline"] is not None and baseline is None:
        baseline = stored["baseline"]
        notes.append(f"--baseline {baseline}")
    lines = [f"note: the study was started with {what}: it runs on this resume too" for what in notes]
    again = dataclasses.replace(
        options, coord_check=coord_check, verify=verify, verify_points=points, verify_seeds=seeds, baseline=baseline
    )
    return again, lines


def _check(stored: object, path: Path) -> None:
    fix = "restore the file from a copy (a sweep under another --name starts afresh)"
    ok = isinstance(stored, dict) and set(stored) == set(_FIELDS)
    if ok:
        assert isinstance(stored, dict)
        ok = (
            isinstance(stored["coord_check"], bool)
            and isinstance(stored["verify"], bool)
            and _whole(stored["verify_points"], MIN_VERIFY_POINTS, MAX_VERIFY_POINTS)
            and _whole(stored["verify_seeds"], 1, MAX_VERIFY_SEEDS)
            and stored["baseline"] in (None, "direct")
        )
    if not ok:
        raise UserInputError(
            f"{path}: field {ASKED_KEY!r} must map coord_check and verify to true/false, verify_points to "
            f"{MIN_VERIFY_POINTS}..{MAX_VERIFY_POINTS}, verify_seeds to 1..{MAX_VERIFY_SEEDS} and baseline to null or "
            f"'direct'; {fix}"
        )


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
