"""Galerkin / Fourier Transformer (Cao, NeurIPS 2021) on point sets.

Attention (per head, no softmax; 1/n is the quadrature weight, n the number
of real points of the sample):

- Galerkin type: z = Q (K̃ᵀ Ṽ) / n, LayerNorm per head on K and V. Computed
  in this order only: the largest intermediate is (d_h+d_c)×(d_h+d_c) per
  head, never n×n (cost O(n·d²)).
- Fourier type: z = (Q̃ K̃ᵀ) V / n, LayerNorm per head on Q and K. There is
  no softmax, so associativity holds exactly and the same linear order
  Q̃ (K̃ᵀ V) / n is used by default: the Fourier path is linear too.
  ``attention_impl="quadratic"`` forms the n×n matrix (Q Kᵀ/n) explicitly
  for either type (the reference, for tests and benchmarks).

Positional encoding: the coordinates are concatenated to the input and, after
the LayerNorms, to every head's q, k and v (``coord_in_heads``); the output
projection maps heads·(d_h + d_coord) → width. Encoder layer (the paper's, no
LayerNorm outside the attention): y ← y + Attn(y); y ← y + FFN(y), FFN a
two-layer pointwise MLP (SiLU, the paper's Table 6 activation). Init of
W^Q, W^K, W^V (Eq. 17): η·U + δ·I, U Xavier-uniform with gain 1,
η = δ = 1e-2, biases 0 (the output projection's bias is zeroed too).

Choices where the paper does not fit a point-set interface (documented in
docs/operators.md): the CNN down/up-sampling and spectral-convolution decoders
need a regular grid and are not provided; the decoder is a pointwise MLP
(the paper's choice for non-smooth targets). Dropout is not provided.

Width-muP (``width_parametrization="mup"``): the embedding is the input
layer, Q/K/V/out projections, FFN layers and the decoder's first layer are
hidden, the decoder's last layer is the readout. The attention has no
1/√d_h in the paper; under muP its d_h-contraction is multiplied by
√(d0_h/d_h) = attention_scale(d_h, "mup", d0_h)/attention_scale(d_h,
"standard") (operators.width_mup.relative_attention_scale), i.e. the
1/√d_h → 1/d_h rule relative to the paper's scale, exact at the base width.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from operators.attention_facts import declare_attention
from operators.errors import OperatorConfigError
from operators.pointset import (
    ATTENTION_IMPLS,
    HeadLayerNorm,
    PointMLP,
    check_choice,
    check_heads,
    check_in_channels,
    check_positive_int,
    merge_heads,
    point_counts,
    prepare_points,
    split_heads,
    zero_padded,
)
from operators.width_mup import MuLinear, WidthSpec

ATTENTION_TYPES = ("galerkin", "fourier")


class GalerkinAttention(nn.Module):
    """Softmax-free attention of the Galerkin (LN on K, V) or Fourier (LN on Q, K) type.

    Input x (B, n, width), optional coords (B, n, coord_dim) appended to each
    head's q, k, v after the LayerNorms, optional mask (B, n); output (B, n, width).
    """

    def __init__(
        self,
        width: int,
        heads: int,
        coord_dim: int = 0,
        attention_type: str = "galerkin",
        spec: WidthSpec | None = None,
        attention_impl: str = "linear",
        init_gain: float = 1e-2,
        init_diagonal: float = 1e-2,
    ):
        super().__init__()
        spec = spec or WidthSpec("standard", width, None)
        check_choice("attention_type", attention_type, ATTENTION_TYPES)
        check_choice("attention_impl", attention_impl, ATTENTION_IMPLS)
        check_heads(width, heads, spec.base_width, spec.is_mup)
        self.heads, self.head_dim, self.coord_dim = heads, width // heads, coord_dim
        self.attention_type, self.attention_impl = attention_type, attention_impl
        self.query = MuLinear(width, width, "hidden", spec)
        self.key = MuLinear(width, width, "hidden", spec)
        self.value = MuLinear(width, width, "hidden", spec)
        first, second = ("key", "value") if attention_type == "galerkin" else ("query", "key")
        self.normalized = (first, second)
        self.norms = nn.ModuleDict(
            {first: HeadLayerNorm(heads, self.head_dim), second: HeadLayerNorm(heads, self.head_dim)}
        )
        self.out = MuLinear(heads * (self.head_dim + coord_dim), width, "hidden", spec)
        self.scale = spec.relative_attention_scale(heads)
        declare_attention(self, head_dim=self.head_dim, scale="scale")  # muP's 1/d_h from the facts, too
        with torch.no_grad():
            for layer in (self.query, self.key, self.value):
                nn.init.xavier_uniform_(layer.weight, gain=1.0)
                layer.weight.mul_(init_gain).add_(init_diagonal * torch.eye(width))
                layer.bias.zero_()
            self.out.bias.zero_()

    def _qkv(self, x: torch.Tensor, coords: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = (split_heads(layer(x), self.heads) for layer in (self.query, self.key, self.value))
        parts = {"query": q, "key": k, "value": v}
        for name in self.normalized:
            parts[name] = self.norms[name](parts[name])
        q, k, v = parts["query"], parts["key"], parts["value"]
        if self.coord_dim:
            assert coords is not None, "an attention with coord_dim > 0 needs coords"
            c = coords.unsqueeze(1).expand(-1, self.heads, -1, -1)
            q, k, v = (torch.cat([t, c], dim=-1) for t in (q, k, v))
        return q, k, v

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        q, k, v = self._qkv(x, coords)
        m = mask[:, None, :, None].to(x.dtype)
        k, v = k * m, v * m  # padded keys/values leave every sum
        n = point_counts(mask, x.dtype)[:, None, None, None]
        if self.attention_impl == "linear":
            z = q @ (k.transpose(-1, -2) @ v / n)
        else:
            z = (q @ k.transpose(-1, -2) / n) @ v
        if self.scale != 1.0:
            z = z * self.scale
        out: torch.Tensor = self.out(merge_heads(z))
        return out

    def attention_matrix(
        self, x: torch.Tensor, coords: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The (B, heads, n, n) kernel matrix Q Kᵀ/n (LN'd as the type says; quadratic, for diagnostics)."""
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        q, k, _ = self._qkv(x, coords)
        k = k * mask[:, None, :, None].to(x.dtype)
        return q @ k.transpose(-1, -2) / point_counts(mask, x.dtype)[:, None, None, None] * self.scale


