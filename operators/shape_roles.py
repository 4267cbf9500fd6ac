"""How a parameter's role is read from its shapes in two instances of a model (operators.base_shapes).

Pure rules, one job each: which dims are a dense layer's fan-out and fan-in, whether a layer is PyTorch's own
(its growing sizes are the width's), K from the sizes of the mode dims, the role from which dims grow, and the
width ratio of a parameter. Errors are one line naming the parameter and the fix.
"""

from __future__ import annotations

from torch import nn

from operators.errors import OperatorConfigError

#: dense layers whose weight is (fan_out, fan_in, …): which dims are fan-out and fan-in
FAN_DIMS: tuple[tuple[type[nn.Module], int, int], ...] = (
    (nn.Linear, 0, 1),
    (nn.Conv1d, 0, 1),
    (nn.Conv2d, 0, 1),
    (nn.Conv3d, 0, 1),
    (nn.ConvTranspose1d, 1, 0),
    (nn.ConvTranspose2d, 1, 0),
    (nn.ConvTranspose3d, 1, 0),
    (nn.Embedding, 1, 0),
)

#: PyTorch's norm layers: their growing sizes are the width's too
NORMS: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)


def fan_dims(owner: nn.Module, leaf: str) -> tuple[int, int] | None:
    """(fan-out dim, fan-in dim) of a dense layer's weight, None for any other parameter."""
    if leaf != "weight":
        return None
    for kind, fan_out, fan_in in FAN_DIMS:
        if isinstance(owner, kind):
            return fan_out, fan_in
    return None


def vector_like(shape: tuple[int, ...]) -> bool:
    return sum(1 for n in shape if n > 1) <= 1


def differ(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)


def torch_layer(owner: nn.Module) -> bool:
    """A layer PyTorch defines (dense or norm): every size of it that grows is the width's."""
    return isinstance(owner, NORMS) or any(isinstance(owner, kind) for kind, _, _ in FAN_DIMS)


def modes_of(name: str, sizes: tuple[int, ...], where: str) -> int:
    """K from the K dims' sizes (module docstring), or a one-line error."""
    last = sizes[-1]
    if all(n == last for n in sizes):
        k = last
    elif all(n == 2 * (last - 1) for n in sizes[:-1]):
        k = last - 1
    else:
        raise OperatorConfigError(
            f"set_base_shapes: the mode dims of {name!r} hold {sizes} entries in the {where}, which do not say K; "
            "declare it: mup.declare(param, role='spectral', k_dims=..., width_dims=..., modes=K)"
        )
    if k < 2:
        raise OperatorConfigError(
            f"set_base_shapes: {name!r} keeps K = {k} modes in the {where}; muP scales by 1/sqrt(d*log K), so use K >= 2"
        )
    return k


def role_of(
    name: str,
    shape: tuple[int, ...],
    k: tuple[int, ...],
    w: tuple[int, ...],
    fans: tuple[int, int] | None,
    width_changed: bool,
) -> str:
    """The role read from which dims grow (module docstring), or a one-line error naming the fix."""
    fix = "declare its role (mup.declare(param, role=..., k_dims=..., width_dims=...)) or pass delta="
    if k:
        channels = 2 if width_changed else 0
        if len(k) > 3 or len(shape) < len(k) + 2 or len(w) != channels:
            raise OperatorConfigError(
                f"set_base_shapes: {name!r} {shape} grows in dims {k} by sizes that are not the width's, yet it is "
                f"no spectral weight (in, out, modes...) with {channels} channel dims growing: a factorized weight "
                "(Tucker/CP factors) follows neither rule; use a dense spectral weight (neuraloperator: "
                f"factorization=None), or {fix}"
            )
        return "spectral"
    if not w:
        return "fixed"
    if len(w) == 2:
        return "hidden"
    if len(w) > 2:
        raise OperatorConfigError(
            f"set_base_shapes: {name!r} {shape} has {len(w)} dims growing with the width (a factorized weight?); {fix}"
        )
    if fans is not None:
        fan_out, fan_in = fans
        if w[0] == fan_out:
            return "input"
        if w[0] == fan_in:
            return "readout"
    if vector_like(shape):
        return "vector"
    raise OperatorConfigError(
        f"set_base_shapes: {name!r} {shape} grows with the width in dim {w[0]} only and is no dense layer's weight: "
        f"input or readout? {fix}"
    )


def width_ratio(
    shape: tuple[int, ...], base_shape: tuple[int, ...], w: tuple[int, ...], fans: tuple[int, int] | None
) -> float:
    """m/m0 of the parameter's fan-in width dim (a dense layer's fan-in, else dim 1 if it grows, else the first)."""
    if not w:
        return 1.0
    dim = fans[1] if fans is not None and fans[1] in w else (1 if 1 in w else w[0])
    return shape[dim] / base_shape[dim]
