"""A user's own operator as a family: a factory named by its import path, ``"mymodel:build"``.

The factory is called as ``build(*, K, width, in_channels, out_channels, **options)`` and returns an
``nn.Module`` that takes the project's grid layout, (B, N_1, …, N_d, in_channels), and returns
(B, N_1, …, N_d, out_channels): channel-last, the coordinates not appended (append them yourself if your
model wants them). A channel-first model (neuraloperator's) is one line away:
``lambda x: model(x.movedim(-1, 1)).movedim(1, -1)`` in a wrapping module.

μP for it comes from its parameters' shapes (operators.base_shapes): the family builds the model, then the
same factory at the study's base sizes (the proxy's K and width) and, on the meta device, at the base's K and
the model's width (the ``delta`` that splits K's dims from the width's exactly), and :func:`set_base_shapes`
puts the facts on the model's parameters; the trainer's optimizer groups read them (operators.parametrization). At the
proxy's own sizes the model trains as its author wrote it.

Where the module is imported from: as installed, else from a directory the *command* chose (the study
file's directory or the working directory; :func:`locate`), never from a path written in a study folder or
a model folder. A factory that cannot be imported, is not callable, fails, or returns no ``nn.Module`` is
a one-line :class:`OperatorConfigError`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

import torch
from torch import nn

from operators.base_shapes import infer_shapes, set_base_shapes
from operators.declarations import declare
from operators.errors import OperatorConfigError
from operators.family import OPERATORS, ModelSpec, OperatorFamily, register_family
from operators.interfaces import ModelConfig, StepPlan, config_int
from operators.saved_activations import SavedActivations, saved_activations

_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: copies of the parameters in one Adam step: the weight, its gradient, Adam's two moments
_STEP_COPIES = 4


def is_factory_path(name: str) -> bool:
    """Whether an ``operator.type`` names a factory ("module:function") rather than a registered family."""
    return ":" in name


def check_factory_path(path: str) -> tuple[str, str]:
    """(module, attribute) of ``path``, or a one-line error showing the form."""
    if not _PATH.fullmatch(path):
        raise OperatorConfigError(
            f"operator.type {path!r}: a factory is named 'module:function', e.g. mymodel:build for a build() in "
            "mymodel.py beside the study file, or mypkg.models:build"
        )
    module, _, attr = path.partition(":")
    return module, attr


def locate(path: str, search: Iterable[Path]) -> str | None:
    """The directory to import ``path``'s module from: None when it imports as installed (an installed package
    wins over a same-named file), else the first of ``search`` holding ``<top>.py`` or a ``<top>/`` package, else
    None (then it must import as installed)."""
    top = check_factory_path(path)[0].split(".")[0]
    search = [Path(d) for d in search]
    if _installed(top, search):
        return None
    for directory in search:
        if (directory / f"{top}.py").is_file() or (directory / top / "__init__.py").is_file():
            return str(directory.resolve())
    return None


def _installed(top: str, search: list[Path]) -> bool:
    """Whether module ``top`` imports without the ``search`` directories and the working directory on the path
    (installed, editable or not, or the standard library)."""
    banned = {str(d.resolve()) for d in [*search, Path.cwd()]}
    loaded = sys.modules.get(top)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None)
        return origin is None or not any(str(Path(origin).resolve()).startswith(b + "/") for b in banned)
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in saved if p not in ("", ".") and str(Path(p).resolve()) not in banned]
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path[:] = saved


def trusted_from_folder(path: str, directory: str | None) -> bool:
    """Whether a factory named by a folder's file (a study folder's study.yaml, a model folder's config) may be
    imported: only a module the command's own directory holds, or an installed plug-in's factory. Any other
    installed module (``torch.hub:load``…) would run what the folder's writer chose."""
    return directory is not None or path in plugins().values()


def module_paths(path: str, directory: str | None) -> tuple[str, ...]:
    """The local file (``<top>.py``) or package folder ``path``'s module is imported from, () when installed."""
    if directory is None or not is_factory_path(path):
        return ()
    top = check_factory_path(path)[0].split(".")[0]
    single = Path(directory) / f"{top}.py"
    return (str(single),) if single.is_file() else (str(Path(directory) / top),)


