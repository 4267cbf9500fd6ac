"""The attention families' formulas: exact parameter counts and activation constants (operators.planning_attention).

Each family record (operators.registry) carries its formula as ``attention_formula``;
the derivation of each count and constant is in the docstring of
operators.planning_attention.
"""

from __future__ import annotations

from dataclasses import dataclass

from operators.errors import OperatorConfigError
from operators.interfaces import ModelConfig


@dataclass(frozen=True)
class Shape:
    """What a family's formula gives: exact parameters, the activation constants, its largest weight."""

    params: int
    c_layer: float
    c_out: float
    quadratic_matrices: int  # (n × n) matrices kept per layer with attention_impl="quadratic"
    quadratic_transient: int  # and those alive at once in one layer's backward
    largest_tensor: int


def _integer(value: object, name: str) -> int:
    """``value``, an integer (operators.planning_attention checks the counts before a formula reads them)."""
    if not isinstance(value, int):
        raise OperatorConfigError(f"{name} {value!r}: must be an integer")
    return value


def _count(c: ModelConfig, name: str) -> int:
    """The integer ``c[name]``."""
    return _integer(c[name], name)


def _channels(c: ModelConfig) -> list[int]:
    """``in_channels``: one count, or one per input function (GNOT)."""
    value = c["in_channels"]
    items = value if isinstance(value, (list, tuple)) else [value]
    return [_integer(item, "in_channels") for item in items]


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _mlp(n_in: int, hidden: int, n_out: int) -> int:
    return _linear(n_in, hidden) + _linear(hidden, n_out)


def _galerkin_attention(w: int, h: int, coord: int) -> int:
    return 3 * _linear(w, w) + 4 * w + _linear(w + h * coord, w)


def galerkin_formula(c: ModelConfig) -> Shape:
    w, h, r, d = (_count(c, name) for name in ("width", "heads", "ffn_ratio", "coord_dim"))
    coord = d if c["coord_in_heads"] else 0
    layer = _galerkin_attention(w, h, coord) + _mlp(w, r * w, w)
    params = (
        _linear(_count(c, "in_channels") + d, w) + _count(c, "layers") * layer + _mlp(w, w, _count(c, "out_channels"))
    )
    return Shape(params, 9 + 2 * r + 12 * h * coord / w, 5, h, h, max(r * w * w, (w + h * coord) * w))


def ono_formula(c: ModelConfig) -> Shape:
    w, h, r, k, d = (_count(c, name) for name in ("width", "heads", "ffn_ratio", "eigenfunctions", "coord_dim"))
    nn_block = _galerkin_attention(w, h, 0) if c["nn_block"] == "galerkin" else 4 * _linear(w, w)
    orthogonal = _linear(w, k) + k + (w * w if c["value_projection"] else 0)
    orthogonal += 2 * k if c["orthogonalization"] == "layernorm" else 0
    block = 6 * w + nn_block + _mlp(w, r * w, w) + orthogonal
    params = _mlp(_count(c, "in_channels") + d, 2 * w, 2 * w) + _count(c, "layers") * (block + _mlp(w, r * w, w))
    params += _linear(r * w, _count(c, "out_channels")) - _linear(r * w, w)  # the last out FFN maps to C_out
    return Shape(params, 13 + 4 * r + 8 * k / w, 7, h + 1, 1, max(r * w * w, 4 * w * w))


def gnot_formula(c: ModelConfig) -> Shape:
    names = ("width", "heads", "ffn_ratio", "experts", "coord_dim", "theta_dim")
    w, h, r, e, d, p = (_count(c, name) for name in names)
    channels = _channels(c)
    token = p > 0 and c["theta_mode"] == "token"
    sets = len(channels) + int(token)
    query_in = d + (p if c["theta_mode"] == "query" else 0)
    encoders = _mlp(query_in, w, w) + sum(_mlp(d + ch, w, w) for ch in channels) + (_mlp(p, w, w) if token else 0)
    gate = _linear(d, 4 * w) + _linear(4 * w, 4 * w) + _linear(4 * w, e)
    attention = (2 + 2 * sets) * _linear(w, w) + 4 * _linear(w, w)
    block = gate + attention + 2 * e * _mlp(w, r * w, w) + 2 * (4 + sets) * w
    params = encoders + _count(c, "layers") * block + _mlp(w, w, _count(c, "out_channels"))
    return Shape(params, 36 + e * (4 * r + 1.5), 9, 2 * (sets + 1) * h, 2 * (sets + 1) * h, max(16 * w * w, r * w * w))
