"""Losses and metrics for operator learning."""

from __future__ import annotations

import torch

from mutransfer.errors import UserInputError

REDUCTIONS = ("mean", "sum", "none")

#: Guards the division for an all-zero target.
EPS = 1e-12


def relative_l2(pred: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Relative L2 error ‖pred − target‖₂ / ‖target‖₂ per sample.

    ``pred`` and ``target`` have shape (B, ...); norms run over all non-batch
    dims. Returns shape (B,) for ``reduction="none"``, else a scalar.
    """
    if reduction not in REDUCTIONS:
        raise UserInputError(f"reduction {reduction!r} is unknown; use one of: {', '.join(REDUCTIONS)}")
    if pred.shape != target.shape:
        raise UserInputError(
            f"relative_l2: prediction shape {tuple(pred.shape)} differs from target shape {tuple(target.shape)}; "
            "make the model's output channels and grid match the data"
        )
    batch = target.shape[0]
    diff = torch.linalg.vector_norm((pred - target).reshape(batch, -1), dim=1)
    norm = torch.linalg.vector_norm(target.reshape(batch, -1), dim=1)
    errors = diff / norm.clamp_min(EPS)
    if reduction == "mean":
        return errors.mean()
    if reduction == "sum":
        return errors.sum()
    return errors
