"""The operator families the service knows, each registered once with what the service needs to know.

A family answers, for studies, the trainer, the sweep and the CLI:

- ``build(**config)``: the model class (its ``config`` dict rebuilds it);
- ``axes``: what a proxy-to-target transfer may scale: ``("K", "width")`` for FNO
  (Fourier modes and width), ``("width",)`` for the attention operators;
- ``inputs``: the data it takes: ``"grid"`` (arrays on a regular grid) and/or
  ``"points"`` (irregular point sets, packed; grids are presented as point sets);
- ``fields``: study/CLI fields that only this family has (e.g. FNO's padding, the
  attention operators' heads), refused for the others with one line;
- ``attention_scaled``: its width-muP rule includes the 1/d_h attention scale
  (Galerkin, ONO), a row of the transfer table;
- ``spectral``: it has spectral weights (the K-parametrization, element-wise
  clipping, ``init_scale``, the coordinate check and the exact memory plan apply).

Adding a fifth operator: write its module, then add one ``OperatorFamily(...)`` line
to ``FAMILIES`` below (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from operators.errors import OperatorConfigError
from operators.fno import FNO
from operators.galerkin import GalerkinTransformer
from operators.gnot import GNOT
from operators.ono import ONO

#: hyperparameters that act on spectral weights (searchable only for spectral families)
SPECTRAL_HYPERPARAMETERS = ("clip_value", "init_scale")


@dataclass(frozen=True)
class OperatorFamily:
    """What the service needs to know about one operator family."""

    name: str
    label: str
    build: Callable[..., nn.Module]
    axes: tuple[str, ...]
    inputs: tuple[str, ...]
    fields: tuple[str, ...] = ()
    attention_scaled: bool = False

    @property
    def spectral(self) -> bool:
        """Has spectral weights with K modes (K-parametrization, clipping, init_scale, coord-check, plan)."""
        return "K" in self.axes

    def takes(self, kind: str) -> bool:
        """Whether it can learn data of this kind ("grid" or "points")."""
        return kind in self.inputs

    def make(self, config: dict) -> nn.Module:
        """``build(**config)`` with a one-line error for unknown options."""
        try:
            return self.build(**config)
        except TypeError as exc:
            name = getattr(self.build, "__name__", self.name)
            raise OperatorConfigError(f"{self.name} options: {exc}; see the {name} docstring for its arguments") from None


FAMILIES = (
    OperatorFamily("fno", "FNO", FNO, axes=("K", "width"), inputs=("grid",), fields=("padding", "projection_channels")),
    OperatorFamily("galerkin", "Galerkin Transformer", GalerkinTransformer, axes=("width",), inputs=("grid", "points"),
                   fields=("heads", "options"), attention_scaled=True),
    OperatorFamily("ono", "ONO", ONO, axes=("width",), inputs=("grid", "points"), fields=("heads", "options"),
                   attention_scaled=True),
    OperatorFamily("gnot", "GNOT", GNOT, axes=("width",), inputs=("grid", "points"), fields=("heads", "options")),
)

#: family by the name studies and the CLI use
OPERATORS: dict[str, OperatorFamily] = {family.name: family for family in FAMILIES}


def get_family(name: str) -> OperatorFamily:
    """The registered family ``name``, with a one-line error listing the known ones."""
    try:
        return OPERATORS[name]
    except KeyError:
        raise OperatorConfigError(f"operator {name!r} is unknown; use one of: {', '.join(OPERATORS)}") from None


def point_set_families() -> tuple[str, ...]:
    """Names of the families that take point sets (irregular meshes)."""
    return tuple(f.name for f in FAMILIES if f.takes("points"))


def family_of(model: nn.Module) -> OperatorFamily | None:
    """The family whose class built ``model`` (None for other models)."""
    for family in FAMILIES:
        if isinstance(model, family.build):
            return family
    return None
