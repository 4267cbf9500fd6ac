"""An Optuna pruner object for a study (:func:`mutransfer.create_study`'s ``pruner``): ASHA's settings, or the pruner
the searches ask in ASHA's place (mutransfer._sweep._asha)."""

from __future__ import annotations

import optuna

from mutransfer._api.spec import StudySpec
from mutransfer.errors import UserInputError


def with_pruner(
    spec: StudySpec, pruner: optuna.pruners.BasePruner | None
) -> tuple[StudySpec, optuna.pruners.BasePruner | None]:
    """The spec as ``pruner`` asks, and the pruner the searches ask in place of the spec's ASHA (None: its ASHA).

    ``SuccessiveHalvingPruner(min_resource=G, reduction_factor=R)`` is ASHA: the spec's ``budget.grace_period`` and
    ``budget.reduction_factor``, applied by the built-in pruner, whose stops do not depend on the order results arrive
    in. ``NopPruner()``: no rungs (``budget.grace_period`` = ``budget.epochs``). Any other pruner (``MedianPruner()``,
    ``PercentilePruner(25.0)``, ``HyperbandPruner()``…) is asked at each evaluation on the search's journal study, and
    the spec's ASHA is turned off (no rungs) so the study's cost estimate counts full trainings.
    """
    if pruner is None:
        return spec, None
    if not isinstance(pruner, optuna.pruners.BasePruner):
        what = f"the class {pruner.__name__}" if isinstance(pruner, type) else type(pruner).__name__
        raise UserInputError(
            f"pruner {what}: an Optuna pruner object such as "
            "optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2) or optuna.pruners.MedianPruner()"
        )
    no_rungs = spec.replace({"budget.grace_period": spec.study.budget.epochs})
    if isinstance(pruner, optuna.pruners.NopPruner):
        return no_rungs, None
    if isinstance(pruner, optuna.pruners.SuccessiveHalvingPruner):
        grace, factor = getattr(pruner, "_min_resource", None), getattr(pruner, "_reduction_factor", None)
        rate, bootstrap = getattr(pruner, "_min_early_stopping_rate", 0), getattr(pruner, "_bootstrap_count", 0)
        if isinstance(grace, int) and isinstance(factor, int) and rate == 0 and bootstrap == 0:
            return spec.replace({"budget.grace_period": grace, "budget.reduction_factor": factor}), None
        raise UserInputError(
            "pruner: SuccessiveHalvingPruner needs a whole min_resource (epochs), a whole reduction_factor, "
            "min_early_stopping_rate 0 and bootstrap_count 0, e.g. SuccessiveHalvingPruner(min_resource=1, "
            "reduction_factor=2)"
        )
    if spec.study.search.objectives != "error":
        raise UserInputError(
            f"pruner {type(pruner).__name__}: Optuna's pruners judge one objective, and this study searches "
            f"{spec.study.search.objectives}; pass SuccessiveHalvingPruner(...) (ASHA on the error) or NopPruner()"
        )
    return no_rungs, pruner


def loaded_pruner(spec: StudySpec, pruner: optuna.pruners.BasePruner | None) -> optuna.pruners.BasePruner | None:
    """The pruner a study loaded again (:func:`mutransfer.load_study`) asks in place of its stored ASHA: ``pruner``
    as :func:`with_pruner` takes it, without changing the stored spec. ASHA's own settings (SuccessiveHalvingPruner,
    NopPruner) other than the stored ones are refused in one line: they are the study's, kept in its folder."""
    changed, chosen = with_pruner(spec, pruner)
    if chosen is None and changed.text != spec.text:
        budget = spec.study.budget
        raise UserInputError(
            f"pruner {type(pruner).__name__}: study {spec.name!r} keeps the ASHA it was created with "
            f"(budget.grace_period {budget.grace_period}, budget.reduction_factor {budget.reduction_factor}); load it "
            "without pruner, or pass another Optuna pruner (e.g. MedianPruner()) to stop its remaining trials"
        )
    return chosen
