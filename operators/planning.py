"""Parameter counts and training-memory estimates for an FNO, by arithmetic alone.

Nothing is allocated, so a 906M-parameter FNO-3D is planned in microseconds.
Counting convention (the paper's): a complex spectral entry counts once; its
storage is two float32 numbers.

Memory of one training step with Adam (bytes), at precision fp32, or bf16/fp16
mixed precision (autocast for the real-valued layers, transforms and the spectral
contraction in float32/complex64, float32 master weights). Persistent: weights and
gradients, 4 bytes per real scalar each; Adam, two float32 states per real scalar.
Activations saved for backward (exact for this implementation, checked in the tests
with torch's saved-tensor hooks), with G = ∏N, G_p = ∏(N+padding), b = 4 (fp32) or
2 (bf16/fp16) bytes:
  B·G·(C_in+d)·b (lifting input) + (2L−1)·B·m·G_p·b (layer inputs and GELU inputs)
  + L·2^(d−1)·B·m·K^d·8 (kept spectra, complex64; 4 bytes per entry where the spectrum runs in bf16:
  bf16 on a CPU with bf16 matrix units, operators.spectral.spectrum_in_bf16) + B·G·(m + 2P)·b
  (projection); under autocast also the low-precision copies of the weights whose
  input needs a gradient, (L·m² + m·P + P·C_out)·b.

The peak of one step is the largest of three moments (measured with
mutransfer._diagnostics.peak_memory on the CPU, where it predicts the peak of live
tensors within 1 % in 1D/2D/3D, fp32 and bf16; on a GPU see docs/benchmarks.md):
- start of backward: weights + Adam + activations + the projection's gradient
  buffers B·G·(P + C_out)·b (``workspace_bytes``);
- end of backward: weights + Adam + gradients + one Fourier layer's weight gradient
  in its contraction layout (2^(d−1)·m²·K^d·8) and two layer-sized buffers
  2·B·m·G_p·b (``layer_gradient_bytes``);
- the optimizer step: weights + Adam + gradients + Adam's temporaries
  (``optimizer_workspace_bytes``): PyTorch's multi-tensor Adam, the default on GPUs
  (``device="cuda"``), allocates one buffer the size of the largest parameter group
  (the spectral weights), two with weight decay; its per-tensor loop on CPUs
  (``device="cpu"``) about three the size of the largest tensor (a corner), four
  with weight decay.

On CUDA every moment also holds the BLAS libraries' workspaces, which PyTorch takes from
its caching allocator at the first matrix product and keeps: ``library_workspace_bytes``,
64 MiB (cuBLAS and cuBLASLt, 32 MiB each on Hopper GPUs; less on older GPUs, so the plan errs
on the safe side there). Measured on an H200 with torch 2.11 (docs/benchmarks.md, "Memory on
a GPU"): with it the plan is within 1 % of ``torch.cuda.max_memory_allocated`` in fp32 in
1D/2D/3D, the 906M target included. Under bf16 autocast on a GPU, where the backward peak
decides, the plan is still under the measured peak (by 20 % at 64², B 20; 15 % at 64³): the
float32 spectral temporaries of backward (cuFFT runs in float32) are not yet counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol, TypedDict, cast

from operators.errors import OperatorConfigError
from operators.interfaces import ModelConfig, config_int
from operators.parametrization import FNO_DIMS
from operators.precision import Precision, check_precision
from operators.spectral import check_grid, spectrum_in_bf16

if TYPE_CHECKING:
    from typing_extensions import Unpack

FLOAT_BYTES = 4
COMPLEX_BYTES = 8
#: training precisions and the bytes per element of the activations autograd saves under each
PRECISION_BYTES: dict[Precision, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
#: what PyTorch's cuBLAS and cuBLASLt workspaces hold from the first matrix product on (32 MiB each on
#: Hopper; measured: benchmarks/bench_memory.py --device cuda, docs/benchmarks.md)
CUDA_LIBRARY_WORKSPACE_BYTES = 64 * 2**20


class FNOPlanOptions(TypedDict, total=False):
    """:func:`plan_fno`'s keyword arguments (what :meth:`FNOPlan.options` gives and :meth:`FNOPlan.replan` changes)."""

    grid: tuple[int, ...] | None
    batch: int
    in_channels: int
    out_channels: int
    projection_channels: int
    padding: int
    precision: str
    weight_decay: float
    device: str


