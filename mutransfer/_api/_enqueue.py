"""A trial enqueued from Python (:meth:`mutransfer.Study.enqueue_trial`, as Optuna's ``Study.enqueue_trial``): checked
against the search space at once, then written to the study's Optuna journal, WAITING, where the search hands it out
before sampling (mutransfer._sweep.plan.SearchPlan); before the journal exists, kept until the search makes it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import optuna

from mutransfer._api.spec import StudySpec
from mutransfer._study_folder.state import JOURNAL_FILE
from mutransfer._sweep._trial_files import enqueued_problem
from mutransfer._sweep._trial_journal import journal_storage, trial_index
from mutransfer._sweep.sampling import search_distributions
from mutransfer.errors import UserInputError

Params = Mapping[str, float | int | str]


def enqueue(
    spec: StudySpec, study_dir: Path, params: Params, pending: tuple[dict, ...], *, skip_if_exists: bool
) -> tuple[dict, ...]:
    """Enqueue ``params`` for the study of ``spec`` in ``study_dir``: written to its journal where it has one (the
    pending ones are then written already: returns ()), else added to ``pending`` (returned). A value the search space
    does not hold, a grid search, or a search with no trial left to hand out is one line (UserInputError)."""
    study = spec.study
    why = enqueued_problem(dict(params) if isinstance(params, Mapping) else params, search_distributions(study))
    if why is not None:
        raise UserInputError(f"enqueue_trial: {why}")
    if study.search.algorithm == "grid":
        raise UserInputError(
            "enqueue_trial: a grid search hands out every combination in order; set search.algorithm to tpe or "
            "random to run trials of your own first"
        )
    fixed = {k: _plain(v) for k, v in params.items()}
    path = study_dir / JOURNAL_FILE
    if not path.is_file():
        if skip_if_exists and fixed in pending:
            return pending
        _refuse_past_total(study.trial_count, len(pending))
        return (*pending, fixed)
    # the journal as it is, its lock left to whoever holds it (a driver may be writing it now)
    ostudy = optuna.load_study(study_name=study.name, storage=journal_storage(path))
    trials = ostudy.get_trials(deepcopy=False)
    if skip_if_exists and any(_holds(t, fixed) for t in trials):
        return ()
    handed = sum(trial_index(t) is not None for t in trials)
    waiting = sum(t.state == optuna.trial.TrialState.WAITING and trial_index(t) is None for t in trials)
    _refuse_past_total(study.trial_count, handed + waiting)
    ostudy.enqueue_trial(fixed)
    return ()


def _plain(value: float | int | str) -> float | int | str:
    """A value as JSON writes it (a numpy scalar as a Python number)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def _holds(trial: optuna.trial.FrozenTrial, fixed: dict) -> bool:
    """Whether ``trial`` has (or is enqueued with) these values (Optuna's ``skip_if_exists``)."""
    held = {**(trial.system_attrs.get("fixed_params") or {}), **trial.params}
    return all(
        name in held
        and (
            held[name] == value
            or (isinstance(value, float) and isinstance(held[name], float) and math.isclose(held[name], value))
        )
        for name, value in fixed.items()
    )


def _refuse_past_total(total: int, taken: int) -> None:
    if taken >= total:
        raise UserInputError(
            f"enqueue_trial: the search has handed out or holds all its {total} trials; create a study with more "
            "(search.num_trials) and another name to run this one"
        )
