"""PINO for Darcy flow: a physics-informed loss next to the data loss.

Physics: -div(a grad u) = f on (0,1)^2, u = 0 on the boundary, discretised
exactly as the data generator (``mutransfer.data._darcy``): S x S node grid
x_i = i/(S-1) (h = 1/(S-1)), 5-point stencil on the (S-2)^2 interior nodes,
face coefficients the harmonic mean of the two nodal values of a.

    R_ij = -[a_{i+1/2,j}(u_{i+1,j}-u_ij) - a_{i-1/2,j}(u_ij-u_{i-1,j})
            + a_{i,j+1/2}(u_{i,j+1}-u_ij) - a_{i,j-1/2}(u_ij-u_{i,j-1})] / h^2 - f

Boundary: imposed. The residual is evaluated on interior nodes with the
prediction's boundary values replaced by the exact zero Dirichlet data, so
the physics term constrains the interior and the data term the rest (PINO's
own Darcy code imposes the boundary with a mollifier on the output instead,
which would change the model; here the model is untouched).

Normalisation: the physics loss is the relative residual ||R||_2 / ||f||_2
over the interior nodes, per sample, averaged over the batch. It is 0 for
the generator's discrete solution at the generator's resolution, 1 for the
prediction u = 0, and dimensionless like the relative L2 data loss; so the
two combine at the paper's ratio (data : physics = 5 : 1) as

    loss = data_weight * relative_l2(pred, y) + physics_weight * physics_loss(pred, a).

The evaluation metric stays the relative L2 error.
"""

from __future__ import annotations

import torch

from mutransfer._training.losses import EPS, relative_l2
from mutransfer.errors import UserInputError

__all__ = ["LOSSES", "PINO_DEFAULT_WEIGHTS", "darcy_residual", "darcy_physics_loss", "pino_darcy_loss", "build_loss"]

#: Training losses selectable by TrainConfig.loss
LOSSES = ("relative_l2", "pino")
#: (data_weight, physics_weight) of the PINO Darcy experiments in the muTransfer-FNO paper
PINO_DEFAULT_WEIGHTS = (5.0, 1.0)


def _as_grid(t: torch.Tensor, name: str) -> torch.Tensor:
    """(B, S, S) from (B, S, S) or (B, S, S, 1), with a one-line error otherwise."""
    if t.dim() == 4 and t.shape[-1] == 1:
        t = t[..., 0]
    if t.dim() != 3 or t.shape[1] != t.shape[2] or t.shape[1] < 3:
        raise UserInputError(
            f"loss 'pino': {name} has shape {tuple(t.shape)}; the Darcy physics loss needs square 2D "
            "fields (B, S, S[, 1]) with S >= 3 (use it with --problem darcy)"
        )
    return t


def darcy_residual(
    u: torch.Tensor, a: torch.Tensor, forcing: float = 1.0, *, face_mean: str = "harmonic"
) -> torch.Tensor:
    """R = -div_h(a grad_h u) - f on the interior nodes, shape (B, S-2, S-2).

    u, a: (B, S, S) or (B, S, S, 1) on the node grid x_i = i/(S-1); the
    boundary values of u are replaced by 0 (imposed Dirichlet data).
    Differentiable in u.
    """
    u = _as_grid(u, "the prediction")
    a = _as_grid(a, "the input coefficient")
    if u.shape != a.shape:
        raise UserInputError(
            f"loss 'pino': prediction shape {tuple(u.shape)} and coefficient shape {tuple(a.shape)} differ"
        )
    s = u.shape[-1]
    inv_h2 = float((s - 1) ** 2)
    u = torch.nn.functional.pad(u[:, 1:-1, 1:-1], (1, 1, 1, 1))  # impose u = 0 on the boundary
    if face_mean == "harmonic":
        ax = 2.0 * a[:, 1:, :] * a[:, :-1, :] / (a[:, 1:, :] + a[:, :-1, :])
        ay = 2.0 * a[:, :, 1:] * a[:, :, :-1] / (a[:, :, 1:] + a[:, :, :-1])
    elif face_mean == "arithmetic":
        ax = 0.5 * (a[:, 1:, :] + a[:, :-1, :])
        ay = 0.5 * (a[:, :, 1:] + a[:, :, :-1])
    else:
        raise UserInputError(f"face_mean {face_mean!r}: use 'harmonic' or 'arithmetic'")
    flux_x = ax * (u[:, 1:, :] - u[:, :-1, :])  # (B, S-1, S): face between i and i+1
    flux_y = ay * (u[:, :, 1:] - u[:, :, :-1])  # (B, S, S-1): face between j and j+1
    div = (flux_x[:, 1:, 1:-1] - flux_x[:, :-1, 1:-1]) + (flux_y[:, 1:-1, 1:] - flux_y[:, 1:-1, :-1])
    return -div * inv_h2 - forcing


def darcy_physics_loss(
    u: torch.Tensor, a: torch.Tensor, forcing: float = 1.0, *, reduction: str = "mean"
) -> torch.Tensor:
    """Relative residual ||R||_2 / ||f||_2 over interior nodes, per sample (module docstring)."""
    r = darcy_residual(u, a, forcing)
    batch = r.shape[0]
    norm_f = max(abs(float(forcing)), EPS) * (r.shape[1] * r.shape[2]) ** 0.5
    per_sample = torch.linalg.vector_norm(r.reshape(batch, -1), dim=1) / norm_f
    if reduction == "mean":
        return per_sample.mean()
    if reduction == "sum":
        return per_sample.sum()
    if reduction == "none":
        return per_sample
    raise UserInputError(f"reduction {reduction!r} is unknown; use one of: mean, sum, none")


def pino_darcy_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    a: torch.Tensor,
    *,
    data_weight: float = PINO_DEFAULT_WEIGHTS[0],
    physics_weight: float = PINO_DEFAULT_WEIGHTS[1],
    forcing: float = 1.0,
) -> torch.Tensor:
    """data_weight * relative_l2(pred, target) + physics_weight * darcy_physics_loss(pred, a)."""
    loss = data_weight * relative_l2(pred, target)
    if physics_weight:
        loss = loss + physics_weight * darcy_physics_loss(pred, a, forcing)
    return loss


def build_loss(name: str = "relative_l2", *, data_weight=None, physics_weight=None):
    """The training loss named by TrainConfig.loss: ``fn(pred, target, x) -> (loss, relative_l2)``.

    The second value is the unweighted relative L2 data term (the trainer's
    divergence check looks at it: the physics residual of an untrained model
    can legitimately be large on fine grids).
    """
    if name == "relative_l2":

        def loss_fn(pred, target, x):
            loss = relative_l2(pred, target)
            return loss, loss

        return loss_fn
    if name == "pino":
        dw = PINO_DEFAULT_WEIGHTS[0] if data_weight is None else float(data_weight)
        pw = PINO_DEFAULT_WEIGHTS[1] if physics_weight is None else float(physics_weight)

        def pino_fn(pred, target, x):
            data = relative_l2(pred, target)
            loss = dw * data
            if pw:
                loss = loss + pw * darcy_physics_loss(pred, x)
            return loss, data

        return pino_fn
    raise UserInputError(f"loss {name!r} is unknown; use one of: {', '.join(LOSSES)}")
