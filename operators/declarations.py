"""A parameter's muP role stated by its model's author: :func:`declare`, read by operators.base_shapes.

Kept apart from the inference (operators.base_shapes) so that the layers that declare their own roles
(operators.width_mup's ``MuLinear``, the spectral layers) need nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn

from operators.errors import OperatorConfigError

ROLES = ("spectral", "hidden", "input", "readout", "vector", "fixed")

_DECLARED = "mutransfer_declared"


@dataclass(frozen=True)
class Declared:
    """A role stated by the model's author (:func:`declare`), read by operators.base_shapes.set_base_shapes.

    ``k_dims``/``width_dims`` None: read from the shapes (for a non-spectral role, every growing dim is a
    width dim).
    """

    role: str
    k_dims: tuple[int, ...] | None
    width_dims: tuple[int, ...] | None
    modes: int | None


def declare(
    param: nn.Parameter,
    *,
    role: str,
    k_dims: Iterable[int] | None = None,
    width_dims: Iterable[int] | None = None,
    modes: int | None = None,
) -> nn.Parameter:
    """State a parameter's role where the shapes cannot tell it; declare it in every instance a factory builds.

    Args:
        param: a parameter of a model.
        role: one of ``spectral``, ``hidden``, ``input``, ``readout``, ``vector``, ``fixed``.
        k_dims: the dims that hold Fourier modes (spectral only); None: read from the shapes.
        width_dims: the dims that grow with the width; None: read from the shapes.
        modes: K, where the K dims' sizes do not say it (e.g. a 1-D neuraloperator weight holds K+1 entries).

    Returns:
        ``param``, with the declaration on it.

    Example::

        mup.declare(layer.weight, role="spectral", k_dims=(2,), width_dims=(0, 1), modes=K)
    """
    if not isinstance(param, nn.Parameter):
        raise OperatorConfigError(f"declare: {type(param).__name__} is not an nn.Parameter; pass a model's parameter")
    if role not in ROLES:
        raise OperatorConfigError(f"declare: role {role!r} is unknown; use one of: {', '.join(ROLES)}")
    k = None if k_dims is None else tuple(int(d) for d in k_dims)
    w = None if width_dims is None else tuple(int(d) for d in width_dims)
    for label, dims in (("k_dims", k), ("width_dims", w)):
        if dims is not None and (any(not 0 <= d < param.dim() for d in dims) or len(set(dims)) != len(dims)):
            raise OperatorConfigError(
                f"declare: {label} {dims} for a parameter of shape {tuple(param.shape)}; "
                f"use distinct dims in 0..{param.dim() - 1}"
            )
    if k is not None and w is not None and set(k) & set(w):
        raise OperatorConfigError(
            f"declare: dims {sorted(set(k) & set(w))} in both k_dims and width_dims; a dim grows with one axis"
        )
    if k is not None and (role == "spectral") != bool(k):
        raise OperatorConfigError(
            f"declare: k_dims {k} with role {role!r}: a spectral parameter needs k_dims, and only a spectral one has them"
        )
    if modes is not None and (role != "spectral" or isinstance(modes, bool) or not isinstance(modes, int) or modes < 2):
        raise OperatorConfigError(f"declare: modes {modes!r}: give K (an integer >= 2) for a spectral parameter only")
    setattr(param, _DECLARED, Declared(role, k, w, modes))
    return param


def declared_of(param: object) -> Declared | None:
    """The role declared on ``param`` by :func:`declare` (None for a parameter with none)."""
    found = getattr(param, _DECLARED, None)
    return found if isinstance(found, Declared) else None
