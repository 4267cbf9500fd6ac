"""Width-muP: the Tensor Programs V (Yang et al. 2022) recipe for Adam, as pure rules.

A model of width m is tuned at a base (proxy) width m0 and run at m. Every
weight is classified by how its two dimensions scale with the width:

============  =====================  ============================  ==========================
role          fan-in / fan-out       Adam LR                       init / forward
============  =====================  ============================  ==========================
``input``     fixed / ∝ m            η (unchanged)                 std ∝ 1/√fan_in (fixed)
``hidden``    ∝ m / ∝ m              η · m0/m                      std ∝ 1/√fan_in
``output``    ∝ m / fixed            η (unchanged)                 std ∝ 1/√fan_in, output × m0/m
``fixed``     fixed / fixed          η (unchanged)                 unchanged
============  =====================  ============================  ==========================

All biases, LayerNorm weights and other vector-like or width-free parameters
(ONO's eigenvalues μ, per-head norms, …) are *not* width parameters: they keep
η and their init (TP5 Table 3, "input weights & all biases").

The output rule is the readout form of TP5 Table 8 (the ``mup`` package's
``MuReadout``): the readout keeps its PyTorch init and LR, and its product
with the incoming features is multiplied by m0/m. Attention logits that are
dot products over a head's d_h features are scaled by 1/d_h instead of
1/√d_h; :func:`attention_scale` anchors the rule at the base head size
(√d0/d_h), so that at m = m0 a muP model *is* the standard model.

``width_parametrization="standard"`` switches every rule off (all multipliers
1), whatever ``base_width`` is. The initialisation of dense weights is
PyTorch's default (``kaiming_uniform_(a=√5)``: std = 1/√(3·fan_in)), which is
already ∝ 1/√fan_in, so muP changes no dense init; it changes LRs and the
forward multipliers only. For FNO's spectral weights (complex, hidden), see
:func:`spectral_width_init_std` and :func:`spectral_width_lr_multiplier`,
which compose with the existing K-muP of :mod:`operators.parametrization`.

Integration: a module declares per-parameter LR multipliers through the
``mutransfer_lr_multipliers()`` protocol (see :class:`MuLinear`), which
:func:`operators.parametrization.optimizer_param_groups` reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from operators.declarations import declare
from operators.errors import OperatorConfigError
from operators.parametrization import (
    base_spectral_init_std,
    check_modes,
    spectral_init_multiplier,
    spectral_lr_multiplier,
)
from operators.pointwise import pointwise

WIDTH_PARAMETRIZATIONS = ("standard", "mup")
ROLES = ("input", "hidden", "output", "fixed")
#: each role's name in operators.base_shapes (muP facts on the parameters)
_SHAPE_ROLE = {"input": "input", "hidden": "hidden", "output": "readout", "fixed": "fixed"}


# --------------------------------------------------------------------------- checks


def check_width_parametrization(width_parametrization: str, width: int, base_width: int | None) -> None:
    """Validate a (parametrization, width, base width) triple with one-line errors."""
    if width_parametrization not in WIDTH_PARAMETRIZATIONS:
        raise OperatorConfigError(
            f"width_parametrization {width_parametrization!r} is unknown; use one of: {', '.join(WIDTH_PARAMETRIZATIONS)}"
        )
    if not isinstance(width, int) or width < 1:
        raise OperatorConfigError(f"width {width!r}: must be a positive integer")
    if base_width is not None and (not isinstance(base_width, int) or base_width < 1):
        raise OperatorConfigError(
            f"base_width {base_width!r}: must be a positive integer (the width the hyperparameters were tuned at)"
        )
    if width_parametrization == "mup" and base_width is None:
        raise OperatorConfigError(
            "base_width None: width_parametrization 'mup' needs the base (proxy) width m0; pass base_width=<int>"
        )


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise OperatorConfigError(f"role {role!r} is unknown; use one of: {', '.join(ROLES)}")


def _check_widths(width: int, base_width: int) -> None:
    for name, value in (("width", width), ("base_width", base_width)):
        if not isinstance(value, int) or value < 1:
            raise OperatorConfigError(f"{name} {value!r}: must be a positive integer")


# --------------------------------------------------------------------------- the rules


def hidden_lr_multiplier(width: int, base_width: int) -> float:
    """Adam LR multiplier of hidden (fan-in and fan-out ∝ width) weights: m0/m."""
    _check_widths(width, base_width)
    return base_width / width


def input_lr_multiplier(width: int, base_width: int) -> float:
    """Adam LR multiplier of input weights (fan-in fixed) and of every bias: 1."""
    _check_widths(width, base_width)
    return 1.0


def output_lr_multiplier(width: int, base_width: int) -> float:
    """Adam LR multiplier of readout weights: 1 (their output is scaled instead)."""
    _check_widths(width, base_width)
    return 1.0


def output_multiplier(width: int, base_width: int) -> float:
    """Forward multiplier of a readout layer: y = (m0/m)·W x + b."""
    _check_widths(width, base_width)
    return base_width / width


def init_std(fan_in: int, gain: float = 1.0) -> float:
    """Std of a dense weight at init, ∝ 1/√fan_in for every role: gain/√(3·fan_in).

    This is PyTorch's ``nn.Linear`` default (uniform on ±1/√fan_in), which the
    operators keep under both parametrizations.
    """
    if not isinstance(fan_in, int) or fan_in < 1:
        raise OperatorConfigError(f"fan_in {fan_in!r}: must be a positive integer")
    return gain / math.sqrt(3.0 * fan_in)


def attention_scale(head_dim: int, parametrization: str, base_head_dim: int | None = None) -> float:
    """Scale of dot-product attention logits: 1/√d_h (standard) or 1/d_h (muP).

    With ``base_head_dim`` d0 the muP scale is √d0/d_h, equal to 1/√d0 at the
    base width (the ``mup`` package's ``attn_mult`` convention).
    """
    if not isinstance(head_dim, int) or head_dim < 1:
        raise OperatorConfigError(f"head_dim {head_dim!r}: must be a positive integer")
    if parametrization not in WIDTH_PARAMETRIZATIONS:
        raise OperatorConfigError(
            f"parametrization {parametrization!r} is unknown; use one of: {', '.join(WIDTH_PARAMETRIZATIONS)}"
        )
    if parametrization == "standard":
        return 1.0 / math.sqrt(head_dim)
    anchor = 1.0 if base_head_dim is None else math.sqrt(base_head_dim)
    return anchor / head_dim


def relative_attention_scale(head_dim: int, base_head_dim: int | None, parametrization: str) -> float:
    """muP correction for attentions whose native scale is not 1/√d_h: attention_scale(muP)/attention_scale(SP).

    = √(d0/d_h) under muP, 1 under standard. The Galerkin/Fourier attentions
    (no logit scaling in the paper) multiply their d_h-contraction by it.
    """
    if parametrization == "standard":
        return 1.0
    if base_head_dim is None:
        raise OperatorConfigError("base_head_dim None: the muP attention correction needs the base head size")
    return attention_scale(head_dim, "mup", base_head_dim) / attention_scale(head_dim, "standard")


def lr_multiplier(role: str, width: int, base_width: int | None, width_parametrization: str) -> float:
    """Adam LR multiplier of a weight with ``role`` (1 for every role under standard)."""
    _check_role(role)
    check_width_parametrization(width_parametrization, width, base_width)
    if width_parametrization == "standard" or role != "hidden":
        return 1.0
    assert base_width is not None, "check_width_parametrization: 'mup' needs a base width"
    return hidden_lr_multiplier(width, base_width)


def forward_multiplier(role: str, width: int, base_width: int | None, width_parametrization: str) -> float:
    """Multiplier on a layer's W·x (m0/m for readouts under muP, else 1)."""
    _check_role(role)
    check_width_parametrization(width_parametrization, width, base_width)
    if width_parametrization == "standard" or role != "output":
        return 1.0
    assert base_width is not None, "check_width_parametrization: 'mup' needs a base width"
    return output_multiplier(width, base_width)


# --------------------------------------------------------------------------- FNO spectral weights


def spectral_width_lr_multiplier(
    width: int, base_width: int, modes: int, dim: int, parametrization: str, k_exponent: float = 1.0
) -> float:
    """Spectral-weight Adam LR multiplier under width-muP composed with K-parametrization: c(K)·m0/m
    (c(K) with the K rule's exponent ``k_exponent``: operators.parametrization.data_aware_scale)."""
    return spectral_lr_multiplier(modes, dim, parametrization, k_exponent) * hidden_lr_multiplier(width, base_width)


def spectral_width_init_std(
    width: int,
    base_width: int,
    modes: int,
    dim: int,
    parametrization: str,
    init_scale: float = 1.0,
    k_exponent: float = 1.0,
) -> float:
    """Std of the real/imaginary parts of a spectral entry under width-muP: σ_K(m0)·b(K)·√(m0/m).

    σ_K(m0) is the K-parametrization's base std at the base width, so at m = m0
    the std is what that parametrization draws; as m grows it falls as
    1/√fan_in like any hidden weight. Draws are zero-mean Gaussian (the SP
    uniform U[0,1) has a non-zero mean, a rank-one part that would grow ∝ √m).
    """
    _check_widths(width, base_width)
    check_modes(modes, dim, parametrization)
    base = base_spectral_init_std(base_width, base_width, parametrization)
    scale = spectral_init_multiplier(modes, dim, parametrization, k_exponent)
    return init_scale * base * scale * math.sqrt(base_width / width)


# --------------------------------------------------------------------------- modules


@dataclass(frozen=True)
class WidthSpec:
    """Width, base width and parametrization of one model, shared by its layers."""

    width_parametrization: str = "standard"
    width: int = 1
    base_width: int | None = None

    def __post_init__(self) -> None:
        check_width_parametrization(self.width_parametrization, self.width, self.base_width)

    @property
    def is_mup(self) -> bool:
        return self.width_parametrization == "mup"

    def lr_multiplier(self, role: str) -> float:
        return lr_multiplier(role, self.width, self.base_width, self.width_parametrization)

    def forward_multiplier(self, role: str) -> float:
        return forward_multiplier(role, self.width, self.base_width, self.width_parametrization)

    def relative_attention_scale(self, heads: int) -> float:
        """muP correction √(d0_h/d_h) for an attention with ``heads`` heads (1 under standard)."""
        if not self.is_mup:
            return 1.0
        assert self.base_width is not None, "__post_init__: 'mup' needs a base width"
        return relative_attention_scale(self.width // heads, self.base_width // heads, "mup")


class MuLinear(nn.Linear):
    """``nn.Linear`` that knows its width role; identical to ``nn.Linear`` under standard.

    Same parameters, state-dict keys and init (so it draws the same random
    numbers as ``nn.Linear``). Under muP a ``hidden`` weight declares the LR
    multiplier m0/m through ``mutransfer_lr_multipliers()`` and an ``output``
    layer computes (m0/m)·W x + b. Biases are never declared (LR 1).
    """

    def __init__(self, in_features: int, out_features: int, role: str, spec: WidthSpec, bias: bool = True):
        _check_role(role)
        super().__init__(in_features, out_features, bias=bias)
        declare(cast(nn.Parameter, self.weight), role=_SHAPE_ROLE[role])  # its role for operators.base_shapes
        self.role = role
        self.spec = spec
        self.multiplier = spec.forward_multiplier(role)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.multiplier == 1.0:
            return F.linear(x, self.weight, self.bias)
        y = F.linear(x, self.weight) * self.multiplier
        return y if self.bias is None else y + self.bias

    def forward_channel_first(self, x: torch.Tensor) -> torch.Tensor:
        """The same map on channel-first input (B, in_features, N_1, …) → (B, out_features, N_1, …), one
        ``baddbmm`` (operators.pointwise); (m0/m)·W folded into the weight for an output layer under muP."""
        weight = self.weight if self.multiplier == 1.0 else self.weight * self.multiplier
        return pointwise(x, weight, self.bias)

    def mutransfer_lr_multipliers(self) -> Iterator[tuple[nn.Parameter, str, float]]:
        """(parameter, group name, LR multiplier) for each width-scaled parameter of this layer."""
        if self.spec.is_mup and self.role == "hidden":
            # torch's stubs type nn.Linear.weight as a Tensor; it is a Parameter.
            yield cast(nn.Parameter, self.weight), "hidden", self.spec.lr_multiplier("hidden")

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, role={self.role}, multiplier={self.multiplier:.4g}"


def width_roles(model: nn.Module) -> dict[str, str]:
    """Map parameter name → width role ("input", "hidden", "output", "fixed" or "other").

    Weights of :class:`MuLinear` layers carry their role; FNO's pointwise
    convolutions and spectral weights are "hidden" (declared by the model);
    everything else, biases included, is "other" (not a width parameter).
    """
    roles: dict[int, str] = {}
    for module in model.modules():
        declare = getattr(module, "mutransfer_width_roles", None)
        if declare is not None:
            for p, role in declare():
                roles[id(p)] = role
        if isinstance(module, MuLinear):
            roles[id(module.weight)] = module.role
    return {name: roles.get(id(p), "other") for name, p in model.named_parameters()}
