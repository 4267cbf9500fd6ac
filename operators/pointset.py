"""Building blocks shared by the point-set operators (Galerkin Transformer, ONO, GNOT).

Point-set convention: ``coords`` (B, n, d_coord), ``features`` (B, n, C) and an
optional ``mask`` (B, n), bool, True at real points. Padded points may hold
anything (even NaN): :func:`prepare_points` zeroes them on entry, and every
sum over points below multiplies by the mask first, so a padded batch gives,
at real points, what each sample gives alone.
"""

from __future__ import annotations

import torch
from torch import nn

from operators.declarations import declare
from operators.errors import OperatorConfigError
from operators.value_checks import values_checked
from operators.width_mup import MuLinear, WidthSpec

ATTENTION_IMPLS = ("linear", "quadratic")


def check_positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise OperatorConfigError(f"{name} {value!r}: must be a positive integer")
    return value


def check_in_channels(in_channels: object) -> int:
    """Input channels per point: 0 (a shape given by its coordinates only) or more."""
    if not isinstance(in_channels, int) or isinstance(in_channels, bool) or in_channels < 0:
        raise OperatorConfigError(f"in_channels {in_channels!r}: must be a non-negative integer (0: coordinates only)")
    return in_channels


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise OperatorConfigError(f"{name} {value!r} is unknown; use one of: {', '.join(choices)}")
    return value


def check_heads(width: int, heads: int, base_width: int | None, is_mup: bool) -> None:
    """width (and base width under muP) must split evenly into heads."""
    check_positive_int("heads", heads)
    if width % heads:
        raise OperatorConfigError(
            f"width {width} is not divisible by heads {heads}; use a width that is a multiple of heads"
        )
    if is_mup:
        assert base_width is not None, "width-muP has a base width (checked by WidthSpec)"
        if base_width % heads:
            raise OperatorConfigError(
                f"base_width {base_width} is not divisible by heads {heads}; use a multiple of heads"
            )


def prepare_points(
    coords: torch.Tensor,
    features: torch.Tensor | None,
    mask: torch.Tensor | None,
    coord_dim: int,
    in_channels: int,
    what: str = "input",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validate a point set and return (coords, features, mask) with padded entries zeroed.

    ``features`` may be None when ``in_channels`` is 0. The returned mask is
    bool (B, n), all True when ``mask`` is None.
    """
    if coords.dim() != 3 or coords.shape[-1] != coord_dim:
        raise OperatorConfigError(
            f"{what} coords have shape {tuple(coords.shape)}; expected (batch, points, {coord_dim})"
        )
    b, n, _ = coords.shape
    if features is None:
        if in_channels:
            raise OperatorConfigError(f"{what} features missing; expected (batch, points, {in_channels})")
        features = coords.new_zeros(b, n, 0)
    if features.shape != (b, n, in_channels):
        raise OperatorConfigError(
            f"{what} features have shape {tuple(features.shape)}; expected ({b}, {n}, {in_channels}) to match coords"
        )
    if mask is None:
        mask = torch.ones(b, n, dtype=torch.bool, device=coords.device)
    else:
        if mask.dtype != torch.bool or mask.shape != (b, n):
            raise OperatorConfigError(
                f"{what} mask has shape {tuple(mask.shape)} and dtype {mask.dtype}; expected bool ({b}, {n}), True at real points"
            )
        if values_checked() and not bool(mask.any(dim=1).all()):  # not in a population (operators.value_checks)
            raise OperatorConfigError(
                f"{what} mask: every sample needs at least one real point (a row of the mask is all False)"
            )
    keep = mask.unsqueeze(-1)
    coords = torch.where(keep, coords, torch.zeros((), dtype=coords.dtype, device=coords.device))
    features = torch.where(keep, features, torch.zeros((), dtype=features.dtype, device=features.device))
    return coords, features, mask


def zero_padded(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x (B, n, C) with the rows of padded points set to 0."""
    return torch.where(mask.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))


def point_counts(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Number of real points per sample, (B,), as ``dtype``."""
    return mask.sum(dim=1).to(dtype)


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, n, h·d) → (B, h, n, d)."""
    b, n, c = x.shape
    return x.view(b, n, heads, c // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, n, d) → (B, n, h·d)."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


class HeadLayerNorm(nn.Module):
    """LayerNorm over each head's features with separate affine parameters per head.

    Input (B, h, n, d_h). Per point, so padding never enters its statistics.
    """

    def __init__(self, heads: int, head_dim: int, eps: float = 1e-5):
        super().__init__()
        self.head_dim, self.eps = head_dim, eps
        self.weight = nn.Parameter(torch.ones(heads, 1, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads, 1, head_dim))
        for p in (self.weight, self.bias):  # per-head gains and shifts: vectors in the width (operators.base_shapes)
            declare(p, role="vector")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.layer_norm(x, (self.head_dim,), eps=self.eps)
        return x * self.weight + self.bias


def normalized_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor, impl: str = "linear"
) -> torch.Tensor:
    """Σ_i (q_t·k_i / Σ_j q_t·k_j) v_i for positive features q, k (GNOT's and the linear transformer's attention).

    q (B, h, N, D), k (B, h, M, D) with positive entries, v (B, h, M, E),
    key_mask (B, M). "linear": q_t·(Σ_i k_i ⊗ v_i) / q_t·(Σ_j k_j), cost
    O((N+M)·D·E), never an N×M tensor; "quadratic": the explicit weights.
    """
    m = key_mask[:, None, :, None].to(k.dtype)
    k = k * m
    v = v * m
    if impl == "quadratic":
        weights = q @ k.transpose(-1, -2)
        return (weights / weights.sum(dim=-1, keepdim=True)) @ v
    kv = k.transpose(-1, -2) @ v  # (B, h, D, E)
    denominator = q @ k.sum(dim=2).unsqueeze(-1)  # (B, h, N, 1)
    return (q @ kv) / denominator


def normalized_attention_weights(q: torch.Tensor, k: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """The explicit (B, h, N, M) weights of :func:`normalized_attention` (diagnostics, small sizes only)."""
    weights = q @ (k * key_mask[:, None, :, None].to(k.dtype)).transpose(-1, -2)
    return weights / weights.sum(dim=-1, keepdim=True)


class PointMLP(nn.Module):
    """Pointwise MLP Linear(in→hidden) – act – Linear(hidden→out), each layer with a width role."""

    def __init__(
        self,
        in_features: int,
        hidden: int,
        out_features: int,
        roles: tuple[str, str],
        spec: WidthSpec,
        activation: type[nn.Module] = nn.GELU,
    ):
        super().__init__()
        self.fc1 = MuLinear(in_features, hidden, roles[0], spec)
        self.act = activation()
        self.fc2 = MuLinear(hidden, out_features, roles[1], spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.act(self.fc1(x)))
        return out
