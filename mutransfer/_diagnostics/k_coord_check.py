"""The conformance kit's coordinate check over K alone, on a user's factory and data: ``sweep --coord-check`` and
``coord-check --operator`` (mutransfer._diagnostics.operator_check holds the kit and the measurement both use)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from mutransfer._diagnostics.coord_check import FLAT, GROWS, NO_SIGNAL
from mutransfer._diagnostics.operator_check import (
    TOLERANCE,
    Curve,
    Spectral,
    _config,
    _curve,
    _move,
    watched_layers,
)
from operators.base_shapes import set_base_shapes, shape_of
from operators.factory import call


@dataclass(frozen=True)
class KCheck:
    """What :func:`k_coord_check` found: the curve under the muP facts and the control under a wrong K rule (none
    when no parameter of ``model_class`` grows with K)."""

    model_class: str
    modes: tuple[int, ...]
    lr: float
    seeds: int
    curves: tuple[Curve, ...]

    @property
    def flagged(self) -> list[str]:
        """What keeps it from passing, one line each ([] when it passes)."""
        if not self.curves:
            return [f"no parameter of {self.model_class} grows with K: nothing to check across K"]
        mup, wrong = self.curves
        if mup.verdict != FLAT:
            steepest = ", ".join(f"{name} ({slope:+.2f})" for name, slope in mup.fastest)
            return [mup.describe() + (f"; steepest layers: {steepest}" if steepest else "")]
        if wrong.verdict != GROWS:
            return [
                f"under a wrong K rule the update {wrong.verdict} ({wrong.describe()}): the check cannot see the rule"
            ]
        return []

    @property
    def verdict(self) -> str:
        """``pass``; ``flagged`` (the update under the facts is not flat in K); ``no-signal`` (nothing grows with K,
        nothing moved, or the wrong rule's control does not grow: the check cannot see the rule at these sizes)."""
        if not self.flagged:
            return "pass"
        if self.curves and self.curves[0].verdict not in (FLAT, NO_SIGNAL):
            return "flagged"
        return NO_SIGNAL

    def as_dict(self) -> dict[str, object]:
        return {
            "model_class": self.model_class,
            "modes": list(self.modes),
            "lr": self.lr,
            "seeds": self.seeds,
            "tolerance": TOLERANCE,
            "curves": [c.__dict__ for c in self.curves],
            "verdict": self.verdict,
            "flagged": self.flagged,
        }


def k_coord_check(
    factory: Callable[..., nn.Module],
    *,
    name: str,
    options: dict[str, object],
    x: torch.Tensor,
    y: torch.Tensor,
    modes: tuple[int, ...],
    width: int,
    lr: float,
    seeds: int = 3,
    k_exponent: float = 1.0,
    init_scale: float = 1.0,
    clip_value: float | None = None,
) -> KCheck:
    """The kit's coordinate check over K alone (item 5 of the module docstring) at the given sizes, on the given data:
    ``sweep --coord-check`` and ``coord-check --operator`` on a user's factory.

    Args:
        factory: ``build(*, K, width, in_channels, out_channels, **options)``; ``name`` labels its errors.
        x, y: a batch, channel-last: (B, *grid, C_in) and (B, *grid, C_out), float32.
        modes: K values, ascending; the first is the base the muP facts are relative to (the proxy's K).
        width: the width every model is built at; ``lr``: the one Adam step's base LR.
        k_exponent: the K rule (c(K) = (d log K)^(-k_exponent/2); 1 is the paper's).
        init_scale, clip_value: the spectral weights' init × scale and their gradients' element-wise clip, as the
            study's trainings apply them (the weights the muP facts mark spectral on the largest model).
    Returns:
        a :class:`KCheck`: the curve under the muP facts and the one under a deliberately wrong rule (spectral LR
        × (K/K0)²), none when no parameter of the model grows with K; ``.verdict``, ``.flagged``, ``.as_dict()``.
    """

    def build(K: int, w: int) -> nn.Module:
        return call(factory, name, _config(K, w, options, int(x.shape[-1]), int(y.shape[-1])))

    base = (modes[0], width)
    largest = build(modes[-1], width)
    with torch.random.fork_rng():
        set_base_shapes(largest, build(*base), k_exponent=k_exponent)
    found = KCheck(type(largest).__name__, tuple(modes), lr, seeds, ())
    if not any(f is not None and f.k_dims for f in map(shape_of, largest.parameters())):
        return found
    watched = watched_layers(largest, probe=x[:1])
    names = frozenset(n for n, p in largest.named_parameters() if getattr(shape_of(p), "role", None) == "spectral")
    spectral = Spectral(names, float(init_scale), clip_value)

    def run(size: tuple[int, int], rule: str, seed: int) -> dict[str, tuple[float, float]]:
        return _move(build, size, base, rule, seed, (x, y), watched, lr, k_exponent, spectral)

    by_k = [(k, width) for k in modes]
    curves = (_curve("K", "mup", "spectral", by_k, run, seeds), _curve("K", "wrong", "spectral", by_k, run, seeds))
    return KCheck(found.model_class, found.modes, lr, seeds, curves)