@dataclass(frozen=True)
class FNOPlan:
    """Counts (entries) and memory (bytes) of one Adam training step of an FNO configuration."""

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
    precision: str = "fp32"
    optimizer_workspace_bytes: int = 0
    layer_gradient_bytes: int | None = None
    device: str = "cuda"
    in_channels: int = 1
    out_channels: int = 1
    projection_channels: int = 128
    padding: int = 0
    weight_decay: float = 0.0
    library_workspace_bytes: int = 0

    def options(self) -> FNOPlanOptions:
        """plan_fno keyword arguments that reproduce this plan (with ``grid`` and ``batch``)."""
        return FNOPlanOptions(
            grid=self.grid,
            batch=self.batch,
            in_channels=self.in_channels,
            out_channels=self.out_channels,
            projection_channels=self.projection_channels,
            padding=self.padding,
            precision=self.precision,
            weight_decay=self.weight_decay,
            device=self.device,
        )

    def replan(self, **changes: Unpack[FNOPlanOptions]) -> FNOPlan:
        """The same configuration with some of plan_fno's arguments changed, e.g. ``replan(batch=4)``."""
        options = self.options()
        options.update(changes)
        return plan_fno(self.dim, self.modes, self.width, self.layers, **options)

    @property
    def backward_peak_bytes(self) -> int:
        """The larger of the start of backward (activations + projection gradients) and its end (all gradients)."""
        start = (self.activations_bytes or 0) + (self.workspace_bytes or 0)
        end = self.gradients_bytes + (self.layer_gradient_bytes or 0)
        return self.weights_bytes + self.adam_bytes + max(start, end) + self.library_workspace_bytes

    @property
    def step_peak_bytes(self) -> int:
        """Weights + Adam states + gradients + the optimizer's temporaries (+ the BLAS workspaces on CUDA)."""
        persistent = self.weights_bytes + self.adam_bytes + self.gradients_bytes
        return persistent + self.optimizer_workspace_bytes + self.library_workspace_bytes

    @property
    def total_bytes(self) -> int:
        """Peak memory of one training step: the larger of the backward and the optimizer-step peaks."""
        return max(self.backward_peak_bytes, self.step_peak_bytes)

    @property
    def label(self) -> str:
        """The configuration in a few words, for messages."""
        return f"FNO-{self.dim}D K={self.modes} width {self.width}, batch {self.batch}, {self.precision}"

    #: what to shrink, for messages
    smaller = "fewer modes or a smaller width (see `mutransfer plan`)"

    def fits(self, memory_bytes: int) -> bool:
        """Whether one training step fits in ``memory_bytes``."""
        return self.total_bytes <= memory_bytes

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["grid"] = list(self.grid) if self.grid else None
        out["backward_peak_bytes"] = self.backward_peak_bytes
        out["step_peak_bytes"] = self.step_peak_bytes
        out["total_bytes"] = self.total_bytes
        return out


def spectral_params_per_layer(dim: int, modes: int, width: int) -> int:
    """Complex spectral entries of one Fourier layer: 2^(d-1)·m²·K^d."""
    # typeshed types int ** int as Any (a negative exponent gives a float); here both are ints >= 0
    return cast(int, 2 ** (dim - 1) * width * width * modes**dim)


def other_params(
    dim: int, width: int, layers: int, in_channels: int, out_channels: int, projection_channels: int
) -> int:
    """Real parameters outside the spectral weights: lifting, pointwise W_l, projection MLP."""
    lift = (in_channels + dim) * width + width
    pointwise = layers * (width * width + width)
    project = width * projection_channels + projection_channels + projection_channels * out_channels + out_channels
    return lift + pointwise + project


