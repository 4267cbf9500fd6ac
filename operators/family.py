"""What an operator family is, and the table of registered families (operators.registry fills it).

A family owns its behaviour: the service asks the record, never which family it holds.

- ``configure(spec)``: the model's ``config`` from a neutral :class:`ModelSpec`
  (sizes, channels, the width rule, the family's own fields); ``construct(config)``
  builds the model from it (``build(config)`` does both steps);
- ``planner(config, grid=, batch=, precision=, weight_decay=, device=)``: parameters,
  peak memory and FLOPs of one Adam step, without allocating (``plan``);
- ``axes``: what a proxy-to-target transfer scales (``"K"`` and/or ``"width"``), hence which
  hyperparameters apply (``clip_value``/``init_scale`` act on spectral weights, K only),
  the coordinate check and the K rule of the transfer;
- ``standardizes``: its models take per-channel input/output standardisation from the
  training split; ``flops(config, grid)``: analytic training FLOPs per sample (None: counted);
- ``owns(config)``: whether a model's ``config`` was built by this family (memory checks);
- ``defaults``: the values of its own options when a user gives none (``mutransfer train``);
- ``facts_on_parameters``: its multipliers are the muP facts on its parameters, relative to the proxy
  (operators.factory), not c(K) applied by its own layers.

:func:`register_family` adds one (a new operator, or a test's toy), :func:`unregister_family`
removes it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from torch import nn

from operators.errors import OperatorConfigError
from operators.interfaces import ModelConfig, Planner, StepPlan
from operators.parametrization import model_spectral_lr

if TYPE_CHECKING:
    from operators.attention_formulas import Shape

_V = TypeVar("_V")

#: hyperparameters that act on spectral weights (searchable only for families with the K axis)
SPECTRAL_HYPERPARAMETERS = ("clip_value", "init_scale")


@dataclass(frozen=True)
class ModelSpec:
    """A model described without naming its class: what every family's ``configure`` reads.

    ``input_channels`` is the last-axis size of the input tensor (for packed point sets
    d + C_in + 1). ``modes`` is K (families with the K axis), ``base_modes`` the proxy's K. ``options`` holds the
    family's own fields (``padding``, ``projection_channels``, ``heads``, free ``options``).
    """

    dim: int
    input_channels: int
    output_channels: int
    width: int
    layers: int
    modes: int | None = None
    #: K of the base (the proxy) that muP's multipliers are relative to: a user's factory family builds it
    base_modes: int | None = None
    parametrization: str = "mup"
    width_parametrization: str = "standard"
    base_width: int | None = None
    init_scale: float = 1.0
    packed: bool = False
    normalization: Mapping[str, object] | None = None
    options: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class OperatorFamily:
    """One operator family: its data and its behaviour (see the module docstring)."""

    name: str
    label: str
    build_class: Callable[..., nn.Module]
    axes: tuple[str, ...]
    inputs: tuple[str, ...]
    configure: Callable[[ModelSpec], ModelConfig]
    construct: Callable[[ModelConfig], nn.Module]
    planner: Planner
    owns: Callable[[object], bool]
    fields: tuple[str, ...] = ()
    attention_scaled: bool = False
    attention_formula: Callable[[ModelConfig], Shape] | None = None
    standardizes: bool = False
    flops: Callable[[ModelConfig, tuple[int, ...]], float] | None = None
    defaults: dict[str, object] = field(default_factory=dict)
    #: its models carry muP facts on their parameters (operators.base_shapes: a user's factory), relative to the
    #: proxy, instead of applying c(K) and the width rules in their own layers
    facts_on_parameters: bool = False

    @property
    def spectral(self) -> bool:
        """Has spectral weights with K modes (K-parametrization, clipping, init_scale, coord-check)."""
        return "K" in self.axes

    def scales(self, axis: str) -> bool:
        """Whether a proxy-to-target transfer may scale ``axis`` ("K" or "width") for this family."""
        return axis in self.axes

    def sized(self, modes: int | None) -> int | None:
        """``modes`` for a family with the K axis, else None (what a Scaling, a ladder size, a plan reads)."""
        return modes if self.spectral else None

    def applies(self, hyperparameter: str) -> bool:
        """Whether ``hyperparameter`` acts on this family's models (clip_value, init_scale: spectral weights only)."""
        return self.spectral or hyperparameter not in SPECTRAL_HYPERPARAMETERS

    def own_hyperparameters(self, hp: dict[str, _V]) -> dict[str, _V]:
        """``hp`` without the hyperparameters that do not act on this family's models."""
        return {key: value for key, value in hp.items() if self.applies(key)}

    @property
    def coord_checkable(self) -> bool:
        """Whether the coordinate check across K applies to its models: spectral ones (the project's FNO, by its
        Fourier layers; a user's factory, by the layers holding the parameters its muP facts mark spectral)."""
        return self.spectral

    def takes(self, kind: str) -> bool:
        """Whether it can learn data of this kind ("grid" or "points")."""
        return kind in self.inputs

    def describe(self, dim: int, modes: int | None, width: int) -> str:
        """The model's label in reports, e.g. "FNO-2D K=24 width 32" or "galerkin width 64"."""
        if self.spectral:
            return f"{self.label}-{dim}D K={modes} width {width}"
        return f"{self.name} width {width}"

    def build(self, config_or_spec: ModelSpec | ModelConfig) -> nn.Module:
        """The model for a :class:`ModelSpec` or for a ``config`` from :meth:`configure`; one-line errors."""
        config = self.configure(config_or_spec) if isinstance(config_or_spec, ModelSpec) else config_or_spec
        try:
            return self.construct(config)
        except TypeError as exc:
            name = getattr(self.build_class, "__name__", self.name)
            raise OperatorConfigError(
                f"{self.name} options: {exc}; see the {name} docstring for its arguments"
            ) from None

    def make(self, config: Mapping[str, object]) -> nn.Module:
        """The bare operator class built from its constructor arguments ``config`` (one-line errors)."""
        try:
            return self.build_class(**config)
        except TypeError as exc:
            name = getattr(self.build_class, "__name__", self.name)
            raise OperatorConfigError(
                f"{self.name} options: {exc}; see the {name} docstring for its arguments"
            ) from None

    def plan(
        self,
        config_or_spec: ModelSpec | ModelConfig,
        *,
        grid: tuple[int, ...],
        batch: int = 1,
        precision: str = "fp32",
        weight_decay: float = 0.0,
        device: str = "cuda",
    ) -> StepPlan:
        """The plan of one Adam step (parameters, peak memory, FLOPs) on samples of unpadded shape ``grid``."""
        config = self.configure(config_or_spec) if isinstance(config_or_spec, ModelSpec) else config_or_spec
        return self.planner(
            config,
            grid=tuple(grid),
            batch=int(batch),
            precision=precision,
            weight_decay=float(weight_decay),
            device=device,
        )

    def spectral_lr(self, model: nn.Module, lr: float) -> float:
        """The spectral weights' Adam LR at step 0 (c(K)·lr; ``lr`` for families without spectral weights)."""
        return model_spectral_lr(model, lr)


