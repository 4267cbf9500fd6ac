"""Fourier Neural Operator in 1, 2 or 3 dimensions with abc-parametrization.

G = Q ∘ (W_L + K_L) ∘ φ ∘ … ∘ φ ∘ (W_1 + K_1) ∘ P (φ = GELU between layers,
none after the last, as in the original FNO). P lifts the input channels with
the grid coordinates appended; Q is a two-layer pointwise MLP.

Width-muP (``width_parametrization="mup"``, ``base_width=m0``; see
operators.width_mup): the pointwise W_l and the spectral weights are hidden
(LR × m0/m; the spectral LR becomes c(K)·m0/m and its init std
σ_K(m0)·b(K)·√(m0/m)); the lift P is an input layer (unchanged); the first
layer of Q (width → projection_channels) is the readout, whose output is
multiplied by m0/m. Biases and the second layer of Q are untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from operators.errors import OperatorConfigError
from operators.parametrization import check_k_exponent, check_modes
from operators.pointwise import POINTWISE, pointwise
from operators.spectral import SpectralConv, check_grid
from operators.width_mup import MuLinear, WidthSpec


def grid_coordinates(
    grid_shape: tuple[int, ...], device: torch.device | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Uniform node coordinates in [0, 1] per axis, shape (*grid_shape, d) (what FNO's lifting sees)."""
    axes = [torch.linspace(0.0, 1.0, n, device=device, dtype=dtype) for n in grid_shape]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)


def _conv_weight(conv: nn.Module) -> nn.Parameter:
    """The weight of a pointwise convolution (an element of ``FNO.pointwise``).

    torch's stubs type ``_ConvNd.weight`` as a Tensor; it is a Parameter.
    """
    return cast(nn.Parameter, cast("nn.Conv1d | nn.Conv2d | nn.Conv3d", conv).weight)