def activation_bytes(
    dim: int,
    modes: int,
    width: int,
    layers: int,
    grid: tuple[int, ...],
    batch: int,
    *,
    in_channels: int,
    out_channels: int,
    projection_channels: int,
    padding: int,
    precision: Precision,
    spectrum_bytes: int = COMPLEX_BYTES,
) -> int:
    """Bytes autograd saves for backward in one forward pass (module docstring; exact for operators.fno).
    ``spectrum_bytes``: of one kept complex entry, 8 (complex64), or 4 where the spectrum runs in bf16
    (operators.spectral.spectrum_in_bf16)."""
    b = PRECISION_BYTES[precision]
    g = math.prod(grid)
    gp = math.prod(n + padding for n in grid)
    saved = (
        batch * g * (in_channels + dim) * b
        + (2 * layers - 1) * batch * width * gp * b
        + layers * 2 ** (dim - 1) * batch * width * modes**dim * spectrum_bytes
        + batch * g * (width + 2 * projection_channels) * b
    )
    if precision != "fp32":  # autocast's low-precision copies of the weights that need an input gradient
        saved += (layers * width * width + width * projection_channels + projection_channels * out_channels) * b
    # typeshed types int ** int as Any (a negative exponent gives a float); here both are ints >= 0
    return cast(int, saved)


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
    precision: str = "fp32",
    weight_decay: float = 0.0,
    device: str = "cuda",
) -> FNOPlan:
    """Plan an FNO: parameter counts always, activation memory when ``grid`` is given.

    ``precision``: "fp32", "bf16" or "fp16" (mixed precision, see the module docstring).
    ``weight_decay`` > 0 adds to Adam's temporaries. ``device``: "cuda" (multi-tensor
    Adam, and the BLAS workspaces) or "cpu" (per-tensor Adam); they differ only there.
    """
    for name, value in (("dim", dim), ("modes", modes), ("width", width), ("layers", layers), ("batch", batch)):
        if not isinstance(value, int) or value < 1:
            raise OperatorConfigError(f"{name} {value!r}: must be a positive integer")
    if dim not in FNO_DIMS:
        raise OperatorConfigError(f"dim {dim}: the FNO truncates 1, 2 or 3 dimensions; use --dim 1, 2 or 3")
    checked = check_precision(precision)  # ``precision`` itself, typed as a Precision
    if device not in ("cuda", "cpu"):
        raise OperatorConfigError(f"device {device!r}: plan for 'cuda' or 'cpu'")
    per_layer = spectral_params_per_layer(dim, modes, width)
    spectral = layers * per_layer
    other = other_params(dim, width, layers, in_channels, out_channels, projection_channels)
    real_scalars = 2 * spectral + other
    activations = workspace = layer_gradient = None
    if grid is not None:
        grid = tuple(int(n) for n in grid)
        if len(grid) == 1 and dim > 1:
            grid = grid * dim
        if len(grid) != dim or min(grid) < 1:
            raise OperatorConfigError(f"grid {list(grid)}: give {dim} positive sizes (or one size for all axes)")
        padded = tuple(n + padding for n in grid)
        check_grid(padded, modes)
        gp = math.prod(padded)
        activations = activation_bytes(
            dim,
            modes,
            width,
            layers,
            grid,
            batch,
            in_channels=in_channels,
            out_channels=out_channels,
            projection_channels=projection_channels,
            padding=padding,
            precision=checked,
            spectrum_bytes=2 * PRECISION_BYTES["bf16"]
            if spectrum_in_bf16(checked, device, padded, modes)
            else COMPLEX_BYTES,
        )
        b = PRECISION_BYTES[checked]
        workspace = batch * math.prod(grid) * (projection_channels + out_channels) * b
        layer_gradient = per_layer * COMPLEX_BYTES + 2 * batch * width * gp * b
    if device == "cuda":  # multi-tensor Adam: the largest group (spectral weights and the rest are separate groups)
        optimizer_workspace = max(2 * spectral, other) * FLOAT_BYTES * (2 if weight_decay else 1)
    else:  # per-tensor Adam: temporaries the size of the largest tensor, one corner or a pointwise/projection weight
        corner = 2 * width * width * modes**dim * FLOAT_BYTES
        largest = max(corner, width * width * FLOAT_BYTES, width * projection_channels * FLOAT_BYTES)
        optimizer_workspace = largest * (4 if weight_decay else 3)
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
        precision=precision,
        optimizer_workspace_bytes=optimizer_workspace,
        library_workspace_bytes=CUDA_LIBRARY_WORKSPACE_BYTES if device == "cuda" else 0,
        in_channels=in_channels,
        out_channels=out_channels,
        projection_channels=projection_channels,
        padding=padding,
        weight_decay=float(weight_decay),
        layer_gradient_bytes=layer_gradient,
        device=device,
    )


