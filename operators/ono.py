"""ONO — Orthogonal Neural Operator (Xiao et al., ICML 2024) on point sets.

Two flows from one encoder (the authors' code: one MLP lifts cat(features,
coords) to 2·width, split into the eigenfunction flow x and the solution flow
h). Each block:

    x ← x + Attn(LN(x));  x ← x + FFN(LN(x))                 (NN block, pre-LN, Eq. 3)
    ĝ = proj(x) ∈ R^{n×k};  ψ = ort(ĝ) = ĝ L^{-T}            (Eqs. 4, 7-8)
    h̃ = ψ diag(μ) [ψᵀ (h W_V)] / n                           (Eq. 5, linear order)
    h ← FFN(LN(h̃ + h))                                       (Eq. 6, no residual around the FFN)

The last block's FFN maps to the output channels (it "serves as P").

ort(·): ONE whitening for the whole batch. C = Σ_b Σ_{real j} ĝ_bj ĝ_bjᵀ / (number
of real points in the batch) — uncentred, as Eq. 7 — and C = L Lᵀ (Cholesky,
with diagonal jitter 1e-6·10^i·mean(diag C), i = 0…9, only when C is not
numerically PD). Training uses the batch C (gradients flow through the
Cholesky) and updates a running estimate like BatchNorm:
``running_second_moment ← (1 − momentum)·running + momentum·C`` (momentum 0.1,
i.e. the code's 0.9/0.1 EMA); the first training batch initialises it.
Evaluation uses the running estimate only, so it is deterministic and does
not depend on the batch composition. The buffer and ``num_batches_tracked``
are in the state dict. Before any training batch the buffer is the identity.

Choices where the papers and the authors' code disagree (see
/work/shared/notes/ono.md and docs/operators.md):

- 1/n quadrature (``quadrature="mean"``, default): neither the papers nor the
  code divide ψᵀh by n. We do: with the whitening normalised by the number of
  points, (1/n)·ψᵀψ ≈ I, so ψ diag(μ) ψᵀ/n is the truncated Mercer operator
  Σ μ_i ψ_i⟨ψ_i, h⟩ with a quadrature inner product, independent of n (the
  same weights run on any mesh). ``quadrature="sum"`` is the papers' form.
- W_V (``value_projection=True``, default): the papers have it (Eq. 5), the
  code does not; False drops it.
- μ > 0 as softplus(μ_raw), μ_raw initialised at 0 (the code; the papers do
  not say).
- The last FFN is two layers (the papers' "FFN ... serves as P"); the code
  uses a single Linear.
- NN block: "galerkin" (default, the Galerkin attention of
  operators.galerkin without coordinates in the heads) or "linear"
  (Katharopoulos et al., elu+1 feature map). Both are linear in n and
  order-free, so ONO is permutation-equivariant. The Nyström block of the
  main results is not provided (its landmarks are means over consecutive
  points, not order-free, and it needs a sequence convolution).
- ``orthogonalization="none"`` (ONO⁻, ψ = ĝ) and ``"layernorm"`` are the
  ablation variants; the BatchNorm ablation and the cross-attention variant
  (Eq. 20, outputs at other points) are not provided.
- Activation GELU (the code; the papers do not name one).

Width-muP: the encoder's first layer is the input layer; attention, W_V and
FFN layers are hidden; the last FFN layer is the readout (×m0/m). proj
(width → k, k fixed) is a *hidden* layer (LR η·m0/m, no multiplier) although
its fan-out is fixed: ψ = whiten(ĝ) does not change when ĝ is multiplied by
a constant, so what must stay Θ(η) per Adam step is ĝ's update *relative* to
ĝ, as for a layer feeding a normalisation. The readout rule (LR η, ĝ = (m0/m)·W x +
b) made it grow: W x is Θ(1) at init while Adam moves it by Θ(m·η), and the
m0/m multiplier cannot help because the whitening divides it out again — or,
with proj's bias, shrinks the point-varying part of ĝ against the bias. ψ's
update grew ∝ m^0.6…0.9 (measured in docs/operators.md, "Width-muP"; test
tests/diagnostics/test_width_check.py). μ, LayerNorms and biases are not width parameters.
The orthogonal attention contracts over k and over points, not over width, so
no attention-scale rule applies to it; the Galerkin NN block applies its own.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from operators.errors import OperatorConfigError
from operators.galerkin import GalerkinAttention
from operators.pointset import (
    ATTENTION_IMPLS,
    PointMLP,
    check_choice,
    check_heads,
    check_in_channels,
    check_positive_int,
    merge_heads,
    normalized_attention,
    point_counts,
    prepare_points,
    split_heads,
    zero_padded,
)
from operators.width_mup import MuLinear, WidthSpec

NN_BLOCKS = ("galerkin", "linear")
ORTHOGONALIZATIONS = ("whiten", "none", "layernorm")
QUADRATURES = ("mean", "sum")


def safe_cholesky(matrix: torch.Tensor, max_tries: int = 10) -> torch.Tensor:
    """Lower Cholesky factor of a symmetric PSD matrix (…, k, k); where it is not positive definite, the factor of
    matrix + 1e-6·10^i·mean(diag)·I for the first i < ``max_tries`` that is. Branch-free, so that ``vmap`` batches it
    (a population of ONOs, operators.population_vmap): the jitter is chosen without gradients, the plain and every
    jittered matrix factored in one batched call and the first that succeeded taken; then the matrix with that
    jitter is factored once more, with gradients (a failed factor's backward is NaN). A matrix that no jitter makes
    positive definite (NaN or inf entries) gives a NaN factor: the training then diverges."""
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    scale = matrix.diagonal(dim1=-2, dim2=-1).mean(dim=-1).abs().clamp_min(torch.finfo(matrix.dtype).tiny)
    jitters = torch.tensor([0.0] + [1e-6 * 10**i for i in range(max_tries)], dtype=matrix.dtype, device=matrix.device)
    with torch.no_grad():
        tries = matrix.unsqueeze(-3) + (jitters[:, None, None] * scale[..., None, None, None]) * eye  # (…, T, k, k)
        good = torch.linalg.cholesky_ex(tries).info == 0  # (…, T)
        first = torch.argmax(good.to(torch.int8), dim=-1)  # the first that succeeded (0 when none did)
    jitter = jitters[first] * scale  # (…,): 0 where the plain matrix factors
    factor = torch.linalg.cholesky_ex(matrix + jitter[..., None, None] * eye).L
    return torch.where(good.any(dim=-1)[..., None, None], factor, torch.full_like(factor, math.nan))


class OrthogonalAttention(nn.Module):
    """ψ diag(μ) ψᵀ (h W_V) / n with ψ = ĝ L^{-T} whitened over the batch (see the module docstring)."""

    # buffers (registered in __init__)
    running_second_moment: torch.Tensor
    num_batches_tracked: torch.Tensor

    def __init__(
        self,
        width: int,
        eigenfunctions: int,
        spec: WidthSpec | None = None,
        momentum: float = 0.1,
        orthogonalization: str = "whiten",
        quadrature: str = "mean",
        value_projection: bool = True,
        attention_impl: str = "linear",
    ):
        super().__init__()
        spec = spec or WidthSpec("standard", width, None)
        check_positive_int("eigenfunctions", eigenfunctions)
        check_choice("orthogonalization", orthogonalization, ORTHOGONALIZATIONS)
        check_choice("quadrature", quadrature, QUADRATURES)
        check_choice("attention_impl", attention_impl, ATTENTION_IMPLS)
        if not 0.0 < momentum <= 1.0:
            raise OperatorConfigError(
                f"momentum {momentum!r}: must be in (0, 1] (weight of the new batch, BatchNorm convention)"
            )
        self.eigenfunctions, self.momentum = eigenfunctions, float(momentum)
        self.orthogonalization, self.quadrature, self.attention_impl = orthogonalization, quadrature, attention_impl
        # width → k, but followed by the scale-invariant whitening: a hidden layer for width-muP (see the module doc)
        self.proj = MuLinear(width, eigenfunctions, "hidden", spec)
        self.mu = nn.Parameter(torch.zeros(eigenfunctions))
        self.value = MuLinear(width, width, "hidden", spec, bias=False) if value_projection else nn.Identity()
        self.norm = nn.LayerNorm(eigenfunctions) if orthogonalization == "layernorm" else None
        self.register_buffer("running_second_moment", torch.eye(eigenfunctions))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def eigenvalues(self) -> torch.Tensor:
        """The positive eigenvalues μ = softplus(μ_raw), (k,)."""
        return F.softplus(self.mu)

    def second_moment(self, g: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(1/#real points) Σ_b Σ_j g_bj g_bjᵀ over the real points of the batch; g zero at padding."""
        return torch.einsum("bnk,bnl->kl", g, g) / mask.sum().to(g.dtype)

    def eigenfunctions_of(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ψ (B, n, k), zero at padded points; updates the running estimate in training mode."""
        g = zero_padded(self.proj(x), mask)
        if self.orthogonalization == "none":
            return g
        if self.orthogonalization == "layernorm":
            assert self.norm is not None, "built with orthogonalization 'layernorm'"
            return zero_padded(self.norm(g), mask)
        if self.training:
            c = self.second_moment(g, mask)
            with torch.no_grad():  # the first batch's moment as it is, then the running average (no .item(): vmap)
                weight = torch.where(self.num_batches_tracked == 0, 1.0, self.momentum)
                weight = weight.to(self.running_second_moment.dtype)
                self.running_second_moment.mul_(1.0 - weight).add_(weight * c)
                self.num_batches_tracked += 1
        else:
            c = self.running_second_moment.to(g.dtype)
        factor = safe_cholesky(c)
        # ψ Lᵀ = ĝ  ⇔  ψ = ĝ L^{-T}; padded rows stay zero.
        psi: torch.Tensor = torch.linalg.solve_triangular(factor.transpose(-1, -2), g, upper=True, left=False)
        return psi

    def forward(self, x: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        psi = self.eigenfunctions_of(x, mask)
        v = zero_padded(self.value(h), mask)
        weighted = psi * self.eigenvalues()
        if self.attention_impl == "linear":
            coefficients = psi.transpose(-1, -2) @ v  # (B, k, width)
            if self.quadrature == "mean":
                coefficients = coefficients / point_counts(mask, v.dtype)[:, None, None]
            return weighted @ coefficients
        kernel = weighted @ psi.transpose(-1, -2)  # (B, n, n), the reference
        if self.quadrature == "mean":
            kernel = kernel / point_counts(mask, v.dtype)[:, None, None]
        return kernel @ v


class LinearAttention(nn.Module):
    """Linear Transformer attention (Katharopoulos et al. 2020): φ(q)(φ(k)ᵀv)/φ(q)·Σφ(k), φ = elu + 1."""

    def __init__(self, width: int, heads: int, spec: WidthSpec, attention_impl: str = "linear"):
        super().__init__()
        self.heads, self.attention_impl = heads, attention_impl
        self.query = MuLinear(width, width, "hidden", spec)
        self.key = MuLinear(width, width, "hidden", spec)
        self.value = MuLinear(width, width, "hidden", spec)
        self.out = MuLinear(width, width, "hidden", spec)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        q = F.elu(split_heads(self.query(x), self.heads)) + 1.0
        k = F.elu(split_heads(self.key(x), self.heads)) + 1.0
        v = split_heads(self.value(x), self.heads)
        out: torch.Tensor = self.out(merge_heads(normalized_attention(q, k, v, mask, self.attention_impl)))
        return out


class ONOBlock(nn.Module):
    """NN block on the eigenfunction flow, then orthogonal attention and FFN(LN(h̃ + h)) on the solution flow."""

    def __init__(
        self,
        width: int,
        eigenfunctions: int,
        heads: int,
        ffn_ratio: int,
        nn_block: str,
        spec: WidthSpec,
        momentum: float,
        orthogonalization: str,
        quadrature: str,
        value_projection: bool,
        attention_impl: str,
        out_channels: int | None = None,
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention: GalerkinAttention | LinearAttention
        if nn_block == "galerkin":
            self.attention = GalerkinAttention(width, heads, 0, "galerkin", spec, attention_impl)
        else:
            self.attention = LinearAttention(width, heads, spec, attention_impl)
        self.norm2 = nn.LayerNorm(width)
        self.ffn = PointMLP(width, ffn_ratio * width, width, ("hidden", "hidden"), spec)
        self.orthogonal = OrthogonalAttention(
            width, eigenfunctions, spec, momentum, orthogonalization, quadrature, value_projection, attention_impl
        )
        self.norm3 = nn.LayerNorm(width)
        last = out_channels is not None
        self.out_ffn = PointMLP(
            width,
            ffn_ratio * width,
            out_channels if out_channels is not None else width,
            ("hidden", "output" if last else "hidden"),
            spec,
        )

    def forward(self, x: torch.Tensor, h: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x + self.attention(self.norm1(x), None, mask)
        x = x + self.ffn(self.norm2(x))
        h = self.out_ffn(self.norm3(self.orthogonal(x, h, mask) + h))
        return x, h


class ONO(nn.Module):
    """Orthogonal Neural Operator on point sets.

    Args:
        coord_dim, in_channels, out_channels: per-point coordinates, input and output channels.
        width: d, width of both flows.
        layers: number of ONO blocks.
        eigenfunctions: k, the number of learned eigenfunctions (paper: 8 or 16).
        heads: heads of the NN-block attention.
        ffn_ratio: FFN hidden size = ffn_ratio · width.
        nn_block: "galerkin" or "linear".
        momentum: weight of the new batch in the running second moment (BatchNorm convention).
        orthogonalization: "whiten" (ONO), "none" (ONO⁻) or "layernorm" (ablation).
        quadrature: "mean" (ψᵀh/n, default) or "sum" (the papers' and code's ψᵀh).
        value_projection: use W_V (Eq. 5).
        width_parametrization, base_width: width-muP (operators.width_mup).
        attention_impl: "linear" (default) or "quadratic" (explicit n×n references).

    forward(coords (B, n, d_coord), features (B, n, C_in), mask (B, n) | None)
    → (B, n, C_out), zero at padded points.
    """

    def __init__(
        self,
        coord_dim: int,
        in_channels: int,
        out_channels: int,
        width: int = 64,
        layers: int = 4,
        eigenfunctions: int = 16,
        heads: int = 4,
        ffn_ratio: int = 2,
        nn_block: str = "galerkin",
        momentum: float = 0.1,
        orthogonalization: str = "whiten",
        quadrature: str = "mean",
        value_projection: bool = True,
        width_parametrization: str = "standard",
        base_width: int | None = None,
        attention_impl: str = "linear",
    ):
        super().__init__()
        for name, value in (
            ("coord_dim", coord_dim),
            ("out_channels", out_channels),
            ("layers", layers),
            ("eigenfunctions", eigenfunctions),
            ("ffn_ratio", ffn_ratio),
        ):
            check_positive_int(name, value)
        check_in_channels(in_channels)
        spec = WidthSpec(width_parametrization, width, base_width)
        check_heads(width, heads, base_width, spec.is_mup)
        check_choice("nn_block", nn_block, NN_BLOCKS)
        check_choice("orthogonalization", orthogonalization, ORTHOGONALIZATIONS)
        check_choice("quadrature", quadrature, QUADRATURES)
        check_choice("attention_impl", attention_impl, ATTENTION_IMPLS)
        self.config = dict(
            coord_dim=coord_dim,
            in_channels=in_channels,
            out_channels=out_channels,
            width=width,
            layers=layers,
            eigenfunctions=eigenfunctions,
            heads=heads,
            ffn_ratio=ffn_ratio,
            nn_block=nn_block,
            momentum=float(momentum),
            orthogonalization=orthogonalization,
            quadrature=quadrature,
            value_projection=bool(value_projection),
            width_parametrization=width_parametrization,
            base_width=base_width,
            attention_impl=attention_impl,
        )
        self.width_spec = spec
        self.coord_dim, self.in_channels, self.width = coord_dim, in_channels, width
        self.encoder = PointMLP(in_channels + coord_dim, 2 * width, 2 * width, ("input", "hidden"), spec)
        self.blocks = nn.ModuleList(
            ONOBlock(
                width,
                eigenfunctions,
                heads,
                ffn_ratio,
                nn_block,
                spec,
                momentum,
                orthogonalization,
                quadrature,
                value_projection,
                attention_impl,
                out_channels if i == layers - 1 else None,
            )
            for i in range(layers)
        )

    def forward(
        self, coords: torch.Tensor, features: torch.Tensor | None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        coords, features, mask = prepare_points(coords, features, mask, self.coord_dim, self.in_channels)
        x, h = self.encoder(torch.cat([features, coords], dim=-1)).split(self.width, dim=-1)
        for block in self.blocks:
            x, h = block(x, h, mask)
        return zero_padded(h, mask)

    def orthogonal_attentions(self) -> list[OrthogonalAttention]:
        return [cast(ONOBlock, block).orthogonal for block in self.blocks]
