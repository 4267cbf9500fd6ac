"""Kernels of the spectral layer: truncated DFT, per-mode channel contraction, synthesis.

A d-dimensional spectral layer (operators.spectral.SpectralConv) computes
y = F⁻¹[R · T_K(F x)]: keep K frequencies per sign along the non-last axes and
the first K rfft frequencies along the last one (2^(d-1) "corners"), multiply
the channels by a complex m_in × m_out matrix per kept mode, zero-pad, invert.

Everything here works on the *planar, mode-major* layout of the kept spectrum:
a real tensor (2, M, B, m) — real and imaginary planes, then the M = 2^(d-1)·K^d
kept modes, then batch and channels. The modes are in packed order
(k_1, …, k_d), where along each non-last axis index j ∈ [0, K) is frequency j and
j ∈ [K, 2K) is frequency j − 2K, and along the last axis index j is frequency j.
Corner c = (c_1, …, c_{d-1}) ∈ {0, 1}^(d-1) (the order of
``SpectralConv.spectral_weights()``) holds the indices [c_i·K, (c_i+1)·K).

**Contraction** (``SpectralContraction``). ``torch.einsum`` runs the per-mode
complex matmul as a complex ``bmm`` that on CPU loops over the modes in tiny
copies (about 50,000 ``copy_``/``select`` calls per 3D training step at K = 8).
Here all corners go through ONE real ``bmm`` with the mode as the batch
dimension. For a complex batch A (M, P, Q) times W (M, Q, R):

    [Re C ; Im C] = [[Re A, −Im A], [Im A, Re A]] @ [Re W ; Im W]      (M, 2P, 2Q) @ (M, 2Q, R)

The block matrix is built on the activation side (P = batch, usually smaller
than m_out); the weights are only re-laid out mode-major, with plain 2D
transposes (PyTorch's blocked transposing copy). Backward (PyTorch's complex
convention, y = x·W per mode): grad_x = grad_y·W^H and grad_W = x^H·grad_y, one
real ``bmm`` each: with Y = [Re G ; Im G] @ [Re W ; Im W]ᵀ, Re grad_x = Y₀₀ + Y₁₁
and Im grad_x = Y₁₀ − Y₀₁; and x^H's block matrix is the transpose of x's, so
[Re grad_W ; Im grad_W] = block(x)ᵀ @ [Re G ; Im G]. Autograd saves only the
kept input spectrum (B·m_in·2^(d-1)·K^d complex entries, as operators.planning
counts) and the weight parameters themselves; the block matrix and the
re-laid-out weights are transient, rebuilt in backward.

**Transforms** (``TruncatedDFT``, ``TruncatedIDFT``). The truncated transform
along one axis is a dense matrix product with the K (or 2K) kept rows of the DFT
matrix; on CPU a plain GEMM per axis beats a full FFT followed by truncation
(torch.fft copies non-last axes to make them contiguous, and transforms modes
that are then thrown away). Each axis step is real GEMMs on contiguous data,
and it rotates the layout so the next axis needs no copy: analysis takes
(p, L, n) (p = 1 real or 2 planes, n the axis) to (2n', L); synthesis takes
(2n', L) back to (p, L, n). The analysis step's adjoint is the synthesis step
with the same matrices and vice versa, which gives both backward passes.
Nothing is saved for backward (the DFT matrices are cached constants).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, cast

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

#: the real matrices of one axis step (one per input plane)
AxisMats = tuple[torch.Tensor, ...]


class _TransformCtx(FunctionCtx):
    """Static type of the ``ctx`` torch passes to the transforms (attributes set in forward, read in backward)."""

    grid: tuple[int, ...]
    mats: list[AxisMats]


class _ContractionCtx(FunctionCtx):
    """Static type of the ``ctx`` torch passes to :class:`SpectralContraction`.

    ``saved_tensors`` and ``needs_input_grad`` are declared here because torch's stubs type
    them as one-element tuples (``tuple[Tensor]``, ``tuple[bool]``) on ``_C._FunctionBase``.
    """

    dim: int
    modes: int
    saved_tensors: tuple[torch.Tensor, ...]
    needs_input_grad: tuple[bool, ...]


class _ContractionApply(Protocol):
    def __call__(self, x: torch.Tensor, /, *weights: torch.Tensor) -> torch.Tensor: ...


# ----------------------------------------------------------------------------------------------
# Truncated DFT as GEMMs


def packed_frequencies(n: int, modes: int, last: bool) -> list[int]:
    """Kept frequencies of one axis in packed order: 0…K−1 (last axis), or 0…K−1, −K…−1."""
    return list(range(modes)) if last else list(range(modes)) + list(range(-modes, 0))


@functools.lru_cache(maxsize=64)
def _dft_mats(n: int, modes: int, last: bool, synthesis: bool, dtype: torch.dtype, device: torch.device) -> AxisMats:
    """The real matrices of one axis step (see ``_analysis_step`` and ``_synthesis_step``).

    Analysis (forward DFT, e^{−2πi f t/n}): complex axis [[Re F ; Im F], [−Im F ; Re F]], real
    last axis [[Re F ; Im F]]. Synthesis (inverse with the 1/n of ``norm="backward"``,
    e^{+2πi f t/n}/n): complex axis [[Re E ; −Im E], [Im E ; Re E]]; last axis, the irfft's
    c2r: c_f·[Re E ; −Im E] with c_f = 2 except c_0 = 1 and c_{n/2} = 1 (Hermitian doubling).
    """
    freqs = torch.tensor(packed_frequencies(n, modes, last), dtype=torch.float64)
    t = torch.arange(n, dtype=torch.float64)
    angle = 2 * math.pi * freqs[:, None] * t[None, :] / n
    re, im = torch.cos(angle), torch.sin(angle)
    if not synthesis:
        im = -im
        mats = [torch.cat([re, im])] if last else [torch.cat([re, im]), torch.cat([-im, re])]
    else:
        re, im = re / n, im / n
        if last:
            weight = torch.full((len(freqs), 1), 2.0, dtype=torch.float64)
            weight[0] = 1.0
            if n % 2 == 0 and modes == n // 2 + 1:
                weight[-1] = 1.0
            mats = [torch.cat([weight * re, -weight * im])]
        else:
            mats = [torch.cat([re, -im]), torch.cat([im, re])]
    return tuple(m.to(dtype=dtype, device=device).contiguous() for m in mats)


def _analysis_step(mats: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """(p, L, n) → (n_out, L): Σ_j mats[j] @ x[j]ᵀ (p = len(mats) GEMMs, transposed views only).

    Computed as its transpose, outᵀ = Σ_j x[j] @ mats[j]ᵀ written into the transposed view of the
    result: the same numbers in the same layout, but a GEMM whose long dimension L is the row count,
    which MKL ran 2.4–3.3× faster for a long axis (L = 1280, n = 1024, 2K = 32: 0.70 ms against 2.3 ms).
    """
    out = x.new_empty((mats[0].shape[0], x.shape[1]))
    torch.mm(x[0], mats[0].t(), out=out.t())
    for j in range(1, len(mats)):
        out.t().addmm_(x[j], mats[j].t())
    return out


def _synthesis_step(mats: Sequence[torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    """(n_in, L) → (p, L, n): out[j] = zᵀ @ mats[j]; the adjoint of ``_analysis_step``."""
    out = z.new_empty((len(mats), z.shape[1], mats[0].shape[1]))
    for j, m in enumerate(mats):
        torch.mm(z.t(), m, out=out[j])
    return out


def _axis_mats(
    grid: tuple[int, ...], modes: int, synthesis: bool, dtype: torch.dtype, device: torch.device
) -> list[AxisMats]:
    """Matrices of every axis, last axis first (the order of the analysis chain)."""
    dim = len(grid)
    return [_dft_mats(grid[axis], modes, axis == dim - 1, synthesis, dtype, device) for axis in range(dim - 1, -1, -1)]


def _analysis_chain(x: torch.Tensor, mats_last_first: Sequence[AxisMats], grid: tuple[int, ...]) -> torch.Tensor:
    """(…, N_1, …, N_d) → planar (2, M, …): transform the last axis, rotate it to the front, repeat."""
    lead = x.shape[: x.dim() - len(grid)]
    z = x.reshape(len(mats_last_first[0]), -1, grid[-1])
    for axis, mats in zip(range(len(grid) - 1, -1, -1), mats_last_first):
        z = _analysis_step(mats, z.view(len(mats), -1, grid[axis]))
    return z.view((2, -1) + tuple(lead))


def _synthesis_chain(z: torch.Tensor, mats_last_first: Sequence[AxisMats], grid: tuple[int, ...]) -> torch.Tensor:
    """Planar (2, M, …) → real (…, N_1, …, N_d): the adjoint of ``_analysis_chain`` (axes in reverse order)."""
    lead = z.shape[2:]
    for mats in reversed(mats_last_first):
        z = _synthesis_step(mats, z.reshape(mats[0].shape[0], -1))
    return z.view(tuple(lead) + tuple(grid))


class TruncatedDFT(torch.autograd.Function):
    """Real (B, m, N_1, …, N_d) → planar kept spectrum (2, M, B, m): equal to slicing rfftn."""

    @staticmethod
    def forward(ctx: _TransformCtx, x: torch.Tensor, modes: int, dim: int) -> torch.Tensor:
        grid = tuple(x.shape[-dim:])
        mats = _axis_mats(grid, modes, False, x.dtype, x.device)
        ctx.grid, ctx.mats = grid, mats
        return _analysis_chain(x.contiguous(), mats, grid)

    @staticmethod
    @once_differentiable
    def backward(ctx: _TransformCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _synthesis_chain(grad.contiguous(), ctx.mats, ctx.grid), None, None


class TruncatedIDFT(torch.autograd.Function):
    """Planar kept spectrum (2, M, B, m) → real (B, m, N_1, …, N_d): irfftn of the zero-padded modes."""

    @staticmethod
    def forward(ctx: _TransformCtx, z: torch.Tensor, modes: int, grid: tuple[int, ...]) -> torch.Tensor:
        mats = _axis_mats(tuple(grid), modes, True, z.dtype, z.device)
        ctx.grid, ctx.mats = tuple(grid), mats
        return _synthesis_chain(z.contiguous(), mats, tuple(grid))

    @staticmethod
    @once_differentiable
    def backward(ctx: _TransformCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _analysis_chain(grad.contiguous(), ctx.mats, ctx.grid), None, None


def truncated_dft(x: torch.Tensor, modes: int, dim: int) -> torch.Tensor:
    """Kept modes of rfftn(x) over the last ``dim`` axes, planar mode-major (2, M, *x.shape[:-dim])."""
    # Function.apply is unannotated in torch; its result is forward's.
    apply = cast("Callable[[torch.Tensor, int, int], torch.Tensor]", TruncatedDFT.apply)
    return apply(x, modes, dim)


def truncated_idft(z: torch.Tensor, modes: int, grid: tuple[int, ...]) -> torch.Tensor:
    """irfftn over ``grid`` of the planar kept modes ``z`` (2, M, …) zero-padded: (…, *grid)."""
    apply = cast("Callable[[torch.Tensor, int, tuple[int, ...]], torch.Tensor]", TruncatedIDFT.apply)
    return apply(z, modes, tuple(grid))


# ----------------------------------------------------------------------------------------------
# Per-mode channel contraction as one real bmm


def _mode_count(dim: int, modes: int) -> int:
    count: int = 2 ** (dim - 1) * modes**dim
    return count


def _corner_major(t: torch.Tensor, dim: int, modes: int) -> torch.Tensor:
    """View a planar (2, M, P, Q) in packed order as (c_1…c_{d-1}, k_1…k_d, ri, P, Q) (no copy)."""
    p, q = t.shape[-2:]
    split = (2,) + (2, modes) * (dim - 1) + (modes, p, q)
    corners = [1 + 2 * j for j in range(dim - 1)]
    ks = [2 + 2 * j for j in range(dim - 1)] + [2 * dim - 1]
    return t.view(split).permute(corners + ks + [0, 2 * dim, 2 * dim + 1])


def _block(x: torch.Tensor, dim: int, modes: int) -> torch.Tensor:
    """Planar (2, M, P, Q) → corner-major real block matrices (M, 2P, 2Q) = [[Re, −Im], [Im, Re]]."""
    p, q = x.shape[-2:]
    v = _corner_major(x, dim, modes)  # (…modes, ri, P, Q)
    re, im = v[..., 0, :, :], v[..., 1, :, :]
    out = torch.empty(v.shape[:-3] + (2, p, 2, q), dtype=x.dtype, device=x.device)
    out[..., 0, :, 0, :].copy_(re)
    out[..., 1, :, 1, :].copy_(re)
    out[..., 1, :, 0, :].copy_(im)
    torch.neg(im, out=out[..., 0, :, 1, :])
    return out.view(_mode_count(dim, modes), 2 * p, 2 * q)


def _weights_stacked(
    weights: Sequence[torch.Tensor], dim: int, modes: int, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Corner weights (Q, R, K, …, K) complex → real (M, 2Q, R) = [Re W ; Im W] per mode, corner-major, in
    ``dtype`` (default the weights' real dtype; bfloat16 for the bf16 spectral path)."""
    q, r = weights[0].shape[:2]
    per_corner = modes**dim
    real = torch.view_as_real(weights[0])
    out = torch.empty((len(weights), 2 * per_corner, q * r), dtype=dtype or real.dtype, device=real.device)
    for c, w in enumerate(weights):
        # (Q·R, K^d·2) → (K^d·2, Q·R), i.e. per mode (2, Q, R): a plain 2D transposing copy.
        out[c].copy_(torch.view_as_real(w).reshape(q * r, 2 * per_corner).t())
    return out.view(len(weights) * per_corner, 2 * q, r)