#: family by the name studies and the CLI use (built-ins registered by operators.registry)
OPERATORS: dict[str, OperatorFamily] = {}


def register_family(family: OperatorFamily) -> OperatorFamily:
    """Add ``family`` to the table (studies, the CLI, the sweep and the planners then know it)."""
    if family.name in OPERATORS:
        raise OperatorConfigError(f"operator {family.name!r} is already registered")
    OPERATORS[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Remove the family ``name`` (a test's toy family, after the test)."""
    OPERATORS.pop(name, None)


def _with_builtins() -> dict[str, OperatorFamily]:
    """The table, the built-in families in it (operators.registry registers them on its first import)."""
    importlib.import_module("operators.registry")
    return OPERATORS


def get_family(name: str) -> OperatorFamily:
    """The registered family ``name``, with a one-line error listing the known ones.

    A factory path ("mymodel:build", operators.factory) or an installed plug-in's name (entry-point group
    ``mutransfer.operators``) registers its family on first use, its module imported as installed or from the
    working directory.
    """
    _with_builtins()
    if name not in OPERATORS and importlib.import_module("operators.factory").is_user_operator(name):
        return _factory_family(name, named_by_the_command=True)
    try:
        return OPERATORS[name]
    except KeyError:
        raise OperatorConfigError(
            f"operator {name!r} is unknown; use one of: {', '.join(OPERATORS)}, or a factory 'module:function'"
        ) from None


def _factory_family(path: str, *, named_by_the_command: bool = False) -> OperatorFamily:
    """The family of a user's factory, its module found as installed or in the working directory only (never
    where a study or model folder says). A factory a folder names (a saved model's config) must be a module in the
    working directory or an installed plug-in's (operators.factory.trusted_from_folder): any other installed
    function would run with the folder's arguments."""
    factory = importlib.import_module("operators.factory")  # it imports this module: at call time
    resolved = factory.plugins().get(path, path)  # an installed plug-in's name, or a factory path
    directory = factory.locate(resolved, [Path.cwd()])
    if not named_by_the_command and not factory.trusted_from_folder(resolved, directory):
        raise OperatorConfigError(
            f"operator {path!r}: a saved model names this factory, which is neither a module in the working "
            "directory nor an installed plug-in (entry points mutransfer.operators); run from the directory that "
            "holds it, or install it as a plug-in"
        )
    family: OperatorFamily = factory.factory_family(resolved, directory, name=path)
    return family


def point_set_families() -> tuple[str, ...]:
    """Names of the families that take point sets (irregular meshes)."""
    return tuple(f.name for f in _with_builtins().values() if f.takes("points"))


def family_of_config(config: object) -> OperatorFamily | None:
    """The family that built a model with this ``config`` (None: no registered family owns it)."""
    for family in _with_builtins().values():
        if family.owns(config):
            return family
    if isinstance(config, dict) and isinstance(config.get("factory"), str):  # a user's model (operators.factory)
        return _factory_family(config["factory"])
    return None


#: the layers of a family built for the conformance kit when its options give none (a small model: the kit is quick)
_KIT_LAYERS = 2


def family_factory(name: str, dim: int, options: Mapping[str, object] | None = None) -> Callable[..., nn.Module]:
    """The registered family ``name`` as a factory ``build(*, K, width, in_channels, out_channels, **options)`` on a
    ``dim``-D grid, built in the standard parametrization so that its muP comes from the facts its parameters and
    attentions declare, as a user's model's does (``mutransfer check-operator fno``). ``options`` holds
    ``layers`` (default 2, a small model for the kit) and the family's own fields (not ``k_exponent``: the kit's K
    rule is ρ = 1); ``options`` given here are
    checked now (a name the family does not take is a one-line error), as they are at each build."""
    family = get_family(name)
    if not family.takes("grid"):
        raise OperatorConfigError(
            f"operator {name!r} takes point sets only, and the conformance kit's models take grids; check a factory "
            "of yours that wraps it for a grid instead"
        )
    # k_exponent is not taken: the kit's K rule is the paper's (rho = 1), whatever the option would say
    known = ("layers", *(f for f in family.fields if f != "k_exponent"))

    def layers_of(options: Mapping[str, object]) -> int:
        """The options' ``layers`` (2 when not given), checked; a name the family does not take is refused."""
        unknown = sorted(set(options) - set(known))
        if unknown:
            nested = " (its own settings under options, e.g. {options: {attention_type: fourier}})"
            raise OperatorConfigError(
                f"option {unknown[0]!r}: the {name} family takes {', '.join(known)}"
                + (nested if "options" in known else "")
            )
        layers = options.get("layers", _KIT_LAYERS)
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise OperatorConfigError(f"option layers {layers!r}: must be a positive integer")
        return layers

    if options is not None:
        layers_of(options)

    def build(*, K: int, width: int, in_channels: int, out_channels: int, **options: object) -> nn.Module:
        layers = layers_of(options)
        spec = ModelSpec(
            dim=dim,
            input_channels=in_channels,
            output_channels=out_channels,
            width=width,
            layers=layers,
            modes=K if family.spectral else None,
            parametrization="standard",
            width_parametrization="standard",
            options={k: v for k, v in options.items() if k != "layers"},
        )
        return family.build(spec)

    build.__name__ = build.__qualname__ = name
    return build
