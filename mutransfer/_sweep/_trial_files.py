"""The checks of a trial as a search reads it back, from its journal (or a folder from before the journal held the
trials: its ``config.json`` and ``outcome.json``) before the search uses it: a journal or file edited or damaged in a
study folder is one line naming it, the trial and the field (issue "Nothing lost", item 5), never a traceback from
Optuna or a wait on a FIFO. :mod:`mutransfer._sweep.plan` and :mod:`mutransfer._sweep._migrate` read through these."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TypeGuard

import numpy as np
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from mutransfer._study_folder.state import refuse_link
from mutransfer.errors import UserInputError


def read_trial_json(path: Path):
    """The JSON value of a trial's file; None where it is absent or unreadable (the trial is not that far yet). A
    folder, FIFO or device in its place is refused (reading a FIFO would wait for ever)."""
    refuse_link(path)
    if path.exists() and not path.is_file():
        raise UserInputError(
            f"{path} is not a file (a folder, a FIFO or a device); move it aside, then resume again: the trial runs "
            "again from its last checkpoint"
        )
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
        return None


#: the statuses outcome.json may hold (mutransfer._sweep.plan.trial_status, and a failure)
OUTCOME_STATUSES = ("completed", "pruned", "diverged", "failed")


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_outcome(path: Path | str, d: dict) -> None:
    """How a trial ended (``d``: status, metrics, error; an outcome.json's also rungs): every field of its type; one
    line naming the first that is not (``path``: the file, or the journal and the trial)."""
    fix = "restore it from a copy, or start a new study with --name NEW"
    metrics, rungs, error = d.get("metrics") or {}, d.get("rungs") or {}, d.get("error")
    if d.get("status") not in OUTCOME_STATUSES:
        raise UserInputError(f"{path}: 'status' must be one of {', '.join(OUTCOME_STATUSES)}; {fix}")
    if not isinstance(metrics, dict) or not all(v is None or _number(v) for v in metrics.values()):
        raise UserInputError(f"{path}: 'metrics' must map names to numbers; {fix}")
    for told in ("val_error", "test_error"):  # the value the sampler is told (a diverged trial's is DIVERGED_METRIC)
        if metrics.get(told) is not None and not math.isfinite(metrics[told]):
            raise UserInputError(f"{path}: metrics {told!r} must be a finite number; {fix}")
    if not isinstance(rungs, dict) or not all(
        str(k).isdigit() and _number(v) and math.isfinite(v) for k, v in rungs.items()
    ):
        raise UserInputError(f"{path}: 'rungs' must map epochs to validation errors; {fix}")
    if error is not None and not isinstance(error, str):
        raise UserInputError(f"{path}: 'error' must be text or null; {fix}")


def check_config_keys(path: Path | str, config: dict, space: dict) -> None:
    """One line unless a trial's configuration holds exactly the searched hyperparameters (its other keys named, a
    few and cut short: never a file's contents at length)."""
    if set(config) != set(space):
        found = ", ".join(repr(str(k)[:30]) for k in sorted(map(str, config))[:5]) + (", …" if len(config) > 5 else "")
        raise UserInputError(
            f"{path}: holds {found or 'nothing'}, not the study's search space {sorted(space)}; restore it from a "
            "copy or start a new study with --name NEW"
        )


def check_config(path: Path | str, config: dict, space: dict, seeded: bool) -> None:
    """A trial's configuration: every searched value one its distribution holds (a seeded trial's, from another study's
    space, any finite number or choice); one line naming the first that is not."""
    for name, distribution in space.items():
        value = config[name]
        if _number(value) and math.isfinite(value):
            held = seeded or _in_distribution(distribution, value)
        else:
            held = isinstance(distribution, CategoricalDistribution) and (seeded or value in distribution.choices)
        if not held:
            raise UserInputError(
                f"{path}: {name} {str(value)[:40]!r} is not a value of the study's search space; restore it from "
                "a copy, or start a new study with --name NEW"
            )


def enqueued_params(params: object, space: dict) -> tuple[dict, str | None]:
    """An enqueued trial's fixed parameters (Optuna's ``enqueue_trial``) as the search over ``space`` (searched name
    -> Optuna distribution) hands them out, each value its distribution's own (a numpy number a Python one, 10.0 of
    an integer range or of the choices [10, 20] the integer 10), and why they cannot be a trial's: a name not
    searched, or a value its distribution does not hold (None where they can; the names not given are sampled)."""
    if not isinstance(params, dict):
        return (
            {},
            f"params: a dict of searched hyperparameters to values, e.g. {{'lr': 0.001}}, got {type(params).__name__}",
        )
    if not params:
        return {}, "params: name at least one searched hyperparameter, e.g. {'lr': 0.001}"
    fixed: dict = {}
    for name, given in params.items():
        if name not in space:
            return {}, f"{str(name)[:40]!r} is not a searched hyperparameter (searched: {', '.join(sorted(space))})"
        distribution, value = space[name], _plain(given)
        if _number(value) and math.isfinite(value):
            held = _in_distribution(distribution, value)
        else:
            held = isinstance(distribution, CategoricalDistribution) and value in distribution.choices
        if not held and not isinstance(value, (int, float, str, bool)):
            return {}, f"{name}: a number or a choice, got {type(given).__name__}"
        if not held:
            return {}, f"{name} {str(given)[:40]!r} is not a value of the search space ({_described(distribution)})"
        fixed[name] = distribution.to_external_repr(distribution.to_internal_repr(value))
    return fixed, None


def _plain(value: object) -> object:
    """A numpy scalar (``np.float32(1e-3)``, ``np.int64(32)``) as the Python number it holds; anything else as it is
    (an array stays an array, and is refused)."""
    return value.item() if isinstance(value, np.generic) else value


def _described(distribution: object) -> str:
    """A distribution in a message: ``one of 10, 20`` or ``0.0003..0.03 log``."""
    if isinstance(distribution, CategoricalDistribution):
        return "one of " + ", ".join(map(repr, distribution.choices))
    if isinstance(distribution, FloatDistribution | IntDistribution):
        return f"{distribution.low:g}..{distribution.high:g}" + (" log" if distribution.log else "")
    return str(distribution)


def _in_distribution(distribution: object, value: float) -> bool:
    if isinstance(distribution, CategoricalDistribution):
        return value in distribution.choices
    if isinstance(distribution, FloatDistribution | IntDistribution):
        span = distribution.high - distribution.low
        inside = distribution.low - 1e-9 * span <= value <= distribution.high + 1e-9 * span
        return inside and (not isinstance(distribution, IntDistribution) or float(value).is_integer())
    return True
