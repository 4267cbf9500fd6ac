"""mutransfer: hyperparameter transfer (muTransfer-FNO) for neural operators.

The Python API, shaped after Optuna's (docs/api.md)::

    import mutransfer as mt
    spec = mt.StudySpec.from_yaml("studies/quick.yaml")
    study = mt.create_study(spec, storage="mutransfer-runs")
    study.optimize(n_trials=8)
    study.best_params
    target = study.train_target()      # target.model: the trained nn.Module

Its names load on first use (``import mutransfer`` stays light for the command line).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mutransfer._version import __version__
from mutransfer.errors import UserInputError

if TYPE_CHECKING:
    from mutransfer._api import (
        CoordCheck,
        DirectBaseline,
        Report,
        Study,
        StudySpec,
        TargetResult,
        TransferRecord,
        TrialResult,
        Verify,
        WarmStart,
        create_study,
        load_study,
    )

__all__ = [
    "CoordCheck",
    "DirectBaseline",
    "Report",
    "Study",
    "StudySpec",
    "TargetResult",
    "TransferRecord",
    "TrialResult",
    "UserInputError",
    "Verify",
    "WarmStart",
    "__version__",
    "create_study",
    "load_study",
]

_API = frozenset(__all__) - {"UserInputError", "__version__"}


def __getattr__(name: str) -> object:
    if name in _API:
        return getattr(importlib.import_module("mutransfer._api"), name)
    raise AttributeError(f"module 'mutransfer' has no attribute {name!r}")
