"""Neural operators as plain PyTorch modules (no Ray or MLflow here).

Public API:
- :class:`FNO` — Fourier Neural Operator, d = 1, 2, 3, standard or muP parametrization.
- :class:`GalerkinTransformer`, :class:`ONO`, :class:`GNOT` — attention operators on point sets.
- :mod:`operators.width_mup` — muP in the width (Tensor Programs V, Adam) for all four.
- :func:`optimizer_param_groups`, :func:`clip_spectral_gradients` — what a trainer needs for muP.
- :func:`transfer_hyperparameters` — Algorithm 1 (K_proxy → K_target).
- :func:`plan_fno` — parameter counts and memory without allocating a model.

Point-set interface (GalerkinTransformer, ONO, GNOT; docs/operators.md):

    model(coords, features, mask=None) -> (B, n, C_out)

- ``coords`` (B, n, d_coord), ``features`` (B, n, C_in) (None if C_in = 0),
  ``mask`` (B, n) bool, True at real points, for samples with different
  numbers of points. Padded entries may hold anything (even NaN); they are
  excluded from every sum, mean, softmax and normalisation (ONO's whitening
  statistics included), so a padded batch gives, at real points, what each
  sample gives alone; the output is zero at padded points.
- GNOT also takes ``inputs=[(coords_l, features_l, mask_l), ...]`` (several
  input functions, each with its own points) and ``theta`` (B, p); then
  ``coords``/``mask`` are the query points where the output is evaluated and
  ``features`` is None. Without ``inputs`` the query point set is the input.
- Every model has a JSON-serialisable ``.config`` of its constructor
  arguments: ``type(model)(**model.config)`` rebuilds it (then
  ``load_state_dict``; ONO's running whitening statistics are buffers in it).
- All four models (FNO included) take ``width_parametrization="standard"|"mup"``
  and ``base_width`` (width-muP); the three point-set models also take
  ``attention_impl="linear"|"quadratic"`` (the quadratic one is an explicit
  n×n reference for tests and benchmarks).
- :func:`optimizer_param_groups` returns the right Adam groups for all of
  them: spectral weights at c(K)·lr, parameters declared through the
  ``mutransfer_lr_multipliers()`` protocol (width-muP "hidden" weights) at
  their multiplier, the rest ("other") at lr.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from operators.errors import OperatorConfigError
    from operators.fno import FNO
    from operators.galerkin import GalerkinAttention, GalerkinTransformer
    from operators.gnot import GNOT
    from operators.ono import ONO, OrthogonalAttention
    from operators.parametrization import (
        PARAMETRIZATIONS,
        clip_spectral_gradients,
        declared_lr_multipliers,
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
    from operators.width_mup import (
        WIDTH_PARAMETRIZATIONS,
        MuLinear,
        WidthSpec,
        attention_scale,
        hidden_lr_multiplier,
        output_multiplier,
        width_roles,
    )

#: where each public name lives; a name loads its module (and torch) on first use, so ``operators.errors``
#: and the command line's light commands import no torch
_HOME = {
    "OperatorConfigError": "errors",
    "FNO": "fno",
    "GalerkinAttention": "galerkin",
    "GalerkinTransformer": "galerkin",
    "GNOT": "gnot",
    "ONO": "ono",
    "OrthogonalAttention": "ono",
    "FNOPlan": "planning",
    "plan_fno": "planning",
    "SpectralConv": "spectral",
    "TransferRecord": "transfer",
    "transfer_hyperparameters": "transfer",
    **dict.fromkeys(
        (
            "PARAMETRIZATIONS",
            "clip_spectral_gradients",
            "declared_lr_multipliers",
            "optimizer_param_groups",
            "spectral_init_multiplier",
            "spectral_lr_multiplier",
            "spectral_parameters",
            "transfer_init_variance_factor",
            "transfer_lr_factor",
        ),
        "parametrization",
    ),
    **dict.fromkeys(
        (
            "WIDTH_PARAMETRIZATIONS",
            "MuLinear",
            "WidthSpec",
            "attention_scale",
            "hidden_lr_multiplier",
            "output_multiplier",
            "width_roles",
        ),
        "width_mup",
    ),
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        if importlib.util.find_spec(f"operators.{name}") is not None:  # a submodule, as `import operators` gave before
            return importlib.import_module(f"operators.{name}")
        raise AttributeError(f"module 'operators' has no attribute {name!r}")
    importlib.import_module("operators.registry")  # the built-in families register with the first model name used
    value = getattr(importlib.import_module(f"operators.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "FNO",
    "FNOPlan",
    "GNOT",
    "GalerkinAttention",
    "GalerkinTransformer",
    "MuLinear",
    "ONO",
    "OperatorConfigError",
    "OrthogonalAttention",
    "PARAMETRIZATIONS",
    "SpectralConv",
    "TransferRecord",
    "WIDTH_PARAMETRIZATIONS",
    "WidthSpec",
    "attention_scale",
    "clip_spectral_gradients",
    "declared_lr_multipliers",
    "hidden_lr_multiplier",
    "output_multiplier",
    "optimizer_param_groups",
    "plan_fno",
    "spectral_init_multiplier",
    "spectral_lr_multiplier",
    "spectral_parameters",
    "transfer_hyperparameters",
    "transfer_init_variance_factor",
    "transfer_lr_factor",
    "width_roles",
]