def load_factory(path: str, directory: str | None) -> Callable[..., nn.Module]:
    """Import the factory ``path`` (from ``directory`` first, when given); one-line errors."""
    module_name, attr = check_factory_path(path)
    if directory is not None and directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        if directory is None and importlib.util.find_spec(module_name.split(".")[0]) is None:
            raise ModuleNotFoundError(name=module_name.split(".")[0])
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            top = module_name.split(".")[0]
            raise OperatorConfigError(
                f"operator.type {path!r}: no module {module_name!r} is importable; put {top}.py beside the study "
                "file or in the working directory, or install it"
            ) from None
        raise OperatorConfigError(f"operator.type {path!r}: importing {module_name} failed: {_one_line(exc)}") from None
    except Exception as exc:  # the user's module raised while importing: any error, shown in one line
        raise OperatorConfigError(f"operator.type {path!r}: importing {module_name} failed: {_one_line(exc)}") from None
    found: object = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise OperatorConfigError(f"operator.type {path!r}: module {module_name} has no {attr!r}")
        found = getattr(found, part)
    if not callable(found):
        raise OperatorConfigError(f"operator.type {path!r}: {attr} is a {type(found).__name__}, not a function")
    return cast(Callable[..., nn.Module], found)  # callable, checked above; what it returns is checked by call()


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def call(factory: Callable[..., nn.Module], path: str, config: ModelConfig) -> nn.Module:
    """``factory(K=, width=, in_channels=, out_channels=, **options)``; one-line errors when it fails or returns
    something that is not an ``nn.Module``."""
    options = dict(_mapping(config.get("options", {})))
    kwargs: dict[str, object] = {
        "K": config["K"],
        "width": config["width"],
        "in_channels": config["in_channels"],
        "out_channels": config["out_channels"],
        **options,
    }
    try:
        model = factory(**kwargs)
    except Exception as exc:  # the user's factory failed: any error, shown in one line
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise OperatorConfigError(f"operator.type {path!r}: {path}({shown}) failed: {_one_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise OperatorConfigError(
            f"operator.type {path!r}: returned a {type(model).__name__}, not a torch.nn.Module; return the model"
        )
    return model


