"""A trial enqueued from Python (:meth:`mutransfer.Study.enqueue_trial`, as Optuna's ``Study.enqueue_trial``): checked
against the search space at once, then written to the study's Optuna journal, WAITING, where the search hands it out
before sampling (mutransfer._sweep.plan.SearchPlan); before the journal exists, kept until the search makes it."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import optuna

from mutransfer._api.spec import StudySpec
from mutransfer._study import Study
from mutransfer._study_folder.state import JOURNAL_FILE
from mutransfer._sweep._journal_file import journal_storage, load_journal
from mutransfer._sweep._trial_files import enqueued_params
from mutransfer._sweep._trial_journal import trial_index
from mutransfer._sweep.sampling import search_distributions
from mutransfer.errors import UserInputError

Params = Mapping[str, float | int | str]


def enqueue(
    spec: StudySpec, study_dir: Path, params: Params, pending: tuple[dict, ...], *, skip_if_exists: bool
) -> tuple[dict, ...]:
    """Enqueue ``params`` for the study of ``spec`` in ``study_dir``: written to its journal where it holds trials
    (the pending ones are then written already: returns ()), else added to ``pending`` (returned), which the search
    writes there before its first trial. A value the search space does not hold, a grid search, or a search with no
    trial left to hand out is one line (UserInputError)."""
    study = spec.study
    if not isinstance(skip_if_exists, bool):
        raise UserInputError(f"enqueue_trial: skip_if_exists is True or False, got {skip_if_exists!r:.40}")
    fixed, why = enqueued_params(dict(params) if isinstance(params, Mapping) else params, search_distributions(study))
    if why is not None:
        raise UserInputError(f"enqueue_trial: {why}")
    if study.search.algorithm == "grid":
        raise UserInputError(
            "enqueue_trial: a grid search hands out every combination in order; set search.algorithm to tpe or "
            "random to run trials of your own first"
        )
    path = study_dir / JOURNAL_FILE
    ostudy = _journal_study(path, study) if path.is_file() else None
    trials = [] if ostudy is None else ostudy.get_trials(deepcopy=False)
    if ostudy is None or not trials:
        if skip_if_exists and any(_same(held, fixed) for held in pending):
            return pending
        _refuse_past_total(study.trial_count, len(pending))
        return (*pending, fixed)
    if skip_if_exists and any(_same(t.system_attrs.get("fixed_params") or t.params, fixed) for t in trials):
        return ()
    handed = sum(trial_index(t) is not None for t in trials)
    waiting = sum(t.state == optuna.trial.TrialState.WAITING and trial_index(t) is None for t in trials)
    _refuse_past_total(study.trial_count, handed + waiting)
    ostudy.enqueue_trial(fixed)
    return ()


def holds_trials(study_dir: Path, name: str) -> bool:
    """Whether the study's journal holds a trial: the search has written the pending enqueued ones there."""
    try:
        study = load_journal(study_dir / JOURNAL_FILE, name)
    except UserInputError:  # a write caught half-way: not yet
        return False
    return study is not None and bool(study.get_trials(deepcopy=False))


def _journal_study(path: Path, study: Study) -> optuna.Study:
    """The journal's Optuna study, as it is: its lock left to whoever holds it (a driver may be writing it now), and
    a write caught half-way read again once it has ended."""
    for attempt in range(2):
        try:
            storage = journal_storage(path)
            break
        except UserInputError:
            if attempt:
                raise
            time.sleep(0.5)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "Using an existing study ..." at each enqueue
    directions: list[Literal["minimize"]] = ["minimize"] * (1 if study.search.objectives == "error" else 2)
    return optuna.create_study(study_name=study.name, storage=storage, directions=directions, load_if_exists=True)


def _same(held: Mapping[str, object], fixed: Mapping[str, object]) -> bool:
    """Whether ``held`` holds the values of ``fixed``, no more names and no fewer, as Optuna's ``skip_if_exists``
    compares them (numbers equal to float precision: ``np.float32(1e-3)`` is 1e-3)."""

    def close(a: object, b: object) -> bool:
        if (
            isinstance(a, bool)
            or isinstance(b, bool)
            or not isinstance(a, int | float)
            or not isinstance(b, int | float)
        ):
            return a == b
        return math.isclose(float(a), float(b), rel_tol=1e-6)

    return held.keys() == fixed.keys() and all(close(held[name], value) for name, value in fixed.items())


def _refuse_past_total(total: int, taken: int) -> None:
    """One line where the search's ``total`` trials are all ``taken`` (handed out or waiting already)."""
    if taken >= total:
        raise UserInputError(
            f"enqueue_trial: the search has handed out or holds all its {total} trials; create a study with more "
            "(search.num_trials) and another name to run this one"
        )
