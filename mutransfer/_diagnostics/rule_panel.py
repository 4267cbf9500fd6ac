"""The rule panel: K-scaling rules whose truth is measured, to judge a gate by (issue "Verdicts you can trust", item 4).

A gate that stops a sweep because "the rule does not hold here" must get *known* rules right. The panel holds
the paper's rule and deliberately wrong variants of its spectral LR multiplier c(K) (Li, Yoo & Yang 2025,
Definition 3.1: c(K) = 1/√(d·log K) under μP), each a pure function of (K, d):

==================  ==============  ==========================================================
name                parametrization spectral LR multiplier (× the master LR)
==================  ==============  ==========================================================
``sp``              standard        1 (and SP's init)
``mup``             mup             c(K) = 1/√(d·log K)  — the paper's rule
``mup_c_times_K``   mup             c(K)·K               — grows with K: far too large at large K
``mup_c_squared``   mup             c(K)²                — shrinks twice as fast as μP's
``mup_c_one``       mup             1                    — μP's init, no LR correction at all
==================  ==============  ==========================================================

Every μP variant keeps μP's init b(K); only the spectral weights' LR multiplier changes
(:func:`apply_rule` sets each spectral module's ``lr_multiplier``, which
:func:`operators.parametrization.optimizer_param_groups` reads; on a model with μP facts instead, its spectral
weights' LR factor from the base's K, c(K)/c(K0): :func:`operators.base_shapes.set_lr_k_factor`). The truth of a rule on a dataset is the
drift of its optimal master LR from K_lo to K_hi, measured by an LR landscape at both K
(``benchmarks/rule_panel.py``); a gate's verdict on the same rule is compared with it there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

from torch import nn

from operators.base_shapes import set_lr_k_factor, shape_of
from operators.parametrization import mup_scale, spectral_modules

__all__ = ["FAILS", "HOLDS", "NOT_RESOLVED", "RULES", "Rule", "apply_rule", "gate_is_right", "get_rule", "truth"]


def c_mup(modes: int, dim: int) -> float:
    """The paper's c(K) = 1/√(d·log K)."""
    return mup_scale(modes, dim)


def c_times_k(modes: int, dim: int) -> float:
    """A wrong rule: c(K)·K (grows like K/√log K)."""
    return mup_scale(modes, dim) * modes


def c_squared(modes: int, dim: int) -> float:
    """A wrong rule: c(K)² = 1/(d·log K) (corrects twice as much as μP, in log)."""
    return mup_scale(modes, dim) ** 2


def c_one(modes: int, dim: int) -> float:
    """A wrong rule: no LR correction (c = 1) on top of μP's init."""
    return 1.0


@dataclass(frozen=True)
class Rule:
    """One panel rule: the parametrization the model is built with, and its spectral LR multiplier (None: the
    parametrization's own, i.e. SP's 1)."""

    name: str
    parametrization: str
    multiplier: Callable[[int, int], float] | None
    description: str

    def spectral_lr_multiplier(self, modes: int, dim: int) -> float:
        return 1.0 if self.multiplier is None else float(self.multiplier(modes, dim))


RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule("sp", "standard", None, "SP: no init or LR correction"),
        Rule("mup", "mup", c_mup, "muP: c(K) = 1/sqrt(d log K) (the paper)"),
        Rule("mup_c_times_K", "mup", c_times_k, "muP init, LR x c(K)*K (wrong on purpose)"),
        Rule("mup_c_squared", "mup", c_squared, "muP init, LR x c(K)^2 (wrong on purpose)"),
        Rule("mup_c_one", "mup", c_one, "muP init, no LR correction, c = 1 (wrong on purpose)"),
    )
}


def get_rule(name: str) -> Rule:
    if name not in RULES:
        raise KeyError(f"rule {name!r}: one of {', '.join(RULES)}")
    return RULES[name]


class _RuledLayer(Protocol):
    """What a rule reads and sets on a spectral layer (operators.spectral.SpectralConv has it)."""

    parametrization: str
    modes: int
    dim: int
    lr_multiplier: float


def apply_rule(model: nn.Module, rule: Rule) -> nn.Module:
    """Set every spectral module's LR multiplier to ``rule``'s at its own K (in place; returns ``model``).

    The model must have been built with ``rule.parametrization`` (its init is that parametrization's). A model whose
    spectral weights carry muP facts instead (a user's factory after ``mutransfer.mup.set_base_shapes``:
    operators.base_shapes) takes a μP rule as its facts' LR factor from the base's K to its own, c(K)/c(K0) (the
    master LR absorbs c(K0), as it absorbs the FNO's), its init left as the facts make it; a rule of another
    parametrization is refused for it. A model with neither is refused.
    """
    layers = spectral_modules(model)
    if not layers:
        return _apply_to_facts(model, rule)
    for found in layers:
        if not all(hasattr(found, a) for a in ("parametrization", "modes", "dim")):
            raise ValueError(
                f"rule {rule.name}: applies to spectral layers that state their parametrization, modes and dim, "
                f"not {type(found).__name__}"
            )
        module = cast(_RuledLayer, found)  # the attributes checked just above
        if module.parametrization != rule.parametrization:
            raise ValueError(
                f"rule {rule.name}: the model is {module.parametrization}, the rule needs {rule.parametrization}"
            )
        mult = rule.spectral_lr_multiplier(module.modes, module.dim)
        if not (mult > 0 and math.isfinite(mult)):
            raise ValueError(f"rule {rule.name}: multiplier {mult} at K={module.modes}")
        module.lr_multiplier = mult
    return model


def _apply_to_facts(model: nn.Module, rule: Rule) -> nn.Module:
    spectral = [(p, fact) for p in model.parameters() if (fact := shape_of(p)) is not None and fact.role == "spectral"]
    if not spectral:
        raise ValueError(
            f"rule {rule.name}: {type(model).__name__} has no spectral layer that states its parametrization, modes "
            "and dim (the project's FNO has them) and no spectral weight with muP facts (mutransfer.mup.set_base_shapes)"
        )
    if rule.parametrization != "mup":
        raise ValueError(
            f"rule {rule.name}: a model with muP facts trains under them (mup); build it without "
            f"mutransfer.mup.set_base_shapes for a {rule.parametrization} rule"
        )
    for param, fact in spectral:
        if fact.modes is None or fact.base_modes is None:
            raise ValueError(f"rule {rule.name}: a spectral weight of shape {fact.shape} states no K")
        d = len(fact.k_dims)
        set_lr_k_factor(
            param, rule.spectral_lr_multiplier(fact.modes, d) / rule.spectral_lr_multiplier(fact.base_modes, d)
        )
    return model


#: a rule's truth on a dataset, from the drift of its optimal master LR between two K
FAILS, HOLDS, NOT_RESOLVED = "fails (moves)", "holds", "not resolved"


def truth(lo: float, hi: float, holds: float) -> str:
    """A rule's truth from the 95 % interval [lo, hi] of its optimum's drift (decades): it *fails* when the interval
    excludes 0, *holds* when it lies within ±``holds``, else (a wide interval, or none: ±inf) it is *not resolved*."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return NOT_RESOLVED
    if lo > 0 or hi < 0:
        return FAILS
    if -holds <= lo and hi <= holds:
        return HOLDS
    return NOT_RESOLVED


def gate_is_right(flagged: bool, rule_truth: str) -> bool:
    """A gate is right about a rule when it flags it exactly when the rule fails: a flag without a measured failure
    would stop a sweep without evidence, a pass on a measured failure would let a broken rule through."""
    return flagged == (rule_truth == FAILS)
