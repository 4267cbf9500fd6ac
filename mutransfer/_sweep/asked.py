"""What a study was asked to measure when it started, kept in ``state.json``'s ``asked``: the coordinate check,
the verification (its points and seeds) and the direct baseline (``mutransfer sweep``'s ``--coord-check``,
``--verify``, ``--baseline direct``; the Python API's :class:`~mutransfer.CoordCheck`, :class:`~mutransfer.Verify`,
:class:`~mutransfer.DirectBaseline`). A resume that does not ask for them again runs them as first asked, and says
so once: a shorter command (``--resume`` alone, ``mt.load_study(name)``) never drops a measurement the study was
started for. A resume may ask for more; what it asks then is kept too. A verification the study finished is read
back as it ran (:func:`with_finished_grid`), whatever grid a resume asks.
"""

from __future__ import annotations

import dataclasses

from mutransfer._study_folder.state import ASKED_FIELDS
from mutransfer._sweep._memo import INPUTS_KEY
from mutransfer._sweep.context import SweepOptions
from mutransfer._sweep.verify import NAME

#: state.json's key (its fields: ASKED_FIELDS, their shapes checked when the file is read)
ASKED_KEY = "asked"


def asked(options: SweepOptions) -> dict:
    """What ``options`` ask to measure, as ``state.json`` keeps it (the fields of ASKED_FIELDS)."""
    return {field: getattr(options, field) for field in ASKED_FIELDS}


def with_asked(options: SweepOptions, state: dict) -> tuple[SweepOptions, list[str]]:
    """``options`` with what the study was asked for when it started and this resume does not ask again, and a note
    for each."""
    stored = state.get(ASKED_KEY)  # its shape checked when state.json was read (study_folder.state.check_state)
    if stored is None:  # a study started before this was kept: as asked now
        return options, []
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


def with_finished_grid(options: SweepOptions, state: dict) -> tuple[SweepOptions, list[str]]:
    """A resumed study whose verification finished reads it back as it ran: ``options`` with its points and seeds
    (whatever this resume asks), and a note when they differ. Before anything is written: the step's inputs then
    match what it was made from (mutransfer._sweep._memo)."""
    done = (state.get(INPUTS_KEY) or {}).get(NAME)
    if not options.verify or not state.get(NAME) or not isinstance(done, dict):
        return options, []
    points, seeds = done.get("points"), done.get("seeds")
    if not isinstance(points, int) or not isinstance(seeds, int):  # not written by the step: its memo refuses it
        return options, []
    if (points, seeds) == (options.verify_points, options.verify_seeds):
        return options, []
    note = (
        f"note: the study's verification finished with --verify-points {points} --verify-seeds {seeds}: it is read "
        "back as it ran (another grid: a new study with --verify and --name NEW)"
    )
    return dataclasses.replace(options, verify_points=points, verify_seeds=seeds), [note]
