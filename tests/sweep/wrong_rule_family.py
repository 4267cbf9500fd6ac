"""A deliberately wrong K-parametrization, as a test-only operator family: ``fno_wrong_k``.

The FNO under μP, except that **every** Adam LR multiplier grows with K: at K modes each parameter's LR is
``(K / BASE_K) ** POWER`` times what μP gives it (the spectral weights' c(K) through ``SpectralConv.lr_multiplier``,
every other parameter through the ``mutransfer_lr_multipliers()`` protocol of operators.parametrization). At the
proxy's K (``BASE_K`` = 6) it *is* the μP FNO; at the target's K = 24 every effective LR is 4 ** POWER times larger at
the same master LR. ``sweep --verify`` compares the proxy's and the target's optima on the same master-LR grid, so
under this rule the target's optimum moves by about −POWER·log10(4) decades from the proxy's: a transfer rule that
does not hold, on purpose. (Scaling every parameter, not only the spectral weights, keeps the shift from being
diluted by the pointwise layers, which μP leaves at the master LR.)

The test registers it in its own process and runs the study on the in-process executor, where every model is built.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch import nn

from operators.family import OPERATORS, OperatorFamily, register_family
from operators.fno import FNO
from operators.interfaces import ModelConfig
from operators.parametrization import spectral_modules
from operators.planning import fno_step_flops, plan_fno_config
from operators.registry import FNO_DEFAULTS, fno_config

NAME = "fno_wrong_k"
#: the K at which the wrong rule agrees with μP (the tiny study's proxy_K)
BASE_K = 6
#: every LR multiplier × (K / BASE_K) ** POWER: K = 24 moves the optimum by −POWER·log10 4 ≈ −0.6·POWER decades
POWER = 1.0


def wrong_factor(modes: int) -> float:
    """What the wrong rule multiplies every μP LR by at K = ``modes``."""
    return float((modes / BASE_K) ** POWER)


class WrongRuleFNO(FNO):
    """The μP FNO with every LR multiplier × :func:`wrong_factor` (K)."""

    def __init__(self, **config) -> None:
        super().__init__(**config)
        self.wrong_factor = wrong_factor(self.modes)
        for conv in spectral_modules(self):
            conv.lr_multiplier = conv.lr_multiplier * self.wrong_factor

    def mutransfer_lr_multipliers(self) -> Iterator[tuple[nn.Parameter, str, float]]:
        """Every parameter that is not a spectral weight at (its μP multiplier) × the wrong factor."""
        own = {id(p): (name, mult) for p, name, mult in super().mutransfer_lr_multipliers()}
        spectral = {id(p) for conv in spectral_modules(self) for p in conv.spectral_weights()}
        for p in self.parameters():
            if id(p) in spectral:
                continue
            name, mult = own.get(id(p), ("wrong_rule", 1.0))
            yield p, name, mult * self.wrong_factor


def _construct(config: ModelConfig) -> nn.Module:
    return WrongRuleFNO(**config)


FAMILY = OperatorFamily(
    NAME,
    "FNO (wrong K rule)",
    WrongRuleFNO,
    axes=("K", "width"),
    inputs=("grid",),
    configure=fno_config,
    construct=_construct,
    planner=plan_fno_config,
    owns=lambda config: False,  # its config is the FNO's: a saved model rebuilds as the plain FNO (not used here)
    flops=fno_step_flops,
    fields=("padding", "projection_channels"),
    defaults=dict[str, object](FNO_DEFAULTS),
)


def register() -> None:
    """Register :data:`FAMILY` in this process (idempotent: Ray may reuse a worker)."""
    if NAME not in OPERATORS:
        register_family(FAMILY)