def _mapping(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise OperatorConfigError(f"operator.options {value!r}: must be a mapping of argument names to values")
    return value


@dataclass(frozen=True)
class FactoryPlan:
    """One Adam step of a user's model: its parameters counted on the meta device, and the activations its forward
    keeps for backward measured there (operators.saved_activations; None where the forward cannot run on the meta
    device, or under mixed precision, which keeps other dtypes than the fp32 measurement)."""

    total_params: int
    label: str
    precision: str = "fp32"
    #: the parameters' bytes (a complex64 entry is 8)
    params_bytes: int = 0
    saved: SavedActivations | None = None
    batch: int = 1

    @property
    def activations_bytes(self) -> int | None:
        return None if self.saved is None or self.precision != "fp32" else self.saved.at(self.batch)

    @property
    def total_bytes(self) -> int:
        return _STEP_COPIES * (self.params_bytes or 4 * self.total_params) + (self.activations_bytes or 0)

    smaller = "a smaller target_width or target_K"

    def fits(self, memory_bytes: int, /) -> bool:
        return self.total_bytes <= memory_bytes

    def replan(self, *, batch: int | None = None, precision: str | None = None) -> StepPlan:
        """The same step at another batch or precision (what is not given stays)."""
        return replace(self, batch=batch or self.batch, precision=precision or self.precision)


def count_parameters(factory: Callable[..., nn.Module], path: str, config: ModelConfig) -> int:
    """The model's parameter count, built on the meta device (no memory) where the factory allows it."""
    return _count(factory, path, config)[0]


def _shapes_only(factory: Callable[..., nn.Module], path: str, config: ModelConfig) -> nn.Module:
    """The model for its shapes only: built on the meta device (no memory), or for real, once, by a factory that
    cannot build there."""
    try:
        with torch.device("meta"):
            return call(factory, path, config)
    except OperatorConfigError:
        return call(factory, path, config)


def _count(factory: Callable[..., nn.Module], path: str, config: ModelConfig) -> tuple[int, int]:
    """(parameters, their bytes) of the model, built on the meta device where the factory allows it."""
    params = list(_shapes_only(factory, path, config).parameters())
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


#: the entry-point group through which an installed package offers its operators: ``name = "pkg.models:build"``
PLUGIN_GROUP = "mutransfer.operators"


def plugins() -> dict[str, str]:
    """The installed plug-ins: operator name → its factory path (entry points of :data:`PLUGIN_GROUP`)."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP)}


def is_user_operator(name: str) -> bool:
    """Whether an ``operator.type`` names a factory path or an installed plug-in (not a built-in family)."""
    return is_factory_path(name) or (name not in OPERATORS and name in plugins())


#: the operator fields of a factory's study: its own arguments, and the K rule's exponent (set_base_shapes, configure)
FACTORY_FIELDS = ("options", "k_exponent")


def factory_family(
    path: str, directory: str | None, label: str | None = None, name: str | None = None
) -> OperatorFamily:
    """The family of the factory ``path`` (registered on first use, in whichever process asks), under ``name``
    (a plug-in's name; default: the path). A plug-in's name given as ``path`` is resolved to its factory."""
    name = name or path
    if name in OPERATORS:
        return OPERATORS[name]
    path = plugins().get(path, path) if not is_factory_path(path) else path
    factory = load_factory(path, directory)

    def configure(spec: ModelSpec) -> ModelConfig:
        options = dict(_mapping(spec.options.get("options", {})))  # the user's own (operator.options, --option)
        base_k = spec.base_modes if spec.parametrization == "mup" and spec.base_modes is not None else spec.modes
        return {
            "factory": path,
            "dim": spec.dim,
            "K": spec.modes,
            "width": spec.width,
            "in_channels": int(spec.input_channels),
            "out_channels": int(spec.output_channels),
            "options": options,
            "base_K": base_k,
            "base_width": spec.base_width if spec.base_width is not None else spec.width,
            "k_exponent": float(_number(spec.options.get("k_exponent", 1.0))),
            "init_scale": float(spec.init_scale),
        }

    def construct(config: ModelConfig) -> nn.Module:
        model = call(factory, path, config)
        with torch.random.fork_rng():  # the base's draws leave the model's seed stream as it was
            base = call(factory, path, {**config, "K": config["base_K"], "width": config["base_width"]})
            delta = _delta(factory, path, config)
            _roles_from_a_probe(factory, path, config, model)
        set_base_shapes(model, base, delta=delta, k_exponent=float(_number(config.get("k_exponent", 1.0))))
        scale = float(_number(config.get("init_scale", 1.0)))
        if scale != 1.0:
            _scale_spectral_init(model, scale)
        if hasattr(model, "config"):
            raise OperatorConfigError(
                f"operator.type {path!r}: the model has its own .config attribute, where mutransfer records how to "
                "rebuild it; rename yours"
            )
        setattr(model, "config", dict(config))  # noqa: B010 -- what saves and rebuilds it (no pickle): operators.family.family_of_config
        return model

    def planner(
        config: ModelConfig, *, grid: tuple[int, ...], batch: int, precision: str, weight_decay: float, device: str
    ) -> StepPlan:
        model = _shapes_only(factory, path, config)
        params = list(model.parameters())
        on_meta = all(p.device.type == "meta" for p in params)
        sample = (*grid, config_int(config["in_channels"], "in_channels"))
        return FactoryPlan(
            sum(p.numel() for p in params),
            f"{model_label} K={config['K']} width {config['width']}",
            precision,
            sum(p.numel() * p.element_size() for p in params),
            saved_activations(model, sample) if on_meta else None,
            batch,
        )

    if label is None:  # its model's class name, from one build on the meta device
        try:
            label = model_class_name(path, directory, {"K": 8, "width": 16, "in_channels": 1, "out_channels": 1})
        except OperatorConfigError:
            label = path
    model_label = label
    family = OperatorFamily(
        name,
        model_label,
        factory,
        axes=("K", "width"),
        inputs=("grid",),
        configure=configure,
        construct=construct,
        planner=planner,
        owns=lambda config: isinstance(config, dict) and config.get("factory") == path,
        fields=FACTORY_FIELDS,
        defaults={"modes": 8},
        facts_on_parameters=True,
    )
    return register_family(family)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OperatorConfigError(f"{value!r}: must be a number")
    return float(value)


def _scale_spectral_init(model: nn.Module, scale: float) -> None:
    """``init_scale``: the spectral weights' init × scale (what the FNO's own init_scale does)."""
    with torch.no_grad():
        for p in model.parameters():
            fact = getattr(p, "mutransfer_shape", None)
            if getattr(fact, "role", None) == "spectral":
                p.mul_(scale)


def _delta(factory: Callable[..., nn.Module], path: str, config: ModelConfig) -> nn.Module | None:
    """The model at the base's K and the model's width, on the meta device (shapes only), where both K and the
    width differ from the base: it splits the growing dims exactly (operators.base_shapes, ``delta``)."""
    if config["K"] == config["base_K"] or config["width"] == config["base_width"]:
        return None
    return _shapes_only(factory, path, {**config, "K": config["base_K"]})


def _roles_from_a_probe(factory: Callable[..., nn.Module], path: str, config: ModelConfig, model: nn.Module) -> None:
    """Declare on ``model``'s parameters the roles read from a probe twice the size in K and the width, on the meta
    device: where the model has the base's own sizes (a proxy trial) nothing grows, and the shapes alone would call
    every parameter "fixed", so that ``clip_value`` and ``init_scale`` would miss its spectral weights. A factory
    that cannot build the probe on the meta device keeps the plain reading."""
    k = 2 * max(config_int(config["K"], "K"), config_int(config["base_K"], "base_K"))
    width = 2 * max(config_int(config["width"], "width"), config_int(config["base_width"], "base_width"))
    small = {**config, "K": config["base_K"], "width": config["base_width"]}
    try:
        with torch.device("meta"):
            large = call(factory, path, {**config, "K": k, "width": width})
            facts = infer_shapes(
                large, call(factory, path, small), delta=call(factory, path, {**small, "width": width})
            )
    except OperatorConfigError:
        return
    for name, p in model.named_parameters():
        fact = facts.get(name)
        if fact is not None and getattr(p, "mutransfer_declared", None) is None:
            declare(p, role=fact.role, k_dims=fact.k_dims, width_dims=fact.width_dims)


def check_roles(path: str, directory: str | None, proxy: ModelConfig, target: ModelConfig) -> None:
    """Read the muP facts of the target against the proxy from their shapes (built on the meta device, no
    memory): a parameter whose role the shapes cannot tell is a one-line error now, before any data or run. A
    factory that cannot build on the meta device is left to its first real build."""
    path = plugins().get(path, path)
    factory = load_factory(path, directory)
    config = {**target, "base_K": proxy["K"], "base_width": proxy["width"]}
    try:
        with torch.device("meta"):
            small, large = call(factory, path, proxy), call(factory, path, target)
            delta = _delta(factory, path, config)
    except OperatorConfigError:
        return
    facts = infer_shapes(large, small, delta=delta).values()
    for axis, p, t, grows in (
        ("K", proxy["K"], target["K"], any(f.k_dims for f in facts)),
        ("width", proxy["width"], target["width"], any(f.width_dims for f in facts)),
    ):
        if p != t and not grows:
            raise OperatorConfigError(
                f"{axis} goes from {p} to {t} but no parameter of {path}'s model grows with it: does build() use "
                f"its {axis} argument? (or keep the proxy's {axis} in the study)"
            )


def model_class_name(path: str, directory: str | None, config: ModelConfig) -> str:
    """The class name of the model the factory returns (built on the meta device where it can be)."""
    return type(_shapes_only(load_factory(path, directory), path, config)).__name__
