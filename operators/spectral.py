"""Spectral convolution (the FNO kernel integral operator) in 1, 2 or 3 dimensions.

K convention: ``modes`` = K modes kept per sign along each truncated dimension
(the original FNO's ``modes1/2/3``). The last dimension uses an rfft, so a
d-dimensional layer keeps 2^(d-1) corner blocks, each a complex weight of shape
(m_in, m_out, K, …, K): 2^(d-1)·m_in·m_out·K^d complex entries per layer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import cast

import torch
from torch import nn
from torch.autograd.function import FunctionCtx

from operators.contraction import (
    packed_to_planar,
    planar_to_packed,
    spectral_contraction,
    truncated_dft,
    truncated_idft,
)
from operators.declarations import declare
from operators.errors import OperatorConfigError
from operators.parametrization import check_k_exponent, check_modes, init_spectral_weight_, spectral_lr_multiplier
from operators.precision import cpu_multiplies_bf16
from operators.width_mup import spectral_width_init_std, spectral_width_lr_multiplier

_EINSUM = {1: "bix,iox->box", 2: "bixy,ioxy->boxy", 3: "bixyz,ioxyz->boxyz"}
_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
# Private switches for benchmarks/bench_fno_step.py (before/after timings); not model options.
# _CONTRACTION: "bmm" (operators.contraction, one real bmm) or "einsum" (the former formulation:
#   full rfftn, one complex einsum per corner, full irfftn; _TRANSFORM is then ignored).
# _TRANSFORM: "dft" (truncated DFT as GEMMs), "fft" (torch.fft, pruned axis by axis) or "auto"
#   (``_auto_transform``: "dft" on CPU when few modes are kept per FFT length, else "fft").
# _SPECTRAL_BF16: "auto" (bf16 transforms and contraction under CPU bf16 autocast where the CPU multiplies bf16
#   in hardware, operators.precision.cpu_multiplies_bf16), "on" (wherever the GEMM transform runs under bf16
#   autocast), "off" (always float32, as before).
_CONTRACTION = "bmm"
_TRANSFORM = "auto"
_SPECTRAL_BF16 = "auto"


class _KeptRfftCtx(FunctionCtx):
    """Static type of the ``ctx`` torch passes to :class:`_KeptRfft`."""

    n: int


def _auto_transform(grid: tuple[int, ...], modes: int, device: torch.device) -> str:
    """The faster truncated transform, as measured on a 2-core CPU (docs/bench_cpu_notes.md).

    A GEMM costs ~N·n_kept per line and axis (n_kept = 2K on non-last axes, K on the
    last), an FFT ~N·log2 N plus, in torch, a copy per non-last axis. On CPU the GEMMs
    won while max(n_kept / log2 N) ≤ 6 in 2D/3D (e.g. 32³ at K = 8, 64² at K = 12,
    128² at K = 20) and ≤ 3 in 1D (1024 points at K = 16); beyond, torch.fft wins
    (256² at K = 32, 1024 points at K = 48). On GPUs cuFFT until measured otherwise.
    """
    if device.type != "cpu":
        return "fft"
    dim = len(grid)
    ratio = max((2 * modes if axis < dim - 1 else modes) / math.log2(max(n, 2)) for axis, n in enumerate(grid))
    return "dft" if ratio <= (6.0 if dim > 1 else 3.0) else "fft"


def spectrum_in_bf16(precision: str, device_type: str, grid: tuple[int, ...], modes: int) -> bool:
    """Whether a spectral layer on ``grid`` runs its truncated transforms and contraction in bf16 when trained at
    ``precision`` on ``device_type``: bf16 on a CPU with bf16 matrix units (or forced by ``_SPECTRAL_BF16``),
    where the transform is the GEMM DFT. The GEMMs accumulate in float32 (oneDNN); the spectrum and the
    contraction's output are rounded to bf16 like every other activation under autocast; the weights, their
    gradients and Adam's states stay float32/complex64 (docs/benchmarks.md, "Mixed precision"). The planner
    (operators.planning) asks the same question for the bytes of the kept spectra."""
    if _SPECTRAL_BF16 == "off" or _CONTRACTION == "einsum" or precision != "bf16" or device_type != "cpu":
        return False
    transform = _TRANSFORM if _TRANSFORM != "auto" else _auto_transform(grid, modes, torch.device(device_type))
    return transform == "dft" and (_SPECTRAL_BF16 == "on" or cpu_multiplies_bf16())


def _autocast_precision(device: torch.device) -> str:
    """The training precision autocast says for ``device`` ("fp32" when it is off)."""
    if not torch.is_autocast_enabled(device.type):
        return "fp32"
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(torch.get_autocast_dtype(device.type), "fp32")


class _KeptRfft(torch.autograd.Function):
    """The first ``modes`` rfft frequencies along the last axis; saves no tensor for backward.

    ``torch.fft.rfft`` saves its input for backward. Under mixed precision that input is
    the float32 upcast of a bf16/fp16 activation, a layer-sized copy kept alive until
    backward for nothing: the map is linear. Backward (PyTorch's convention for a
    real-to-complex linear map z = A x: grad_x = Re(A^H g)):
    grad_x[n] = Re(Σ_k g[k] e^{+2πikn/N}) = N·irfft(h)[n], h[0] = g[0], h[N/2] = g[N/2]
    (N even, when kept), h[k] = g[k]/2 otherwise (irfft doubles the other terms).
    """

    @staticmethod
    def forward(ctx: _KeptRfftCtx, x: torch.Tensor, modes: int) -> torch.Tensor:
        ctx.n = x.shape[-1]
        spectrum: torch.Tensor = torch.fft.rfft(x, dim=-1)  # torch.fft is unannotated
        return spectrum.narrow(-1, 0, modes)

    @staticmethod
    def backward(ctx: _KeptRfftCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        n, kept = ctx.n, grad.shape[-1]
        scale = torch.full((kept,), 0.5, dtype=grad.real.dtype, device=grad.device)
        scale[0] = 1.0
        if n % 2 == 0 and kept == n // 2 + 1:
            scale[-1] = 1.0
        grad_x: torch.Tensor = torch.fft.irfft(grad * scale, n=n, dim=-1)
        return grad_x * n, None


def truncated_rfftn(x: torch.Tensor, modes: int, dim: int) -> torch.Tensor:
    """The kept modes of rfftn(x) over the last ``dim`` axes, packed as (…, 2K, …, 2K, K).

    Along each non-last axis, indices [0, K) hold frequencies 0…K−1 and [K, 2K)
    hold −K…−1; along the last, the first K rfft frequencies. torch.fft axis by
    axis, truncating after each transform (later transforms run on fewer lines).
    Saves no copy of ``x`` for backward (_KeptRfft).
    """
    # Function.apply is unannotated in torch; its result is forward's.
    z = cast("Callable[[torch.Tensor, int], torch.Tensor]", _KeptRfft.apply)(x, modes)
    for axis in range(-2, -dim - 1, -1):
        n = z.shape[axis]
        z = torch.fft.fft(z, dim=axis)
        z = torch.cat([z.narrow(axis, 0, modes), z.narrow(axis, n - modes, modes)], dim=axis)
    return z


def padded_irfftn(z: torch.Tensor, grid: tuple[int, ...]) -> torch.Tensor:
    """Inverse of ``truncated_rfftn``: irfftn over ``grid`` of the packed modes zero-padded (pruned likewise)."""
    dim = len(grid)
    modes = z.shape[-1]
    for axis in range(-dim, -1):
        n = grid[axis]
        if n > 2 * modes:
            gap = list(z.shape)
            gap[axis] = n - 2 * modes
            z = torch.cat([z.narrow(axis, 0, modes), z.new_zeros(gap), z.narrow(axis, modes, modes)], dim=axis)
        z = torch.fft.ifft(z, dim=axis)
    out: torch.Tensor = torch.fft.irfft(z, n=grid[-1], dim=-1)
    return out


def check_grid(grid_shape: tuple[int, ...], modes: int) -> None:
    """Raise if K modes do not fit the grid: 2K ≤ N on non-last dims, K ≤ N/2+1 on the last."""
    *leading, last = grid_shape
    for axis, n in enumerate(leading):
        if 2 * modes > n:
            raise OperatorConfigError(
                f"modes {modes} too large for grid size {n} on axis {axis}: need 2*K <= N; use K <= {n // 2} or a finer grid"
            )
    if modes > last // 2 + 1:
        raise OperatorConfigError(
            f"modes {modes} too large for grid size {last} on the last axis: need K <= N/2+1; use K <= {last // 2 + 1} or a finer grid"
        )


class SpectralConv(nn.Module):
    """Kernel integral (K v)(x) = F⁻¹[R · T_K(F v)](x) on a periodic grid.

    Input and output: (B, C, N_1, …, N_d), channel-first, real. The transforms and
    the contraction run in float32 (float64 for float64 input) with autocast off; the
    result comes back in the input's dtype. Under bf16 autocast on a CPU with bf16 matrix
    units they run in bf16 instead, with float32 accumulation (:func:`spectrum_in_bf16`). Pipeline (operators.contraction): the
    kept modes in a planar mode-major layout (a truncated DFT as GEMMs on CPU, or
    torch.fft), all corners contracted in one real ``bmm``, then the inverse.

    ``base_width`` (default None: K-parametrization only) switches on width-muP
    with width m = in_channels: LR multiplier c(K)·m0/m and Gaussian init of
    std σ_K(m0)·b(K)·√(m0/m) (operators.width_mup).

    ``k_exponent`` ρ (default 1, the paper): under muP, b(K) = c(K) = (d·log K)^(−ρ/2)
    (operators.parametrization.data_aware_scale).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        modes: int,
        dim: int,
        parametrization: str = "standard",
        init_scale: float = 1.0,
        base_width: int | None = None,
        k_exponent: float = 1.0,
    ):
        super().__init__()
        check_modes(modes, dim, parametrization)
        k_exponent = check_k_exponent(k_exponent)
        if dim not in _EINSUM:
            raise OperatorConfigError(f"dim {dim}: FNO supports 1, 2 or 3 truncated dimensions")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.modes, self.dim, self.parametrization = modes, dim, parametrization
        self.base_width, self.k_exponent = base_width, k_exponent
        shape = (in_channels, out_channels) + (modes,) * dim
        if base_width is None:
            self.lr_multiplier = spectral_lr_multiplier(modes, dim, parametrization, k_exponent)

            def init(w: torch.Tensor) -> torch.Tensor:
                return init_spectral_weight_(
                    w,
                    modes=modes,
                    dim=dim,
                    parametrization=parametrization,
                    init_scale=init_scale,
                    k_exponent=k_exponent,
                )

        else:
            # width-muP (operators.width_mup): the fan-in m_in is the width m.
            if init_scale <= 0:
                raise OperatorConfigError(f"init_scale {init_scale}: must be positive (1.0 is the default)")
            self.lr_multiplier = spectral_width_lr_multiplier(
                in_channels, base_width, modes, dim, parametrization, k_exponent
            )
            std = spectral_width_init_std(in_channels, base_width, modes, dim, parametrization, init_scale, k_exponent)

            def init(w: torch.Tensor) -> torch.Tensor:
                torch.view_as_real(w).normal_(0.0, std)
                return w

        with torch.no_grad():
            self.weights = nn.ParameterList(
                nn.Parameter(init(torch.empty(shape, dtype=torch.cfloat))) for _ in range(2 ** (dim - 1))
            )
        for w in self.weights:  # its muP facts, for operators.base_shapes (one tensor per corner, K entries per dim)
            declare(
                w, role="spectral", k_dims=range(2, 2 + dim), width_dims=(0, 1), modes=modes if modes >= 2 else None
            )
        # Corner i keeps the positive (":K") or negative ("-K:") frequencies of each non-last dim.
        self._corners = list(itertools.product((False, True), repeat=dim - 1))

    def spectral_weights(self) -> list[nn.Parameter]:
        """The 2^(d-1) complex corner tensors R, each (m_in, m_out, K, …, K)."""
        return list(self.weights)

    def _corner_slices(self, negative_flags: tuple[bool, ...]) -> tuple[slice, ...]:
        k = self.modes
        leading = tuple(slice(-k, None) if neg else slice(0, k) for neg in negative_flags)
        return (slice(None), slice(None)) + leading + (slice(0, k),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = tuple(x.shape[2:])
        check_grid(grid, self.modes)
        if spectrum_in_bf16(_autocast_precision(x.device), x.device.type, grid, self.modes):
            # bf16 GEMMs end to end (float32 accumulation): no cast of the activation to float32 and back
            with torch.autocast(device_type="cpu", enabled=False):
                h = x.to(torch.bfloat16)
                spectrum = truncated_dft(h, self.modes, self.dim)
                return truncated_idft(spectral_contraction(spectrum, self.weights), self.modes, grid)
        # Otherwise transforms and contraction in float32/complex64 (float64 stays float64) whatever
        # autocast says: no bf16 FFTs, and the spectrum's dynamic range wants fp32.
        with torch.autocast(device_type=x.device.type, enabled=False):
            h = x if x.dtype == torch.float64 else x.float()
            if _CONTRACTION == "einsum":
                y = self._forward_einsum(h)
            else:
                complex_dtype = _COMPLEX[h.dtype]
                weights = [w if w.dtype == complex_dtype else w.to(complex_dtype) for w in self.weights]
                transform = _TRANSFORM if _TRANSFORM != "auto" else _auto_transform(grid, self.modes, h.device)
                if transform == "dft":
                    spectrum = truncated_dft(h, self.modes, self.dim)
                    y = truncated_idft(spectral_contraction(spectrum, weights), self.modes, grid)
                else:
                    spectrum = packed_to_planar(truncated_rfftn(h, self.modes, self.dim), self.dim)
                    out = planar_to_packed(spectral_contraction(spectrum, weights), self.modes, self.dim)
                    y = padded_irfftn(out, grid)
        return y.to(x.dtype)

    def _forward_einsum(self, x: torch.Tensor) -> torch.Tensor:
        """The former formulation (full rfftn, one complex einsum per corner, full irfftn); benchmarks only."""
        grid = tuple(x.shape[2:])
        axes = tuple(range(-self.dim, 0))
        x_ft = torch.fft.rfftn(x, dim=axes)
        out_shape = (x.shape[0], self.out_channels) + grid[:-1] + (grid[-1] // 2 + 1,)
        out_ft = torch.zeros(out_shape, dtype=x_ft.dtype, device=x.device)
        equation = _EINSUM[self.dim]
        for weight, flags in zip(self.weights, self._corners):
            index = self._corner_slices(flags)
            # A contiguous corner: autograd then saves K^d modes, not the whole spectrum.
            out_ft[index] = torch.einsum(equation, x_ft[index].contiguous(), weight.to(x_ft.dtype))
        out: torch.Tensor = torch.fft.irfftn(out_ft, s=grid, dim=axes)
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, modes={self.modes}, dim={self.dim}, "
            f"parametrization={self.parametrization}, lr_multiplier={self.lr_multiplier:.4f}"
            + ("" if self.base_width is None else f", base_width={self.base_width}")
            + ("" if self.k_exponent == 1.0 else f", k_exponent={self.k_exponent:.3g}")
        )
