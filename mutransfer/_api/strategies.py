"""The search strategies a Python study runs besides its proxy search, as objects passed to
:func:`mutransfer.create_study` (``strategies=[...]``), as Optuna takes its samplers and pruners.

Each is the Python form of a ``mutransfer sweep`` flag, and runs the same phase (mutransfer._sweep.strategies):

========================  =================================  =========================================
object                    flag                               what it adds to the study
========================  =================================  =========================================
:class:`Verify`           ``--verify``                       the target trained on an LR grid around the
                                                             transferred LR, several seeds: is it optimal?
:class:`DirectBaseline`   ``--baseline direct``              the same search run at the target's size
:class:`WarmStart`        ``--warm-start``                   an earlier study's best trials seed the search
:class:`CoordCheck`       ``--coord-check``                  a coordinate check gates the target
========================  =================================  =========================================

Their arguments are checked when they are made: a bad one is a one-line :class:`~mutransfer.UserInputError`
naming it, before any study exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mutransfer._config.checks import (
    MAX_VERIFY_POINTS,
    MAX_VERIFY_SEEDS,
    MIN_VERIFY_POINTS,
    VERIFY_POINTS,
    VERIFY_SEEDS,
)
from mutransfer._study.schema import MAX_TRIALS
from mutransfer._sweep.context import SweepOptions
from mutransfer.errors import UserInputError


@dataclass(frozen=True)
class Verify:
    """After the target, train it again on ``points`` learning rates around the transferred one, ``seeds`` seeds
    each, and say whether the transferred LR is within the measured optimum's interval (``mutransfer sweep
    --verify``; the report's "verification" section).

    Args:
        points: learning rates on the grid (at least 3: an optimum needs them).
        seeds: seeds per learning rate (2 or more give an interval).

    Example:
        >>> study = mt.create_study(spec, strategies=[mt.Verify(points=5, seeds=3)])  # doctest: +SKIP
    """

    points: int = VERIFY_POINTS
    seeds: int = VERIFY_SEEDS

    def __post_init__(self) -> None:
        _whole(
            "Verify", "points", self.points, MIN_VERIFY_POINTS, MAX_VERIFY_POINTS,
            f"learning rates on the grid: an optimum needs at least {MIN_VERIFY_POINTS} (default {VERIFY_POINTS})",
        )  # fmt: skip
        _whole(
            "Verify", "seeds", self.seeds, 1, MAX_VERIFY_SEEDS, "seeds per learning rate (2 or more give an interval)"
        )


@dataclass(frozen=True)
class DirectBaseline:
    """Run the same search again at the target's size and train its winner as a target, so the report sets
    μTransfer's cost and error against tuning the target directly (``mutransfer sweep --baseline direct``).

    Example:
        >>> study = mt.create_study(spec, strategies=[mt.DirectBaseline()])  # doctest: +SKIP
    """


@dataclass(frozen=True)
class WarmStart:
    """Seed the search with the best trials of an earlier study (``mutransfer sweep --warm-start``).

    Args:
        source: the earlier study's folder, or its name in the same storage.
        top: how many of its best trials seed this search (None: a quarter of this search's trials, at least 1).
        any_source: accept a source of another problem or operator (refused otherwise).

    Example:
        >>> study = mt.create_study(spec, strategies=[mt.WarmStart("quick", top=2)])  # doctest: +SKIP
    """

    source: str | Path
    top: int | None = None
    any_source: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.source, (str, Path)) or not str(self.source):
            raise UserInputError(f"WarmStart(source={self.source!r:.40}): an earlier study's folder or name")
        if self.top is not None:
            _whole("WarmStart", "top", self.top, 1, MAX_TRIALS, "of its best trials (None: a quarter of the search's)")
        if not isinstance(self.any_source, bool):
            raise UserInputError(f"WarmStart(any_source={self.any_source!r:.40}): True or False")


@dataclass(frozen=True)
class CoordCheck:
    """Before the target trains, check on the study's data that the transferred model's activations and updates
    stay of one size across K (a coordinate check); a model that fails stops the study before the target
    (``mutransfer sweep --coord-check``).

    Example:
        >>> study = mt.create_study(spec, strategies=[mt.CoordCheck()])  # doctest: +SKIP
    """


def _whole(kind: str, name: str, value: object, low: int, high: int, what: str) -> None:
    """``value`` is a whole number in [low, high]; else a one-line UserInputError naming ``kind(name=value)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"{kind}({name}={value!r:.40}): an int, {low} to {high} {what}")
    if not low <= value <= high:
        raise UserInputError(f"{kind}({name}={value}): from {low} to {high} {what}")


#: a strategy object :func:`mutransfer.create_study` takes
Strategy = Verify | DirectBaseline | WarmStart | CoordCheck
_KINDS = (Verify, DirectBaseline, WarmStart, CoordCheck)


def with_strategies(options: SweepOptions, strategies: Sequence[Strategy]) -> SweepOptions:
    """``options`` with each of ``strategies`` asked for, as its flag asks ``mutransfer sweep``; a value that is not
    one of them, or one given twice, is a one-line UserInputError."""
    if isinstance(strategies, (str, bytes)) or not isinstance(strategies, Sequence):
        raise UserInputError(
            f"strategies: a list of strategy objects, e.g. [mt.Verify(), mt.DirectBaseline()], got {type(strategies).__name__}"
        )
    seen: set[type] = set()
    for i, s in enumerate(strategies):
        if not isinstance(s, _KINDS):
            raise UserInputError(
                f"strategies[{i}]: one of mt.Verify, mt.DirectBaseline, mt.WarmStart, mt.CoordCheck, got "
                f"{type(s).__name__}"
            )
        if type(s) in seen:
            raise UserInputError(f"strategies[{i}]: {type(s).__name__} is given twice; give it once")
        seen.add(type(s))
        if isinstance(s, Verify):
            options = replace(options, verify=True, verify_points=s.points, verify_seeds=s.seeds)
        elif isinstance(s, DirectBaseline):
            options = replace(options, baseline="direct")
        elif isinstance(s, WarmStart):
            options = replace(options, warm_start=str(s.source), warm_start_top=s.top, warm_start_any=s.any_source)
        else:
            options = replace(options, coord_check=True)
    return options
