"""Parameter counts and training-memory estimates for an FNO, by arithmetic alone.

Nothing is allocated, so a 906M-parameter FNO-3D is planned in microseconds.
Counting convention (the paper's): a complex spectral entry counts once; its
storage is two float32 numbers.

Memory of one training step with Adam, float32 (bytes):
- weights, gradients: 4 bytes per real scalar each; Adam: two states per real scalar;
- activations saved for backward (exact for this implementation, checked in the
  tests with torch's saved-tensor hooks), with G = ∏N, G_p = ∏(N+padding):
  B·G·(C_in+d)·4 (lifting input) + (2L−1)·B·m·G_p·4 (layer inputs and GELU inputs)
  + L·2^(d−1)·B·m·K^d·8 (truncated spectra) + B·G·(m + 2P)·4 (projection);
- workspace (an estimate of the largest transient buffers of one Fourier layer):
  the full spectrum of its input and output, 2·B·m·G_r·8 with G_r the rfft grid,
  plus two layer-sized real buffers 2·B·m·G_p·4.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from operators.errors import OperatorConfigError
from operators.spectral import check_grid

FLOAT_BYTES = 4
COMPLEX_BYTES = 8


@dataclass(frozen=True)
class FNOPlan:
    """Counts (entries) and memory (bytes) of an FNO configuration."""

    dim: int
    modes: int
    width: int
    layers: int
    grid: tuple[int, ...] | None
    batch: int
    spectral_params_per_layer: int
    spectral_params: int
    other_params: int
    total_params: int
    real_scalars: int
    weights_bytes: int
    gradients_bytes: int
    adam_bytes: int
    activations_bytes: int | None
    workspace_bytes: int | None

    @property
    def total_bytes(self) -> int:
        extra = (self.activations_bytes or 0) + (self.workspace_bytes or 0)
        return self.weights_bytes + self.gradients_bytes + self.adam_bytes + extra

    def as_dict(self) -> dict:
        out = asdict(self)
        out["grid"] = list(self.grid) if self.grid else None
        out["total_bytes"] = self.total_bytes
        return out


def spectral_params_per_layer(dim: int, modes: int, width: int) -> int:
    """Complex spectral entries of one Fourier layer: 2^(d-1)·m²·K^d."""
    return 2 ** (dim - 1) * width * width * modes**dim


def other_params(
    dim: int, width: int, layers: int, in_channels: int, out_channels: int, projection_channels: int
) -> int:
    """Real parameters outside the spectral weights: lifting, pointwise W_l, projection MLP."""
    lift = (in_channels + dim) * width + width
    pointwise = layers * (width * width + width)
    project = width * projection_channels + projection_channels + projection_channels * out_channels + out_channels
    return lift + pointwise + project


def plan_fno(
    dim: int,
    modes: int,
    width: int,
    layers: int,
    *,
    grid: tuple[int, ...] | None = None,
    batch: int = 1,
    in_channels: int = 1,
    out_channels: int = 1,
    projection_channels: int = 128,
    padding: int = 0,
) -> FNOPlan:
    """Plan an FNO: parameter counts always, activation memory when ``grid`` is given."""
    for name, value in (("dim", dim), ("modes", modes), ("width", width), ("layers", layers), ("batch", batch)):
        if not isinstance(value, int) or value < 1:
            raise OperatorConfigError(f"{name} {value!r}: must be a positive integer")
    if dim not in (1, 2, 3):
        raise OperatorConfigError(f"dim {dim}: FNO supports 1, 2 or 3 truncated dimensions")
    per_layer = spectral_params_per_layer(dim, modes, width)
    spectral = layers * per_layer
    other = other_params(dim, width, layers, in_channels, out_channels, projection_channels)
    real_scalars = 2 * spectral + other
    activations = workspace = None
    if grid is not None:
        grid = tuple(int(n) for n in grid)
        if len(grid) == 1 and dim > 1:
            grid = grid * dim
        if len(grid) != dim or min(grid) < 1:
            raise OperatorConfigError(f"grid {list(grid)}: give {dim} positive sizes (or one size for all axes)")
        padded = tuple(n + padding for n in grid)
        check_grid(padded, modes)
        g, gp = math.prod(grid), math.prod(padded)
        gr = math.prod(padded[:-1]) * (padded[-1] // 2 + 1)
        activations = (
            batch * g * (in_channels + dim) * FLOAT_BYTES
            + (2 * layers - 1) * batch * width * gp * FLOAT_BYTES
            + layers * 2 ** (dim - 1) * batch * width * modes**dim * COMPLEX_BYTES
            + batch * g * (width + 2 * projection_channels) * FLOAT_BYTES
        )
        workspace = 2 * batch * width * gr * COMPLEX_BYTES + 2 * batch * width * gp * FLOAT_BYTES
    return FNOPlan(
        dim=dim,
        modes=modes,
        width=width,
        layers=layers,
        grid=grid,
        batch=batch,
        spectral_params_per_layer=per_layer,
        spectral_params=spectral,
        other_params=other,
        total_params=spectral + other,
        real_scalars=real_scalars,
        weights_bytes=real_scalars * FLOAT_BYTES,
        gradients_bytes=real_scalars * FLOAT_BYTES,
        adam_bytes=2 * real_scalars * FLOAT_BYTES,
        activations_bytes=activations,
        workspace_bytes=workspace,
    )


def format_bytes(n: int) -> str:
    """Human-readable size in binary units."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    raise AssertionError("unreachable")


def step_flops(
    dim: int,
    modes: int,
    width: int,
    layers: int,
    grid: tuple[int, ...],
    *,
    batch: int = 1,
    in_channels: int = 1,
    out_channels: int = 1,
    projection_channels: int = 128,
    padding: int = 0,
) -> dict[str, float]:
    """Analytic floating-point operations of one training step (forward + backward ≈ 3 × forward).

    Forward, per Fourier layer (G_p = padded grid points):
    - spectral contraction: 2^(d-1)·K^d·B·m² complex multiply-adds, 8 real flops each;
    - rfft and irfft: 2.5·B·m·G_p·log2(G_p) each (half a complex FFT's 5·N·log2 N);
    - pointwise W_l: 2·B·G_p·m².
    Plus the lift 2·B·G·(C_in+d)·m and the projection 2·B·G·(m·P + P·C_out).
    Returns the parts and ``"total"`` (per step).
    """
    grid = tuple(int(n) for n in grid)
    if len(grid) == 1 and dim > 1:
        grid = grid * dim
    g = math.prod(grid)
    gp = math.prod(n + padding for n in grid)
    forward = {
        "spectral": layers * 8.0 * 2 ** (dim - 1) * modes**dim * batch * width * width,
        "fft": layers * 2 * 2.5 * batch * width * gp * math.log2(max(gp, 2)),
        "pointwise": layers * 2.0 * batch * gp * width * width,
        "lift_projection": 2.0 * batch * g * ((in_channels + dim) * width + width * projection_channels
                                              + projection_channels * out_channels),
    }
    parts = {name: 3.0 * value for name, value in forward.items()}
    parts["total"] = sum(parts.values())
    return parts
