"""The operator families the service knows, each registered once with its behaviour (operators.family).

A family answers, for studies, the trainer, the sweep and the CLI, through its record:
``build`` (a :class:`~operators.family.ModelSpec` or a config → the model), ``plan``
(one Adam step's parameters, memory and FLOPs: operators.planning for the FNO,
operators.planning_attention with the family's own ``attention_formula`` for the
attention operators), ``axes`` (what a transfer scales: ``("K", "width")`` for FNO,
``("width",)`` for the attention operators; hence the K rule, the hyperparameters that
apply and the coordinate check), ``inputs`` ("grid" and/or "points"), ``fields`` (study/CLI
fields only this family has), ``attention_scaled`` (the 1/d_h attention scale in its
width rule) and ``defaults`` (its options' values when none are given).

Adding a fifth operator: write its module, then one ``register_family(OperatorFamily(...))``
(below, or from anywhere: tests/operators/test_families.py registers a toy family).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict

from torch import nn

from operators.adapters import GridPointSet, PackedPointSet, point_set_config
from operators.attention_formulas import Shape, galerkin_formula, gnot_formula, ono_formula
from operators.errors import OperatorConfigError
from operators.family import (
    OPERATORS,
    SPECTRAL_HYPERPARAMETERS,
    ModelSpec,
    OperatorFamily,
    family_of_config,
    get_family,
    point_set_families,
    register_family,
    unregister_family,
)
from operators.fno import FNO
from operators.galerkin import GalerkinTransformer
from operators.gnot import GNOT
from operators.interfaces import ModelConfig, config_int
from operators.ono import ONO
from operators.planning import fno_step_flops, plan_fno_config
from operators.planning_attention import plan_attention_config

__all__ = [
    "FAMILIES",
    "OPERATORS",
    "SPECTRAL_HYPERPARAMETERS",
    "ModelSpec",
    "OperatorFamily",
    "family_of_config",
    "get_family",
    "point_set_families",
    "register_family",
    "unregister_family",
]


class _FNODefaults(TypedDict):
    modes: int
    projection_channels: int
    parametrization: str


#: the FNO's own options and their values when none are given
FNO_DEFAULTS: _FNODefaults = {"modes": 8, "projection_channels": 128, "parametrization": "mup"}
#: the attention operators' own options and their values when none are given
ATTENTION_DEFAULTS = {"heads": 4}
#: FNO config keys (operators.fno.FNO.config) its planner reads
_FNO_KEYS = ("dim", "modes", "width", "layers", "in_channels", "out_channels", "projection_channels", "padding")


def fno_config(spec: ModelSpec) -> ModelConfig:
    """The FNO's constructor arguments (its ``.config``) for ``spec``; options: padding, projection_channels, k_exponent."""
    o = spec.options
    return {
        "dim": spec.dim,
        "in_channels": int(spec.input_channels),
        "out_channels": int(spec.output_channels),
        "modes": int(FNO_DEFAULTS["modes"] if spec.modes is None else spec.modes),
        "width": int(spec.width),
        "layers": int(spec.layers),
        "parametrization": spec.parametrization or FNO_DEFAULTS["parametrization"],
        "projection_channels": config_int(
            o.get("projection_channels") or FNO_DEFAULTS["projection_channels"], "projection_channels"
        ),
        "padding": config_int(o.get("padding") or 0, "padding"),
        "init_scale": float(spec.init_scale),
        "k_exponent": o.get("k_exponent", 1.0),
        "width_parametrization": spec.width_parametrization,
        "base_width": spec.base_width,
    }


def _owns_fno(config: object) -> bool:
    return (
        isinstance(config, dict) and all(k in config for k in _FNO_KEYS) and not {"operator", "factory"} & set(config)
    )


def _construct_fno(config: ModelConfig) -> nn.Module:
    """``FNO(**config)``: the constructor checks the names and values (a TypeError names a wrong one)."""
    build: Callable[..., nn.Module] = FNO  # the config's values are checked by FNO itself, not by the type
    return build(**config)


def _mapping(value: object, name: str) -> Mapping[str, object]:
    """``value``, a mapping of names to values (a one-line error naming ``name`` otherwise)."""
    if not isinstance(value, Mapping):
        raise OperatorConfigError(f"{name} {value!r}: must be a mapping of names to values")
    return value


def _attention_family(
    name: str,
    label: str,
    cls: Callable[..., nn.Module],
    formula: Callable[..., Shape],
    *,
    attention_scaled: bool,
) -> OperatorFamily:
    """An attention operator on grids and point sets through the point-set adapters (operators.adapters)."""

    def configure(spec: ModelSpec) -> ModelConfig:
        o = spec.options
        heads = o.get("heads")
        free = _mapping(o.get("options") or {}, "options")
        config = point_set_config(
            name,
            coord_dim=spec.dim,
            input_channels=spec.input_channels,
            output_channels=spec.output_channels,
            packed=spec.packed,
            width=int(spec.width),
            layers=int(spec.layers),
            heads=ATTENTION_DEFAULTS["heads"] if heads is None else config_int(heads, "heads"),
            width_parametrization=spec.width_parametrization,
            base_width=spec.base_width,
            **free,
        )
        return {**config, "coord_dim": spec.dim, "packed": bool(spec.packed), "normalization": spec.normalization}

    def construct(config: ModelConfig) -> nn.Module:
        """From :meth:`configure`'s output, or from an adapter's own ``config`` (a saved model: ``dim`` on a grid)."""
        adapter = PackedPointSet if config.get("packed", "dim" not in config) else GridPointSet
        operator_config = _mapping(config["operator_config"], "operator_config")
        coord_dim = config.get("coord_dim", config.get("dim", operator_config["coord_dim"]))
        if not isinstance(coord_dim, int):  # the adapters' own check and message
            raise OperatorConfigError(f"coord_dim {coord_dim!r}: must be a positive integer")
        normalization = config.get("normalization")
        return adapter(
            coord_dim,
            str(config["operator"]),
            dict(operator_config),
            None if normalization is None else _mapping(normalization, "normalization"),
        )

    def owns(config: object) -> bool:
        return (
            isinstance(config, dict)
            and config.get("operator") == name
            and isinstance(config.get("operator_config"), dict)
        )

    return OperatorFamily(
        name,
        label,
        cls,
        axes=("width",),
        inputs=("grid", "points"),
        configure=configure,
        construct=construct,
        planner=plan_attention_config,
        owns=owns,
        fields=("heads", "options"),
        attention_scaled=attention_scaled,
        attention_formula=formula,
        standardizes=True,
        defaults=dict(ATTENTION_DEFAULTS),
    )


FAMILIES = (
    OperatorFamily(
        "fno",
        "FNO",
        FNO,
        axes=("K", "width"),
        inputs=("grid",),
        configure=fno_config,
        construct=_construct_fno,
        planner=plan_fno_config,
        owns=_owns_fno,
        flops=fno_step_flops,
        fields=("padding", "projection_channels", "k_exponent"),
        defaults=dict[str, object](FNO_DEFAULTS),
    ),
    _attention_family("galerkin", "Galerkin Transformer", GalerkinTransformer, galerkin_formula, attention_scaled=True),
    _attention_family("ono", "ONO", ONO, ono_formula, attention_scaled=True),
    _attention_family("gnot", "GNOT", GNOT, gnot_formula, attention_scaled=False),
)
for _family in FAMILIES:
    if _family.name not in OPERATORS:
        register_family(_family)
