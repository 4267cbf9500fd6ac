"""The attention scale as a muP fact on a module: declared by its author, set by ``set_base_shapes``.

Standard dot-product attention divides its logits by √d_h; muP divides them by d_h (Tensor Programs V,
§4 and Table 3: the query and key of a trained attention are correlated, so their product grows like d_h,
not √d_h). Relative to the base's head size d0_h that is one factor on whatever scale the author wrote::

    scale(model) = scale(author) × √(d0_h / d_h)        (operators.width_mup.relative_attention_scale)

equal to 1 at the base's head size. The factor is a forward multiplier, not a weight: nothing in a
parameter's shape can carry it (mup itself asks for attention to be written with 1/d by hand). So the
author names the float attribute their forward multiplies by, and its head size, once per instance::

    class MyAttention(nn.Module):
        def __init__(self, width, heads):
            ...
            self.scale = (width // heads) ** -0.5          # the author's own, here SP's 1/√d_h
            mup.declare_attention(self, head_dim=width // heads, scale="scale")

:func:`apply_attention_scales` (called by ``set_base_shapes``) finds every declared module of the model,
the module of the same name in the base, and sets the attribute to the author's value × √(d0_h/d_h). It is
computed from the author's value each time, so building, declaring and setting base shapes again (as a
checkpoint's rebuild does) gives the same scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from torch import nn

from operators.errors import OperatorConfigError
from operators.width_mup import relative_attention_scale

_ATTENTION = "mutransfer_attention"


@dataclass(frozen=True)
class AttentionScale:
    """One attention's declared scale: its head size d_h, the attribute, the author's value and the factor.

    ``base_head_dim`` and ``multiplier`` are those :func:`apply_attention_scales` set (None and 1 before).
    """

    head_dim: int
    attr: str
    native: float
    base_head_dim: int | None = None
    multiplier: float = 1.0


def declare_attention(module: nn.Module, *, head_dim: int, scale: str = "scale") -> nn.Module:
    """Declare that ``module`` multiplies its attention by the float attribute ``scale`` over heads of
    ``head_dim``; ``set_base_shapes`` then gives it muP's 1/d_h (module docstring). Declare it in every
    instance the factory builds (in ``__init__``, after setting the attribute).

    Args:
        module: the attention module.
        head_dim: d_h, the size each head's query and key contract over.
        scale: the name of a float attribute of ``module`` that its forward multiplies the attention by.

    Returns:
        ``module``, with the declaration on it.

    Example::

        mup.declare_attention(self, head_dim=width // heads, scale="scale")
    """
    if not isinstance(module, nn.Module):
        raise OperatorConfigError(
            f"declare_attention: {type(module).__name__} is not an nn.Module; pass the attention module"
        )
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise OperatorConfigError(f"declare_attention: head_dim {head_dim!r}: give d_h, a positive integer")
    if not isinstance(scale, str):
        raise OperatorConfigError(
            f"declare_attention: scale= takes the attribute's name, not its value ({type(scale).__name__}); "
            "e.g. scale='scale'"
        )
    where = f"{type(module).__name__}.{scale}"
    if not hasattr(module, scale):
        raise OperatorConfigError(
            f"declare_attention: {where} does not exist; set it to the (nonzero float) scale the forward multiplies "
            "the attention by before declaring it, or name that attribute with scale="
        )
    value = getattr(module, scale)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value == 0:
        shown = repr(value) if value is None or isinstance(value, (bool, int, float)) else f"a {type(value).__name__}"
        raise OperatorConfigError(
            f"declare_attention: {where} is {shown}; declare the attention module whose forward multiplies by it, "
            "with that attribute a nonzero float, or name the attribute with scale="
        )
    setattr(module, _ATTENTION, AttentionScale(head_dim, scale, float(value)))
    return module


def attention_of(module: nn.Module) -> AttentionScale | None:
    """The declaration on ``module`` (None for a module with none)."""
    fact = getattr(module, _ATTENTION, None)
    return fact if isinstance(fact, AttentionScale) else None


def attention_scales(model: nn.Module) -> dict[str, AttentionScale]:
    """Every declared attention of ``model``, by module name."""
    return {name: fact for name, m in model.named_modules() if (fact := attention_of(m)) is not None}


def apply_attention_scales(model: nn.Module, base: nn.Module) -> dict[str, AttentionScale]:
    """Set each declared attention's scale of ``model`` to its author's value × √(d0_h/d_h), d0_h read from the
    module of the same name in ``base`` (in place); returns the facts set. A module declared in one of the two
    and not in the other is a one-line error."""
    ours, theirs = attention_scales(model), attention_scales(base)
    for name in sorted(set(ours) ^ set(theirs)):
        where, other = ("model", "base") if name in ours else ("base", "model")
        raise OperatorConfigError(
            f"set_base_shapes: the attention {name!r} is declared in the {where} but not in the {other}; "
            "call mup.declare_attention in every instance the factory builds"
        )
    modules = dict(model.named_modules())
    for name, fact in ours.items():
        base_dim = theirs[name].head_dim
        multiplier = relative_attention_scale(fact.head_dim, base_dim, "mup")
        setattr(modules[name], fact.attr, fact.native * multiplier)
        ours[name] = replace(fact, base_head_dim=base_dim, multiplier=multiplier)
        setattr(modules[name], _ATTENTION, ours[name])
    return ours
