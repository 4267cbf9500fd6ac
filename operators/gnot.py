"""GNOT — General Neural Operator Transformer (Hao et al., ICML 2023) on point sets.

Inputs: query points (where the output is evaluated), L input functions, each
a point set (coords_l, features_l, mask_l) with its own number of points, and
an optional parameter vector θ (B, p). Each input function has its own
encoder MLP f_l(x, a(x)); the query points have one on their coordinates.

Normalized linear attention (Eqs. 3-6), per head, softmax over the FEATURE
dimension of each query and key:

    q̃ = softmax(q), k̃ = softmax(k);  z_t = q̃_t·(Σ_i k̃_i ⊗ v_i) / q̃_t·(Σ_j k̃_j)

so the weights q̃_t·k̃_i / Σ_j q̃_t·k̃_j are positive and sum to 1 over the real
keys; the N×M matrix is never formed (``attention_impl="quadratic"`` forms it,
for reference). Padded keys are masked out of both sums, so padding never
changes the result (the authors' code pads with zeros and masks nothing).

Heterogeneous cross-attention (Eqs. 7-8): one W_q, and per input function its
own LayerNorm, W_k^l and W_v^l; each input is normalised on its own:

    z_t = q̃_t + (1/L) Σ_l z_t^l.

Block (paper + code): g = softmax(Gate(query coords)) — the gate sees only
coordinates (geometric gating);
x ← x + CrossAttn(LN(x), [LN_l(y_l)]); x ← x + LN(Σ_i g_i E_i(x));
x ← x + SelfAttn(LN(x)); x ← x + LN(Σ_i g_i E'_i(x)). Experts are
Linear(w, r·w)–GELU–Linear(r·w, w); the gate is Linear(d_coord, 4w)–GELU–
Linear(4w, 4w)–GELU–Linear(4w, K); the decoder Linear(w, w)–GELU–Linear(w, C_out).
The input-function encodings y_l are computed once and reused by every block.

Choices where the paper and the code disagree (docs/operators.md):

- θ: a separate MLP gives one extra key/value token Y = f(θ) ∈ R^{1×w}
  (the paper, ``theta_mode="token"``, default); ``theta_mode="query"``
  concatenates θ to every query coordinate (the code).
- Cross-attention averages over inputs with 1/L (the paper,
  ``input_reduction="mean"``); ``"sum"`` is the code's sum.
- Self-attention: z_t = Σ_i α q̃_t·k̃_i v_i (the paper, Eqs. 9-10);
  ``self_attention_query_residual=True`` adds +q̃_t as the code does.
- ``inputs=None``: the query point set (coords, features, mask) is itself the
  one input function (the code's convention for grid datasets).

Width-muP: encoders' first layers and the gate's first layer are input
layers; attention projections, experts, encoders' and gate's second layers
and the decoder's first layer are hidden; the decoder's last layer and the
gate's last layer (→ K experts) are readouts. GNOT's attention has no dot
product logits (the softmax acts on each vector's own features and the
weights are renormalised to be convex), so the 1/√d_h → 1/d_h rule has
nothing to act on; LayerNorms and biases are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from operators.errors import OperatorConfigError
from operators.pointset import (
    ATTENTION_IMPLS,
    PointMLP,
    check_choice,
    check_heads,
    check_positive_int,
    merge_heads,
    normalized_attention,
    prepare_points,
    split_heads,
    zero_padded,
)
from operators.width_mup import MuLinear, WidthSpec

#: one input function: coords (B, M, d), features (B, M, C) or None, mask (B, M) or None
PointSet = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]

THETA_MODES = ("token", "query")
INPUT_REDUCTIONS = ("mean", "sum")


class NormalizedAttention(nn.Module):
    """Heterogeneous normalized attention: one query projection, one (W_k, W_v) per key set.

    forward(x (B, N, w), key_sets [(B, M_l, w)], key_masks [(B, M_l)]) → (B, N, w).
    With one key set equal to x it is GNOT's self-attention.
    """

    def __init__(
        self,
        width: int,
        heads: int,
        key_sets: int,
        spec: WidthSpec,
        query_residual: bool,
        reduction: str = "mean",
        attention_impl: str = "linear",
    ):
        super().__init__()
        self.heads, self.query_residual, self.reduction, self.attention_impl = (
            heads,
            query_residual,
            reduction,
            attention_impl,
        )
        self.query = MuLinear(width, width, "hidden", spec)
        self.keys = nn.ModuleList(MuLinear(width, width, "hidden", spec) for _ in range(key_sets))
        self.values = nn.ModuleList(MuLinear(width, width, "hidden", spec) for _ in range(key_sets))
        self.out = MuLinear(width, width, "hidden", spec)

    def feature_softmax_query(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(self.query(x), self.heads).softmax(dim=-1)

    def forward(
        self, x: torch.Tensor, key_sets: Sequence[torch.Tensor], key_masks: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        q = self.feature_softmax_query(x)
        total: torch.Tensor | float = 0.0
        for y, mask, key, value in zip(key_sets, key_masks, self.keys, self.values):
            k = split_heads(key(y), self.heads).softmax(dim=-1)
            v = split_heads(value(y), self.heads)
            total = total + normalized_attention(q, k, v, mask, self.attention_impl)
        if self.reduction == "mean":
            total = total / len(self.keys)
        if self.query_residual:
            total = total + q
        assert isinstance(total, torch.Tensor), "at least one key set"
        out: torch.Tensor = self.out(merge_heads(total))
        return out


class GatedMixture(nn.Module):
    """Σ_i g_i(x_t) E_i(z_t) with gate weights g (B, N, K) computed from coordinates."""

    def __init__(self, width: int, experts: int, ffn_ratio: int, spec: WidthSpec):
        super().__init__()
        self.experts = nn.ModuleList(
            PointMLP(width, ffn_ratio * width, width, ("hidden", "hidden"), spec) for _ in range(experts)
        )

    def forward(self, z: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor | float = 0.0
        for i, expert in enumerate(self.experts):
            out = out + gate[..., i : i + 1] * expert(z)
        assert isinstance(out, torch.Tensor), "at least one expert"
        return out


class GNOTBlock(nn.Module):
    def __init__(
        self,
        width: int,
        heads: int,
        key_sets: int,
        experts: int,
        ffn_ratio: int,
        coord_dim: int,
        spec: WidthSpec,
        reduction: str,
        self_residual: bool,
        attention_impl: str,
    ):
        super().__init__()
        self.gate = nn.Sequential(
            MuLinear(coord_dim, 4 * width, "input", spec),
            nn.GELU(),
            MuLinear(4 * width, 4 * width, "hidden", spec),
            nn.GELU(),
            MuLinear(4 * width, experts, "output", spec),
        )
        self.norm_query = nn.LayerNorm(width)
        self.norm_inputs = nn.ModuleList(nn.LayerNorm(width) for _ in range(key_sets))
        self.cross = NormalizedAttention(width, heads, key_sets, spec, True, reduction, attention_impl)
        self.mixture1 = GatedMixture(width, experts, ffn_ratio, spec)
        self.norm_mixture1 = nn.LayerNorm(width)
        self.norm_self = nn.LayerNorm(width)
        self.self_attention = NormalizedAttention(width, heads, 1, spec, self_residual, "mean", attention_impl)
        self.mixture2 = GatedMixture(width, experts, ffn_ratio, spec)
        self.norm_mixture2 = nn.LayerNorm(width)

    def gate_weights(self, coords: torch.Tensor) -> torch.Tensor:
        """p(x_t) = softmax(G(x_t)), (B, N, K): a function of the query coordinates only."""
        logits: torch.Tensor = self.gate(coords)
        return logits.softmax(dim=-1)

    def forward(
        self,
        x: torch.Tensor,
        coords: torch.Tensor,
        mask: torch.Tensor,
        inputs: Sequence[torch.Tensor],
        input_masks: Sequence[torch.Tensor],
    ) -> torch.Tensor:
        gate = self.gate_weights(coords)
        x = x + self.cross(self.norm_query(x), [norm(y) for norm, y in zip(self.norm_inputs, inputs)], input_masks)
        x = x + self.norm_mixture1(self.mixture1(x, gate))
        xn = self.norm_self(x)
        x = x + self.self_attention(xn, [xn], [mask])
        mixed: torch.Tensor = self.norm_mixture2(self.mixture2(x, gate))
        return x + mixed


class GNOT(nn.Module):
    """General Neural Operator Transformer.

    Args:
        coord_dim: coordinates per point (query points and input functions alike).
        in_channels: channels of the input function(s): an int for one input
            function, a list for several (0 = a shape given by coordinates only).
        out_channels: output channels at the query points.
        theta_dim: length p of the parameter vector θ (0: none).
        width: n_e; layers: blocks; heads: attention heads.
        experts: K experts per mixture; ffn_ratio: expert hidden size / width.
        theta_mode: "token" (paper) or "query" (code), see the module docstring.
        input_reduction: "mean" (paper, 1/L) or "sum" (code).
        self_attention_query_residual: add q̃ in self-attention (code) or not (paper).
        width_parametrization, base_width: width-muP (operators.width_mup).
        attention_impl: "linear" (default) or "quadratic" (explicit N×M reference).

    forward(coords (B, N, d), features (B, N, C) | None, mask (B, N) | None,
    inputs=[(coords_l, features_l, mask_l), ...] | None, theta (B, p) | None)
    → (B, N, C_out) at the query points, zero at padded ones.
    """

    def __init__(
        self,
        coord_dim: int,
        in_channels: int | list[int],
        out_channels: int,
        theta_dim: int = 0,
        width: int = 64,
        layers: int = 3,
        heads: int = 4,
        experts: int = 1,
        ffn_ratio: int = 2,
        theta_mode: str = "token",
        input_reduction: str = "mean",
        self_attention_query_residual: bool = False,
        width_parametrization: str = "standard",
        base_width: int | None = None,
        attention_impl: str = "linear",
    ):
        super().__init__()
        for name, value in (
            ("coord_dim", coord_dim),
            ("out_channels", out_channels),
            ("layers", layers),
            ("experts", experts),
            ("ffn_ratio", ffn_ratio),
        ):
            check_positive_int(name, value)
        channels = [in_channels] if isinstance(in_channels, int) else list(in_channels)
        if not channels or any(not isinstance(c, int) or isinstance(c, bool) or c < 0 for c in channels):
            raise OperatorConfigError(
                f"in_channels {in_channels!r}: give a non-negative int or a non-empty list of them (one per input function)"
            )
        if not isinstance(theta_dim, int) or theta_dim < 0:
            raise OperatorConfigError(
                f"theta_dim {theta_dim!r}: must be a non-negative integer (0: no parameter vector)"
            )
        spec = WidthSpec(width_parametrization, width, base_width)
        check_heads(width, heads, base_width, spec.is_mup)
        check_choice("theta_mode", theta_mode, THETA_MODES)
        check_choice("input_reduction", input_reduction, INPUT_REDUCTIONS)
        check_choice("attention_impl", attention_impl, ATTENTION_IMPLS)
        self.config = dict(
            coord_dim=coord_dim,
            in_channels=channels,
            out_channels=out_channels,
            theta_dim=theta_dim,
            width=width,
            layers=layers,
            heads=heads,
            experts=experts,
            ffn_ratio=ffn_ratio,
            theta_mode=theta_mode,
            input_reduction=input_reduction,
            self_attention_query_residual=bool(self_attention_query_residual),
            width_parametrization=width_parametrization,
            base_width=base_width,
            attention_impl=attention_impl,
        )
        self.width_spec = spec
        self.coord_dim, self.channels, self.theta_dim, self.theta_mode = coord_dim, channels, theta_dim, theta_mode
        theta_token = theta_dim > 0 and theta_mode == "token"
        query_in = coord_dim + (theta_dim if theta_mode == "query" else 0)
        self.query_encoder = PointMLP(query_in, width, width, ("input", "hidden"), spec)
        self.input_encoders = nn.ModuleList(
            PointMLP(coord_dim + c, width, width, ("input", "hidden"), spec) for c in channels
        )
        self.theta_encoder = PointMLP(theta_dim, width, width, ("input", "hidden"), spec) if theta_token else None
        key_sets = len(channels) + int(theta_token)
        self.blocks = nn.ModuleList(
            GNOTBlock(
                width,
                heads,
                key_sets,
                experts,
                ffn_ratio,
                coord_dim,
                spec,
                input_reduction,
                self_attention_query_residual,
                attention_impl,
            )
            for _ in range(layers)
        )
        self.decoder = PointMLP(width, width, out_channels, ("hidden", "output"), spec)

    def forward(
        self,
        coords: torch.Tensor,
        features: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        inputs: Sequence[PointSet] | None = None,
        theta: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs is None:
            if len(self.channels) != 1:
                raise OperatorConfigError(
                    f"inputs None: this GNOT has {len(self.channels)} input functions; "
                    "pass inputs=[(coords, features, mask), ...]"
                )
            coords, features, mask = prepare_points(coords, features, mask, self.coord_dim, self.channels[0], "query")
            inputs = [(coords, features, mask)]
        else:
            if features is not None and features.shape[-1] != 0:
                raise OperatorConfigError(
                    "features: with inputs given, the query points carry no features; pass features=None"
                )
            coords, _, mask = prepare_points(coords, None, mask, self.coord_dim, 0, "query")
            if len(inputs) != len(self.channels):
                raise OperatorConfigError(
                    f"inputs: got {len(inputs)} input functions, this GNOT was built for {len(self.channels)} (in_channels)"
                )
        batch = coords.shape[0]
        encoded: list[torch.Tensor] = []
        masks: list[torch.Tensor] = []
        for i, ((c, f, m), encoder, channels) in enumerate(zip(inputs, self.input_encoders, self.channels)):
            c, f, m = prepare_points(c, f, m, self.coord_dim, channels, f"input function {i}")
            if c.shape[0] != batch:
                raise OperatorConfigError(
                    f"input function {i}: batch {c.shape[0]} differs from the query batch {batch}"
                )
            encoded.append(encoder(torch.cat([c, f], dim=-1)))
            masks.append(m)
        query_in = coords
        if self.theta_dim:
            if theta is None or theta.shape != (batch, self.theta_dim):
                got = None if theta is None else tuple(theta.shape)
                raise OperatorConfigError(
                    f"theta {got}: this GNOT needs a parameter vector of shape ({batch}, {self.theta_dim})"
                )
            if self.theta_mode == "token":
                assert self.theta_encoder is not None, "built with theta_dim > 0 and theta_mode 'token'"
                encoded.append(self.theta_encoder(theta).unsqueeze(1))
                masks.append(torch.ones(batch, 1, dtype=torch.bool, device=coords.device))
            else:
                query_in = torch.cat([coords, theta.unsqueeze(1).expand(-1, coords.shape[1], -1)], dim=-1)
        elif theta is not None:
            raise OperatorConfigError(
                "theta: this GNOT was built with theta_dim=0; pass theta=None or rebuild with theta_dim=p"
            )
        x = self.query_encoder(query_in)
        for block in self.blocks:
            x = block(x, coords, mask, encoded, masks)
        return zero_padded(self.decoder(x), mask)
