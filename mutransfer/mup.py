"""muP in K and width for any PyTorch neural operator, with the facts on the parameters (mup's way).

::

    from mutransfer import mup
    model = build(K=24, width=64); base = build(K=6, width=16)   # your own factory, called twice
    mup.set_base_shapes(model, base)        # which dims grow with K, which with width; rescales the init
    opt = mup.Adam(model.parameters(), lr=3e-3)
    print(mup.describe(model))

The rules, how roles are read from the shapes, and when to :func:`declare` a role: docs/mup.md and
:mod:`operators.base_shapes` (the facts), :mod:`operators.shape_roles` (reading them from
the shapes), :mod:`operators.attention_facts` (an attention's 1/d_h scale, :func:`declare_attention`) and
:mod:`operators.mu_adam` (the optimizer).
"""

from operators.attention_facts import declare_attention
from operators.base_shapes import MuShape, infer_shapes, set_base_shapes, shape_of
from operators.declarations import ROLES, declare
from operators.mu_adam import Adam, describe, param_groups

__all__ = [
    "ROLES",
    "Adam",
    "MuShape",
    "declare",
    "declare_attention",
    "describe",
    "infer_shapes",
    "param_groups",
    "set_base_shapes",
    "shape_of",
]