class FNO(nn.Module):
    """FNO on a regular grid; the same weights run at any resolution with 2K ≤ N.

    Args:
        dim: number of truncated (Fourier) dimensions d ∈ {1, 2, 3}.
        in_channels, out_channels: input/output function channels.
        modes: K, modes kept per sign per truncated dimension.
        width: hidden channels m.
        layers: number of Fourier layers L.
        parametrization: "standard" or "mup" (spectral init std and LR ∝ 1/√(d·log K)).
        projection_channels: hidden size of the projection MLP Q.
        padding: grid points appended at the end of every dimension before the
            Fourier layers (for non-periodic problems) and removed after.
        init_scale: multiplies the spectral init std (a tunable hyperparameter).
        width_parametrization: "standard" (default; no width rule) or "mup"
            (muP in the width m, composed with the K-parametrization).
        base_width: the base width m0 of width-muP (required with "mup").
        k_exponent: the exponent ρ of the K rule under muP, b(K) = c(K) = (d·log K)^(−ρ/2)
            (operators.parametrization.data_aware_scale; 1, the default, is the paper's rule).

    Input (B, N_1, …, N_d, in_channels) → output (B, N_1, …, N_d, out_channels).
    """

    def __init__(
        self,
        dim: int,
        in_channels: int,
        out_channels: int,
        modes: int,
        width: int = 64,
        layers: int = 4,
        parametrization: str = "standard",
        projection_channels: int = 128,
        padding: int = 0,
        init_scale: float = 1.0,
        width_parametrization: str = "standard",
        base_width: int | None = None,
        k_exponent: float = 1.0,
    ):
        super().__init__()
        check_modes(modes, dim, parametrization)
        k_exponent = check_k_exponent(k_exponent)
        for name, value in (
            ("in_channels", in_channels),
            ("out_channels", out_channels),
            ("width", width),
            ("layers", layers),
            ("projection_channels", projection_channels),
        ):
            if not isinstance(value, int) or value < 1:
                raise OperatorConfigError(f"{name} {value!r}: must be a positive integer")
        if not isinstance(padding, int) or padding < 0:
            raise OperatorConfigError(f"padding {padding!r}: must be a non-negative number of grid points")
        if dim not in POINTWISE:
            raise OperatorConfigError(f"dim {dim}: FNO supports 1, 2 or 3 truncated dimensions")
        spec = WidthSpec(width_parametrization, width, base_width)
        self.config = dict(
            dim=dim,
            in_channels=in_channels,
            out_channels=out_channels,
            modes=modes,
            width=width,
            layers=layers,
            parametrization=parametrization,
            projection_channels=projection_channels,
            padding=padding,
            init_scale=float(init_scale),
            width_parametrization=width_parametrization,
            base_width=base_width,
            k_exponent=k_exponent,
        )
        self.width_spec = spec
        self.dim, self.modes, self.padding = dim, modes, padding
        self.lift = nn.Linear(in_channels + dim, width)
        self.pointwise = nn.ModuleList(POINTWISE[dim](width, width, kernel_size=1) for _ in range(layers))
        self.project = nn.Sequential(
            MuLinear(width, projection_channels, "output", spec),
            nn.GELU(),
            nn.Linear(projection_channels, out_channels),
        )
        # Spectral weights are drawn last, so every other parameter is identical for a
        # given seed whatever K and the parametrization are.
        self.spectral = nn.ModuleList(
            SpectralConv(
                width,
                width,
                modes,
                dim,
                parametrization,
                init_scale,
                base_width=base_width if spec.is_mup else None,
                k_exponent=k_exponent,
            )
            for _ in range(layers)
        )

    def mutransfer_lr_multipliers(self) -> Iterator[tuple[nn.Parameter, str, float]]:
        """Width-muP: the pointwise W_l are hidden weights (LR × m0/m); spectral LRs live on SpectralConv."""
        if self.width_spec.is_mup:
            mult = self.width_spec.lr_multiplier("hidden")
            for conv in self.pointwise:
                yield _conv_weight(conv), "hidden", mult

    def mutransfer_width_roles(self) -> Iterator[tuple[torch.Tensor, str]]:
        """Width roles of the parameters that are not MuLinear weights (see operators.width_mup.width_roles)."""
        yield self.lift.weight, "input"
        for conv in self.pointwise:
            yield _conv_weight(conv), "hidden"
        for p in self.spectral.parameters():
            yield p, "hidden"
        yield cast(nn.Linear, self.project[2]).weight, "fixed"

    def check_input(self, grid_shape: tuple[int, ...]) -> None:
        """Raise a one-line error if K does not fit this grid (padding included)."""
        check_grid(tuple(n + self.padding for n in grid_shape), self.modes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != self.dim + 2:
            raise OperatorConfigError(
                f"input has shape {tuple(x.shape)}; FNO-{self.dim}D expects (batch, {', '.join(['N'] * self.dim)}, channels)"
            )
        grid_shape = tuple(x.shape[1:-1])
        self.check_input(grid_shape)
        coords = grid_coordinates(grid_shape, device=x.device, dtype=x.dtype)
        coords = coords.expand(x.shape[0], *coords.shape)
        # One activation layout end to end: channel-first from the lift to the projection's output, each
        # pointwise map one baddbmm (operators.pointwise); no layer-sized re-layout copy in either pass.
        inputs = torch.cat([x, coords], dim=-1).movedim(-1, 1)  # (B, C_in + d, N_1, …, N_d)
        h = pointwise(inputs, self.lift.weight, self.lift.bias)  # (B, m, N_1, …, N_d)
        if self.padding:
            h = F.pad(h, [0, self.padding] * self.dim)
        for i, (spectral, linear) in enumerate(zip(self.spectral, self.pointwise)):
            h = spectral(h) + linear(h)
            if i < len(self.spectral) - 1:
                h = F.gelu(h)
        if self.padding:
            h = h[(slice(None), slice(None)) + (slice(0, -self.padding),) * self.dim].contiguous()
        return self._project(h).movedim(1, -1).contiguous()

    def _project(self, h: torch.Tensor) -> torch.Tensor:
        """Q = Linear ∘ GELU ∘ readout on channel-first (B, m, N…) → (B, C_out, N…): ``self.project``'s layers
        and parameters (the readout's width-muP multiplier m0/m included), computed channel-first."""
        readout = cast(MuLinear, self.project[0])
        last = cast(nn.Linear, self.project[2])
        return pointwise(F.gelu(readout.forward_channel_first(h)), last.weight, last.bias)
