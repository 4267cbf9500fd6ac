"""An Optuna pruner object as a study's ASHA settings (:func:`mutransfer.create_study`'s ``pruner``): mutransfer's
searches stop trials by ASHA, decided by the study's plan."""

from __future__ import annotations

import optuna

from mutransfer._api.spec import StudySpec
from mutransfer.errors import UserInputError


def with_pruner(spec: StudySpec, pruner: optuna.pruners.BasePruner | None) -> StudySpec:
    """The spec's ASHA settings as ``pruner`` asks (mutransfer's searches stop trials by ASHA, decided by the plan)."""
    if pruner is None:
        return spec
    if isinstance(pruner, optuna.pruners.NopPruner):
        return spec.replace({"budget.grace_period": spec.study.budget.epochs})
    if isinstance(pruner, optuna.pruners.SuccessiveHalvingPruner):
        grace, factor = getattr(pruner, "_min_resource", None), getattr(pruner, "_reduction_factor", None)
        rate = getattr(pruner, "_min_early_stopping_rate", 0)
        if isinstance(grace, int) and isinstance(factor, int) and rate == 0:
            return spec.replace({"budget.grace_period": grace, "budget.reduction_factor": factor})
        raise UserInputError(
            "pruner: SuccessiveHalvingPruner needs a whole min_resource (epochs), a whole reduction_factor and "
            "min_early_stopping_rate 0, e.g. SuccessiveHalvingPruner(min_resource=1, reduction_factor=2)"
        )
    raise UserInputError(
        f"pruner {type(pruner).__name__}: mutransfer stops trials by ASHA; pass "
        "optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2) or optuna.pruners.NopPruner()"
    )
