"""Parameter counts and training-memory estimates for the attention operators (Galerkin, ONO, GNOT).

By arithmetic alone, like :mod:`operators.planning` for the FNO: a width of 10**6 is
planned in microseconds and refused before any weight exists.

Parameters: exact (``sum(p.numel())`` of the built model, the point-set adapters
included; checked in tests/operators/test_attention_planning.py), from the constructors'
layers with w = width, r = ffn_ratio, d = coord_dim, C_in, C_out, h = heads:

- Galerkin: embedding (C_in+d)·w + w; per layer Q, K, V 3(w²+w), two per-head
  LayerNorms 4w, output (w + h·d_c)·w + w (d_c = d with ``coord_in_heads``), FFN
  2r·w² + r·w + w; decoder w² + w + w·C_out + C_out.
- ONO: encoder (C_in+d)·2w + 2w + 4w² + 2w; per block three LayerNorms 6w, the NN
  block (Galerkin 4w² + 8w, linear 4w² + 4w), FFN 2r·w² + r·w + w, orthogonal
  attention w·k + 2k (+ w² for W_V, + 2k for the LayerNorm ablation), the out FFN
  (the last one maps to C_out).
- GNOT: query, input-function (and θ) encoders, 2-layer MLPs to w; per block the gate
  (d·4w + 4w) + (16w² + 4w) + (4w·E + E), cross- and self-attention (2 + 2S)(w² + w)
  and 4(w² + w) with S key sets (input functions, + 1 for a θ token), two gated
  mixtures of E experts (2r·w² + r·w + w each), 2(4 + S)w of LayerNorms; decoder as
  Galerkin's.

Activations autograd keeps for backward, in bytes, for a batch of B samples of n
points (b = 4 bytes at fp32; under bf16/fp16 autocast the LayerNorms, softmaxes and
the loss stay float32, so b = 3 is used, an average):

    b·B·n·w·(c_out + L·c_layer)   +   b·B·n²·(s·L + t)      (attention_impl="quadratic" only)

with the per-family constants, in floats per point and width unit, counted from the
forward pass (each Linear keeps its input, each activation its input, each LayerNorm
its input and statistics, each head split/concat its copy) and fitted to the measured
peak of live tensors (:func:`mutransfer._diagnostics.peak_memory.measure_training_peak`):

- Galerkin: c_layer = 9 + 2r + 12·h·d_c/w (the coordinates appended to every head's
  q, k, v), c_out = 5;
- ONO: c_layer = 13 + 4r + 8·k/w (two FFNs per block; ĝ, ψ and their products carry k
  = eigenfunctions floats per point), c_out = 7;
- GNOT: c_layer = 36 + E·(4r + 1.5) (two mixtures of E experts), c_out = 9.

No family forms an n×n matrix by default (Galerkin and ONO are softmax-free and
computed in the linear order, GNOT's softmax acts on features). With
``attention_impl="quadratic"`` they do: s·L + t matrices of n×n floats per sample
(kept for backward, and those alive at once in one layer's backward): Galerkin s = t =
h (one score matrix per head); ONO s = h + 1 (the Galerkin block's h and the orthogonal
kernel), t = 1; GNOT s = t = 2(S + 1)·h (the weights and their normalisation, cross and
self attention).

The peak of one Adam step is the larger of weights + Adam + gradients + activations
(the start of backward) and weights + Adam + gradients + Adam's temporaries (the
optimizer step: multi-tensor Adam on a GPU, one buffer the size of all parameters, two
with weight decay; per-tensor Adam on the CPU, about three the size of the largest
weight, four with weight decay). Accuracy, measured on the CPU over the sizes of
tests/operators/test_attention_planning.py and more (widths 8-256, 1-3 layers, 16-1024 points,
ffn_ratio 2-4, 1-2 experts, both attention_impl, fp32): the estimate is 0.92-1.17 × the
measured peak of live tensors (the test holds it within 0.8-1.2 ×); bf16/fp16 are
estimated, not measured. It grows as w² in the parameters and as B·n·w·L in the
activations (B·n² with the quadratic reference). Scratch memory inside one kernel is
not counted, as for the FNO.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from operators.errors import OperatorConfigError
from operators.family import OPERATORS, get_family
from operators.interfaces import ModelConfig, config_int
from operators.planning import FLOAT_BYTES
from operators.precision import Precision, check_precision

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: bytes per activation element: fp32, or mixed precision (an average of the bf16/fp16 and float32 ops)
_ACTIVATION_BYTES: dict[Precision, int] = {"fp32": 4, "bf16": 3, "fp16": 3}


def planned_families() -> tuple[str, ...]:
    """Names of the registered families that carry an attention formula (those :func:`plan_attention` covers)."""
    return tuple(name for name, family in OPERATORS.items() if family.attention_formula is not None)


def full_config(operator: str, config: Mapping[str, object]) -> ModelConfig:
    """``config`` with the constructor's defaults filled in (nothing is built); one-line error for unknown keys."""
    build = get_family(operator).build_class
    defaults = {
        name: p.default
        for name, p in inspect.signature(build).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    unknown = sorted(set(config) - set(inspect.signature(build).parameters))
    if unknown:
        raise OperatorConfigError(
            f"{operator} options: unknown argument {unknown[0]!r}; see the {build.__name__} docstring"
        )
    return {**defaults, **config}


#: the counts a formula reads, and the least each may be
_COUNTS = {
    "coord_dim": 1,
    "out_channels": 1,
    "width": 1,
    "layers": 1,
    "heads": 1,
    "ffn_ratio": 1,
    "eigenfunctions": 1,
    "experts": 1,
    "theta_dim": 0,
}


def _check_counts(config: ModelConfig) -> None:
    """The sizes the formulas read are integers in range (the constructors' own one-line errors, before building)."""
    channels = config.get("in_channels")
    items = [(name, config[name], least) for name, least in _COUNTS.items() if name in config]
    items += [("in_channels", c, 0) for c in (channels if isinstance(channels, (list, tuple)) else [channels])]
    for name, value, least in items:
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise OperatorConfigError(f"{name} {value!r}: must be an integer >= {least}")


class AttentionPlanOptions(TypedDict, total=False):
    """:func:`plan_attention`'s keyword arguments that :meth:`AttentionPlan.replan` may change."""

    points: int
    batch: int
    precision: str
    device: str
    weight_decay: float


@dataclass(frozen=True)
class AttentionPlan:
    """Counts (entries) and memory (bytes) of one Adam training step of an attention operator."""

    operator: str
    config: ModelConfig
    points: int
    batch: int
    precision: str
    device: str
    weight_decay: float
    total_params: int
    activations_bytes: int
    optimizer_workspace_bytes: int

    @property
    def weights_bytes(self) -> int:
        return self.total_params * FLOAT_BYTES

    @property
    def label(self) -> str:
        c = self.config
        return (
            f"{get_family(self.operator).label} width {c['width']}, {c['layers']} layers, {c['heads']} heads, "
            f"{self.points} points, batch {self.batch}, {self.precision}"
        )

    @property
    def smaller(self) -> str:
        """What to shrink, for an error message."""
        quadratic = " or attention_impl linear" if self.config.get("attention_impl") == "quadratic" else ""
        return f"a smaller width or fewer layers{quadratic}"

    @property
    def total_bytes(self) -> int:
        """Weights + gradients + Adam's two states, plus the larger of the activations and Adam's temporaries."""
        return 4 * self.weights_bytes + max(self.activations_bytes, self.optimizer_workspace_bytes)

    def fits(self, memory_bytes: int) -> bool:
        return self.total_bytes <= memory_bytes

    def replan(self, **changes: Unpack[AttentionPlanOptions]) -> AttentionPlan:
        """The same plan with some of plan_attention's keyword arguments changed, e.g. ``replan(batch=4)``."""
        options = AttentionPlanOptions(
            points=self.points,
            batch=self.batch,
            precision=self.precision,
            device=self.device,
            weight_decay=self.weight_decay,
        )
        options.update(changes)
        return plan_attention(self.operator, self.config, **options)


def plan_attention(
    operator: str,
    config: Mapping[str, object],
    *,
    points: int,
    batch: int = 1,
    precision: str = "fp32",
    device: str = "cuda",
    weight_decay: float = 0.0,
) -> AttentionPlan:
    """Plan one Adam step of the attention operator ``operator`` built from ``config`` (its constructor arguments).

    ``points``: n, the points per sample (the grid's nodes, or the padded point count
    of a packed point set). ``device`` "cuda" (multi-tensor Adam) or "cpu" (per-tensor).
    """
    formula = OPERATORS[operator].attention_formula if operator in OPERATORS else None
    if formula is None:
        raise OperatorConfigError(
            f"operator {operator!r} is not an attention operator; plan one of: "
            f"{', '.join(planned_families())} (an FNO: operators.planning.plan_fno)"
        )
    for name, value in (("points", points), ("batch", batch)):
        if not isinstance(value, int) or value < 1:
            raise OperatorConfigError(f"{name} {value!r}: must be a positive integer")
    checked = check_precision(precision)  # ``precision`` itself, typed as a Precision
    config = full_config(operator, config)
    _check_counts(config)
    shape = formula(config)
    b = _ACTIVATION_BYTES[checked]
    w, layers = config_int(config["width"], "width"), config_int(config["layers"], "layers")  # checked above
    activations = b * batch * points * w * (shape.c_out + layers * shape.c_layer)
    if config.get("attention_impl") == "quadratic":
        activations += b * batch * points * points * (layers * shape.quadratic_matrices + shape.quadratic_transient)
    if device == "cuda":
        workspace = shape.params * FLOAT_BYTES * (2 if weight_decay else 1)
    else:
        workspace = shape.largest_tensor * FLOAT_BYTES * (4 if weight_decay else 3)
    return AttentionPlan(
        operator=operator,
        config=config,
        points=points,
        batch=batch,
        precision=precision,
        device=device,
        weight_decay=float(weight_decay),
        total_params=shape.params,
        activations_bytes=int(math.ceil(activations)),
        optimizer_workspace_bytes=int(workspace),
    )


def plan_attention_config(
    config: ModelConfig,
    *,
    grid: tuple[int, ...],
    batch: int = 1,
    precision: str = "fp32",
    weight_decay: float = 0.0,
    device: str = "cuda",
) -> AttentionPlan:
    """The plan of a point-set adapter's ``config`` (operators.adapters) on samples of shape ``grid`` (nodes, or (P,))."""
    operator, operator_config = config["operator"], config["operator_config"]
    if not isinstance(operator, str) or not isinstance(operator_config, Mapping):
        raise OperatorConfigError(
            f"config {config!r}: a point-set adapter's config names its operator and that operator's config"
        )
    return plan_attention(
        operator,
        operator_config,
        points=int(math.prod(grid)),
        batch=int(batch),
        precision=precision,
        weight_decay=weight_decay,
        device=device,
    )
