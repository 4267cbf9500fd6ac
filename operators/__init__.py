"""Neural operators as plain PyTorch modules (no Ray or MLflow here).

Public API:
- :class:`FNO` — Fourier Neural Operator, d = 1, 2, 3, standard or muP parametrization.
- :func:`optimizer_param_groups`, :func:`clip_spectral_gradients` — what a trainer needs for muP.
- :func:`transfer_hyperparameters` — Algorithm 1 (K_proxy → K_target).
- :func:`plan_fno` — parameter counts and memory without allocating a model.
"""

from operators.errors import OperatorConfigError
from operators.fno import FNO
from operators.parametrization import (
    PARAMETRIZATIONS,
    clip_spectral_gradients,
    optimizer_param_groups,
    spectral_init_multiplier,
    spectral_lr_multiplier,
    spectral_parameters,
    transfer_init_variance_factor,
    transfer_lr_factor,
)
from operators.planning import FNOPlan, plan_fno
from operators.spectral import SpectralConv
from operators.transfer import TransferRecord, transfer_hyperparameters

__all__ = [
    "FNO",
    "FNOPlan",
    "OperatorConfigError",
    "PARAMETRIZATIONS",
    "SpectralConv",
    "TransferRecord",
    "clip_spectral_gradients",
    "optimizer_param_groups",
    "plan_fno",
    "spectral_init_multiplier",
    "spectral_lr_multiplier",
    "spectral_parameters",
    "transfer_hyperparameters",
    "transfer_init_variance_factor",
    "transfer_lr_factor",
]
