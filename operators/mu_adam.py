"""Adam from the muP facts on the parameters (operators.base_shapes), and a table of the facts.

:func:`param_groups` and :class:`Adam` read each parameter's ``mutransfer_shape`` (set by
:func:`operators.base_shapes.set_base_shapes`): one group per role and multiplier, at ``lr`` × the
multiplier (the ``mup`` package's ``MuAdam``). :func:`describe` prints one row per parameter.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from operators.attention_facts import attention_scales
from operators.base_shapes import shape_of
from operators.errors import OperatorConfigError


def param_groups(params: Iterable[torch.Tensor], lr: float) -> list[dict[str, object]]:
    """Adam parameter groups at ``lr`` × each parameter's multiplier (one group per role and multiplier).

    Raises a one-line error for a parameter without facts (``set_base_shapes`` not run on its model).
    """
    if isinstance(params, nn.Module):
        raise OperatorConfigError("mup.Adam: pass model.parameters(), not the model")
    groups: dict[tuple[str, float], list[torch.Tensor]] = {}
    for p in params:
        if isinstance(p, dict):
            raise OperatorConfigError("mup.Adam: pass model.parameters(); the groups come from the muP facts")
        fact = shape_of(p)
        if fact is None:
            raise OperatorConfigError(
                f"mup.Adam: a parameter of shape {tuple(p.shape)} has no muP facts; "
                "call mup.set_base_shapes(model, base) before making the optimizer"
            )
        groups.setdefault((fact.role, fact.lr_multiplier), []).append(p)
    return [
        {"params": ps, "lr": lr * mult, "mutransfer_role": role, "mutransfer_lr_multiplier": mult}
        for (role, mult), ps in groups.items()
    ]


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` with each parameter's LR at ``lr`` × its muP multiplier (mup's ``MuAdam``).

    Args:
        params: ``model.parameters()`` after :func:`set_base_shapes`.
        lr: the base LR η (the one tuned on the proxy).
        **kwargs: passed to ``torch.optim.Adam`` (betas, eps, weight_decay, …).
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, **kwargs: object) -> None:
        super().__init__(param_groups(params, lr), lr=lr, **kwargs)  # type: ignore[arg-type]


def describe(model: nn.Module) -> str:
    """One row per parameter: name, shape, role, K dims, width dims, K (model/base), init and LR multipliers; then one
    row per declared attention (operators.attention_facts): its scale attribute, d_h and the factor set."""
    header = ("parameter", "shape", "role", "K dims", "width dims", "K", "init ×", "LR ×")
    rows: list[tuple[str, ...]] = [header]
    for name, p in model.named_parameters():
        fact = shape_of(p)
        if fact is None:
            rows.append((name, str(tuple(p.shape)), "(no facts: run set_base_shapes)", "", "", "", "", ""))
            continue
        k = "" if fact.modes is None else f"{fact.modes}/{fact.base_modes}"
        role = fact.role + (" (declared)" if fact.declared else "")
        dims = (
            "-" if not fact.k_dims else ",".join(map(str, fact.k_dims)),
            "-" if not fact.width_dims else ",".join(map(str, fact.width_dims)),
        )
        rows.append((name, str(fact.shape), role, *dims, k, f"{fact.init_multiplier:.4g}", f"{fact.lr_multiplier:.4g}"))
    table = _columns(rows)
    attention: list[tuple[str, ...]] = [("attention", "scale attribute", "d_h (model/base)", "scale ×")]
    for name, scale in attention_scales(model).items():
        base = "?" if scale.base_head_dim is None else str(scale.base_head_dim)
        attention.append((name, scale.attr, f"{scale.head_dim}/{base}", f"{scale.multiplier:.4g}"))
    return table if len(attention) == 1 else f"{table}\n{_columns(attention)}"


def _columns(rows: list[tuple[str, ...]]) -> str:
    """``rows`` (the first a header) as left-aligned columns."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(n) for c, n in zip(r, widths, strict=True)).rstrip() for r in rows)