class SpectralContraction(torch.autograd.Function):
    """out[k, b, o] = Σ_i x[k, b, i]·R_c(k)[i, o, k] over all kept modes k, in one real bmm.

    ``x`` is the planar kept spectrum (2, M, B, m_in) (float32 or float64), then come
    the 2^(d-1) complex corner weights (m_in, m_out, K, …, K) of the matching complex
    dtype. Returns the planar (2, M, B, m_out).
    """

    @staticmethod
    def forward(ctx: _ContractionCtx, x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        dim, modes = weights[0].dim() - 2, weights[0].shape[-1]
        x = x.contiguous()
        b, r = x.shape[2], weights[0].shape[1]
        y = torch.bmm(_block(x, dim, modes), _weights_stacked(weights, dim, modes, x.dtype))  # (M, 2B, m_out)
        out = x.new_empty((2, x.shape[1], b, r))
        _corner_major(out, dim, modes).copy_(y.view(_corner_major(out, dim, modes).shape))
        ctx.save_for_backward(x, *weights)
        ctx.dim, ctx.modes = dim, modes
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: _ContractionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, *weights = ctx.saved_tensors
        dim, modes = ctx.dim, ctx.modes
        grad_out = grad_out.contiguous()
        b, q = x.shape[2:]
        r = weights[0].shape[1]
        m = x.shape[1]
        g = _corner_major(grad_out, dim, modes).reshape(m, 2 * b, r)  # [Re G ; Im G] per mode, corner-major
        grad_x: torch.Tensor | None = None
        grad_w: list[torch.Tensor | None] = [None] * len(weights)
        if ctx.needs_input_grad[0]:
            # Y = [Re G ; Im G] @ [Re W ; Im W]ᵀ (M, 2B, 2m_in); Re grad_x = Y₀₀ + Y₁₁, Im = Y₁₀ − Y₀₁.
            y = torch.bmm(g, _weights_stacked(weights, dim, modes, x.dtype).transpose(1, 2))
            y = y.view(_corner_major(x, dim, modes).shape[:-3] + (2, b, 2, q))
            grad_x = torch.empty_like(x)
            gv = _corner_major(grad_x, dim, modes)
            torch.add(y[..., 0, :, 0, :], y[..., 1, :, 1, :], out=gv[..., 0, :, :])
            torch.sub(y[..., 1, :, 0, :], y[..., 0, :, 1, :], out=gv[..., 1, :, :])
        if any(ctx.needs_input_grad[1:]):
            # [Re grad_W ; Im grad_W] = block(x)ᵀ @ [Re G ; Im G]  (M, 2m_in, m_out).
            gw = torch.bmm(_block(x, dim, modes).transpose(1, 2), g)
            per_corner = modes**dim
            gw = gw.view(len(weights), 2 * per_corner, q * r)
            for c, w in enumerate(weights):
                if ctx.needs_input_grad[1 + c]:
                    # (Q·R, K^d·2): the parameter's own layout, in its own real dtype
                    grad = gw[c].t().to(torch.view_as_real(w).dtype).contiguous()
                    grad_w[c] = torch.view_as_complex(grad.view(w.shape + (2,)))
        return (grad_x, *grad_w)


def spectral_contraction(x: torch.Tensor, weights: Iterable[torch.Tensor]) -> torch.Tensor:
    """Contract the planar kept spectrum ``x`` (2, M, B, m_in) with the corner weights → (2, M, B, m_out)."""
    weights = list(weights)
    dim = weights[0].dim() - 2
    if len(weights) != 2 ** (dim - 1):
        raise ValueError(f"{len(weights)} corner weights for a {dim}-dimensional contraction; need {2 ** (dim - 1)}")
    modes = weights[0].shape[-1]
    if x.dim() != 4 or x.shape[0] != 2 or x.shape[1] != _mode_count(dim, modes) or x.shape[3] != weights[0].shape[0]:
        raise ValueError(
            f"planar spectrum of shape {tuple(x.shape)}; expected (2, {_mode_count(dim, modes)}, B, {weights[0].shape[0]})"
        )
    apply = cast(_ContractionApply, SpectralContraction.apply)
    return apply(x, *weights)


# ----------------------------------------------------------------------------------------------
# Layout conversions and the einsum reference (tests, benchmarks)


def packed_to_planar(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Packed complex (B, m, 2K, …, 2K, K) → planar real (2, M, B, m)."""
    b, m = t.shape[:2]
    return torch.view_as_real(t).reshape(b, m, -1, 2).permute(3, 2, 0, 1).contiguous()


def planar_to_packed(z: torch.Tensor, modes: int, dim: int) -> torch.Tensor:
    """Planar real (2, M, B, m) → packed complex (B, m, 2K, …, 2K, K)."""
    b, m = z.shape[2:]
    out = z.permute(2, 3, 1, 0).contiguous()
    return torch.view_as_complex(out.view((b, m) + (2 * modes,) * (dim - 1) + (modes, 2)))


def einsum_contraction(x: torch.Tensor, weights: Iterable[torch.Tensor]) -> torch.Tensor:
    """Reference on the packed complex layout (B, m_in, 2K, …, 2K, K): one complex einsum per corner."""
    weights = list(weights)
    dim, modes = weights[0].dim() - 2, weights[0].shape[-1]
    letters = "xyz"[:dim]
    equation = f"bi{letters},io{letters}->bo{letters}"
    out = x.new_zeros((x.shape[0], weights[0].shape[1]) + tuple(x.shape[2:]))
    for c, w in enumerate(weights):
        flags = [(c >> (dim - 2 - j)) & 1 for j in range(dim - 1)]
        index = (slice(None), slice(None)) + tuple(slice(f * modes, (f + 1) * modes) for f in flags)
        out[index] = torch.einsum(equation, x[index].contiguous(), w)
    return out


__all__ = [
    "SpectralContraction",
    "TruncatedDFT",
    "TruncatedIDFT",
    "einsum_contraction",
    "packed_frequencies",
    "packed_to_planar",
    "planar_to_packed",
    "spectral_contraction",
    "truncated_dft",
    "truncated_idft",
]