class _Replannable(Protocol):
    """What :func:`largest_batch` reads of a plan (an FNOPlan or an AttentionPlan)."""

    @property
    def activations_bytes(self) -> int | None: ...

    def replan(self, *, batch: int) -> _Replannable: ...

    def fits(self, memory_bytes: int) -> bool: ...


def largest_batch(plan: _Replannable, memory_bytes: int) -> int:
    """The largest batch at which ``plan``'s configuration fits in ``memory_bytes`` (0 if batch 1 does not).

    ``plan``: an FNOPlan with a grid, or an operators.planning_attention.AttentionPlan.
    The peak grows monotonically with the batch, so a doubling-then-bisection search
    over the planner is exact.
    """
    if plan.activations_bytes is None:
        raise OperatorConfigError("largest_batch needs a plan with a grid (activations depend on it)")

    def fits(b: int) -> bool:
        return plan.replan(batch=b).fits(memory_bytes)

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
        if high > 2**40:
            return low
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}


def parse_bytes(text: str) -> int:
    """'80GiB' → 85899345920, '80GB' → 8e10, '512MiB', '1.5G' (binary), '1000' (bytes)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise OperatorConfigError(f"memory size {text!r}: write a number and a unit, e.g. 80GiB, 24GB or 512MiB")
    value = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value < 1:
        raise OperatorConfigError(f"memory size {text!r}: must be at least 1 byte, e.g. 80GiB")
    return int(value)


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
        "lift_projection": 2.0
        * batch
        * g
        * ((in_channels + dim) * width + width * projection_channels + projection_channels * out_channels),
    }
    parts = {name: 3.0 * value for name, value in forward.items()}
    parts["total"] = sum(parts.values())
    return parts


def plan_fno_config(
    config: ModelConfig,
    *,
    grid: tuple[int, ...],
    batch: int = 1,
    precision: str = "fp32",
    weight_decay: float = 0.0,
    device: str = "cuda",
) -> FNOPlan:
    """:func:`plan_fno` for the FNO whose ``.config`` is ``config``, on an unpadded ``grid`` (the FNO family's plan)."""
    return plan_fno(
        config_int(config["dim"], "dim"),
        config_int(config["modes"], "modes"),
        config_int(config["width"], "width"),
        config_int(config["layers"], "layers"),
        grid=tuple(grid),
        batch=int(batch),
        in_channels=config_int(config["in_channels"], "in_channels"),
        out_channels=config_int(config["out_channels"], "out_channels"),
        projection_channels=config_int(config["projection_channels"], "projection_channels"),
        padding=config_int(config["padding"], "padding"),
        precision=precision,
        weight_decay=weight_decay,
        device=device,
    )


def fno_step_flops(config: ModelConfig, grid: tuple[int, ...]) -> float:
    """:func:`step_flops` per sample (batch 1) of the FNO whose ``.config`` is ``config`` (the FNO family's FLOPs)."""
    return step_flops(
        config_int(config["dim"], "dim"),
        config_int(config["modes"], "modes"),
        config_int(config["width"], "width"),
        config_int(config["layers"], "layers"),
        grid,
        batch=1,
        in_channels=config_int(config["in_channels"], "in_channels"),
        out_channels=config_int(config["out_channels"], "out_channels"),
        projection_channels=config_int(config["projection_channels"], "projection_channels"),
        padding=config_int(config["padding"], "padding"),
    )["total"]