class GalerkinEncoderLayer(nn.Module):
    """y ← y + Attn(y); y ← y + FFN(y) (no LayerNorm outside the attention)."""

    def __init__(
        self,
        width: int,
        heads: int,
        coord_dim: int,
        attention_type: str,
        ffn_ratio: int,
        spec: WidthSpec,
        attention_impl: str,
        init_gain: float,
        init_diagonal: float,
    ):
        super().__init__()
        self.attention = GalerkinAttention(
            width, heads, coord_dim, attention_type, spec, attention_impl, init_gain, init_diagonal
        )
        self.ffn = PointMLP(width, ffn_ratio * width, width, ("hidden", "hidden"), spec, nn.SiLU)

    def forward(self, y: torch.Tensor, coords: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = y + self.attention(y, coords, mask)
        ffn: torch.Tensor = self.ffn(y)
        return y + ffn


class GalerkinTransformer(nn.Module):
    """Galerkin/Fourier Transformer encoder on point sets with a pointwise decoder.

    Args:
        coord_dim: d_coord, coordinates per point.
        in_channels, out_channels: input/output function channels per point.
        width: model width d (heads · d_h).
        layers: encoder layers.
        heads: attention heads.
        attention_type: "galerkin" (LN on K, V) or "fourier" (LN on Q, K).
        ffn_ratio: FFN hidden size = ffn_ratio · width.
        coord_in_heads: append coordinates to every head's q, k, v.
        init_gain, init_diagonal: η and δ of the Q/K/V init η·U + δ·I.
        width_parametrization, base_width: width-muP (operators.width_mup).
        attention_impl: "linear" (default) or "quadratic" (explicit n×n reference).

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
        heads: int = 4,
        attention_type: str = "galerkin",
        ffn_ratio: int = 2,
        coord_in_heads: bool = True,
        init_gain: float = 1e-2,
        init_diagonal: float = 1e-2,
        width_parametrization: str = "standard",
        base_width: int | None = None,
        attention_impl: str = "linear",
    ):
        super().__init__()
        for name, value in (
            ("coord_dim", coord_dim),
            ("out_channels", out_channels),
            ("layers", layers),
            ("ffn_ratio", ffn_ratio),
        ):
            check_positive_int(name, value)
        check_in_channels(in_channels)
        spec = WidthSpec(width_parametrization, width, base_width)
        check_choice("attention_type", attention_type, ATTENTION_TYPES)
        check_choice("attention_impl", attention_impl, ATTENTION_IMPLS)
        check_heads(width, heads, base_width, spec.is_mup)
        if not (math.isfinite(init_gain) and math.isfinite(init_diagonal)):
            raise OperatorConfigError(
                f"init_gain {init_gain!r} / init_diagonal {init_diagonal!r}: must be finite numbers (paper: 1e-2 each)"
            )
        self.config = dict(
            coord_dim=coord_dim,
            in_channels=in_channels,
            out_channels=out_channels,
            width=width,
            layers=layers,
            heads=heads,
            attention_type=attention_type,
            ffn_ratio=ffn_ratio,
            coord_in_heads=bool(coord_in_heads),
            init_gain=float(init_gain),
            init_diagonal=float(init_diagonal),
            width_parametrization=width_parametrization,
            base_width=base_width,
            attention_impl=attention_impl,
        )
        self.width_spec = spec
        self.coord_dim, self.in_channels = coord_dim, in_channels
        self.embed = MuLinear(in_channels + coord_dim, width, "input", spec)
        head_coords = coord_dim if coord_in_heads else 0
        self.layers = nn.ModuleList(
            GalerkinEncoderLayer(
                width, heads, head_coords, attention_type, ffn_ratio, spec, attention_impl, init_gain, init_diagonal
            )
            for _ in range(layers)
        )
        self.decoder = PointMLP(width, width, out_channels, ("hidden", "output"), spec, nn.SiLU)

    def forward(
        self, coords: torch.Tensor, features: torch.Tensor | None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        coords, features, mask = prepare_points(coords, features, mask, self.coord_dim, self.in_channels)
        y = self.embed(torch.cat([features, coords], dim=-1))
        for layer in self.layers:
            y = layer(y, coords, mask)
        return zero_padded(self.decoder(y), mask)
