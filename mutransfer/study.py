"""Study files: what a `mutransfer sweep` tunes, on what, with which budget.

A study is a YAML file read with ``yaml.safe_load`` into the :class:`Study`
dataclass tree and validated *before* any compute: unknown keys, wrong types,
out-of-range values, ``proxy_K >= target_K`` or a K that does not fit the
training grid raise :class:`~mutransfer.errors.UserInputError` with one line
naming the field path and the fix, e.g.::

    study studies/x.yaml: search_space.lr.low: must be > 0, e.g. 1e-4

Every field except ``name``, ``problem.name``, ``proxy_K``, ``target_K`` and
``search_space`` has a default (see docs/sweep.md). The default study
(``mutransfer sweep`` without ``--study``) is ``quick.yaml``, shipped inside the
package (``mutransfer/studies_data/quick.yaml``) and identical to
``studies/quick.yaml``.

CLI overrides are applied to the raw mapping before validation, so an
overridden value is validated like a file value and its error names the flag.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from mutransfer.errors import UserInputError

#: Hyperparameters a study may search, and the distributions each accepts.
SEARCHABLE = {
    "lr": ("loguniform", "uniform", "choice"),
    "batch_size": ("choice",),
    "beta2": ("uniform", "loguniform", "choice"),
    "weight_decay": ("loguniform", "uniform", "choice"),
    "clip_value": ("loguniform", "uniform", "choice"),
    "init_scale": ("loguniform", "uniform", "choice"),
}
ALGORITHMS = ("tpe", "random", "grid")
OPERATORS = ("fno", "galerkin", "ono", "gnot")
#: the attention (point-set) operators; they scale in width only (no Fourier modes K)
POINT_OPERATORS = ("galerkin", "ono", "gnot")
#: hyperparameters that act on FNO's spectral weights only
FNO_ONLY_HPARAMS = ("clip_value", "init_scale")
PARAMETRIZATIONS = ("mup", "standard")
WIDTH_PARAMETRIZATIONS = ("mup", "standard")
SCHEDULES = ("step", "onecycle", "cosine", "constant")
USE_GPU = ("auto", True, False)
PRECISIONS = ("fp32", "bf16", "fp16")
STREAM = ("auto", True, False)

DEFAULT_STUDY = "quick"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_EXAMPLES = {
    "lr": "1e-4",
    "batch_size": "[10, 20, 40]",
    "beta2": "0.99",
    "weight_decay": "1e-5",
    "clip_value": "0.01",
    "init_scale": "1.0",
}


# --------------------------------------------------------------------------- schema


@dataclass
class ProblemSpec:
    """The PDE data: a problem name, a data file or None (the cached default), the split and resolution."""

    name: str
    data: str | None = None
    #: resolution of the generated default data (data: null); None = the problem's default
    generated_resolution: int | None = None
    #: training resolution (strided down from the data); None = the problem's / the file's
    resolution: int | None = None
    n_train: int | None = None
    n_test: int | None = None
    #: output times used (space-time problems such as navier_stokes); None = the problem's
    time_resolution: int | None = None
    #: seed of the generated default data
    data_seed: int = 0
    #: read the data lazily from the file in batches: auto (when the split would take more than half the
    #: available memory), true or false (mutransfer.data.streaming)
    stream: Any = "auto"


@dataclass
class OperatorSpec:
    """The operator: its type, the proxy's width (see ``Study.target_width``), depth and type-specific options."""

    type: str = "fno"
    #: width of the proxy (and of the target unless target_width is set)
    width: int = 32
    layers: int = 4
    #: FNO only: domain padding in grid points; None = the problem's (Darcy 5, Burgers 0)
    padding: int | None = None
    #: FNO only: hidden size of the projection MLP
    projection_channels: int = 128
    #: attention operators only: attention heads (must divide both widths)
    heads: int | None = None
    #: attention operators only: further constructor arguments, e.g. {attention_type: fourier} (docs/operators.md)
    options: dict = field(default_factory=dict)


@dataclass
class Distribution:
    """A search distribution: loguniform/uniform (low, high) or choice (values)."""

    type: str
    low: float | None = None
    high: float | None = None
    values: list | None = None

    def to_dict(self) -> dict:
        if self.type == "choice":
            return {"type": "choice", "values": list(self.values or [])}
        return {"type": self.type, "low": self.low, "high": self.high}


@dataclass
class TrainingSpec:
    """Fixed training hyperparameters (used for every hyperparameter not searched)."""

    lr: float = 1e-3
    batch_size: int = 20
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0
    schedule: str = "step"
    milestones: list | None = None
    step_size: int | None = None
    gamma: float = 0.5
    clip_value: float | None = None
    init_scale: float = 1.0
    seed: int = 0
    #: training loss: relative_l2, or pino (Darcy only: data_weight * relative L2 + physics_weight * PDE residual)
    loss: str = "relative_l2"
    data_weight: float | None = None
    physics_weight: float | None = None
    #: fp32, or bf16/fp16 mixed precision (autocast for the real-valued layers; FFTs and the spectral
    #: contraction in fp32; fp16 with loss scaling), for the proxies and the target alike
    precision: str = "fp32"


@dataclass
class SearchSpec:
    algorithm: str = "tpe"
    num_trials: int = 8
    seed: int = 0
    #: trials run at once; None = as many as the CPUs (or GPUs) allow
    max_concurrent: int | None = None


@dataclass
class BudgetSpec:
    """Per-trial budget and ASHA early stopping (on the test error, mode min)."""

    epochs: int = 10
    grace_period: int = 2
    reduction_factor: int = 2
    #: retries of a failing trial (and of the target's worker group) before it is recorded as failed
    max_failures: int = 1


@dataclass
class ResourcesSpec:
    cpus_per_trial: int = 1
    gpus_per_trial: float = 0.0


@dataclass
class TargetSpec:
    epochs: int = 20
    num_workers: int = 1
    use_gpu: Any = "auto"
    cpus_per_worker: int = 1
    #: epochs between the target's checkpoints (each reported to Ray Train; a restarted target resumes from the last)
    checkpoint_every: int = 1


@dataclass
class TrackingSpec:
    experiment: str = "mutransfer"
    #: MLflow tracking URI; None = sqlite:///mlflow.db in the working directory
    uri: str | None = None


@dataclass
class Study:
    name: str
    problem: ProblemSpec
    search_space: dict[str, Distribution]
    #: FNO only: Fourier modes of the proxy and of the target
    proxy_K: int | None = None
    target_K: int | None = None
    operator: OperatorSpec = field(default_factory=OperatorSpec)
    #: FNO only: the K-parametrization (muP in K: spectral init std and LR ∝ 1/√(d log K))
    parametrization: str = "mup"
    #: width of the target; None = operator.width (no width scaling)
    target_width: int | None = None
    #: width rule: "mup" (Tensor Programs V, base width = operator.width) or "standard";
    #: None = mup when the width scales, standard otherwise
    width_parametrization: str | None = None
    training: TrainingSpec = field(default_factory=TrainingSpec)
    search: SearchSpec = field(default_factory=SearchSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    target: TargetSpec = field(default_factory=TargetSpec)
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    #: where the study came from ("studies/x.yaml" or "quick (built-in)"); not part of the file
    source: str = field(default="", compare=False)

    # ---- derived -------------------------------------------------------------------
    @property
    def is_fno(self) -> bool:
        return self.operator.type == "fno"

    @property
    def proxy_width(self) -> int:
        return int(self.operator.width)

    @property
    def scales_K(self) -> bool:
        return self.is_fno and self.proxy_K != self.target_K

    @property
    def scales_width(self) -> bool:
        return self.target_width is not None and self.target_width != self.operator.width

    def scaling(self) -> dict:
        """The operator and what scales from proxy to target, as flat fields (report, MLflow parent params)."""
        return {
            "operator": self.operator.type,
            "parametrization": self.parametrization if self.is_fno else None,
            "proxy_K": self.proxy_K,
            "target_K": self.target_K,
            "proxy_width": self.operator.width,
            "target_width": self.target_width,
            "width_parametrization": self.width_parametrization,
        }

    def model_text(self, target: bool) -> str:
        """e.g. "FNO-2D K=24 width 32" or "galerkin width 64" (the proxy's or the target's)."""
        width = self.target_width if target else self.operator.width
        if self.is_fno:
            return f"FNO-{self.dim}D K={self.target_K if target else self.proxy_K} width {width}"
        return f"{self.operator.type} width {width}"

    def scale_text(self) -> str:
        """What scales from proxy to target, e.g. "K 6 -> 24" or "width 16 -> 64 (width-muP)"."""
        parts = []
        if self.is_fno:
            parts.append(f"K {self.proxy_K} -> {self.target_K}")
        if self.scales_width:
            parts.append(f"width {self.operator.width} -> {self.target_width} (width-{self.width_parametrization})")
        return ", ".join(parts)

    @property
    def point_problem(self) -> bool:
        """True for problems whose samples are point sets (irregular meshes), not grids."""
        from mutransfer.problems import get_problem

        return getattr(get_problem(self.problem.name), "kind", "grid") == "points"

    @property
    def dim(self) -> int:
        from mutransfer.problems import get_problem

        return get_problem(self.problem.name).dim

    @property
    def padding(self) -> int:
        from mutransfer.problems import get_problem

        if self.operator.padding is not None:
            return self.operator.padding
        return get_problem(self.problem.name).padding

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """The training grid the spectral layers see (resolution + padding on each axis; time last if any)."""
        pad = self.padding
        if self.problem.time_resolution is not None:
            return (int(self.problem.resolution) + pad,) * (self.dim - 1) + (int(self.problem.time_resolution) + pad,)
        return (int(self.problem.resolution) + pad,) * self.dim

    def to_dict(self) -> dict:
        """The study as a plain mapping (the YAML schema; ``source`` is left out)."""
        d = dataclasses.asdict(self)
        d.pop("source", None)
        d["search_space"] = {k: v.to_dict() for k, v in self.search_space.items()}
        ordered = {k: d[k] for k in _TOP_ORDER}
        # fields that do not apply to this operator are left out, so the mapping parses again
        if self.is_fno:
            for key in ("heads", "options"):
                ordered["operator"].pop(key)
        else:
            for key in ("proxy_K", "target_K", "parametrization"):
                ordered.pop(key)
            for key in ("padding", "projection_channels"):
                ordered["operator"].pop(key)
        return ordered

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


_TOP_ORDER = (
    "name",
    "problem",
    "operator",
    "parametrization",
    "proxy_K",
    "target_K",
    "target_width",
    "width_parametrization",
    "search_space",
    "training",
    "search",
    "budget",
    "resources",
    "target",
    "tracking",
)


# --------------------------------------------------------------------------- reading


class _Reader:
    """Read typed fields out of one YAML mapping, with one-line errors naming the field path."""

    def __init__(self, source: str, path: str, mapping, flags: dict[str, str]):
        self.source, self.path, self.flags = source, path, flags
        if mapping is None:
            mapping = {}
        if not isinstance(mapping, dict):
            self.fail(self.path or "(top level)", f"must be a mapping of fields, got {_kind(mapping)}")
        self.mapping = mapping
        self.seen: set[str] = set()

    # -- errors --
    def where(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def fail(self, where: str, message: str):
        flag = self.flags.get(where)
        suffix = f" (set by {flag})" if flag else ""
        raise UserInputError(f"study {self.source}: {where}: {message}{suffix}")

    # -- access --
    def has(self, name: str) -> bool:
        return name in self.mapping

    def raw(self, name: str, default=dataclasses.MISSING, *, example: str = ""):
        self.seen.add(name)
        if name in self.mapping:
            return self.mapping[name]
        if default is dataclasses.MISSING:
            hint = f", e.g. {name}: {example}" if example else ""
            self.fail(self.where(name), f"is required{hint}")
        return default

    def integer(self, name, default=dataclasses.MISSING, *, minimum=None, example="", allow_none=False):
        value = self.raw(name, default, example=example)
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(self.where(name), f"must be an integer, got {_kind(value)}{_eg(example)}")
        if minimum is not None and value < minimum:
            self.fail(self.where(name), f"must be >= {minimum}, got {value}{_eg(example)}")
        return value

    def number(self, name, default=dataclasses.MISSING, *, example="", allow_none=False, check=None):
        value = self.raw(name, default, example=example)
        if value is None and allow_none:
            return None
        value = self.as_number(self.where(name), value, example)
        if check is not None:
            problem = check(value)
            if problem:
                self.fail(self.where(name), f"{problem}, got {value:g}{_eg(example)}")
        return value

    def as_number(self, where: str, value, example: str = "") -> float:
        # YAML 1.1 reads "1e-4" (no dot) as a string: accept numeric strings.
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"must be a number, got {_kind(value)}{_eg(example)}")
        value = float(value)
        if not math.isfinite(value):
            self.fail(where, f"must be a finite number, got {value}{_eg(example)}")
        return value

    def string(self, name, default=dataclasses.MISSING, *, choices=None, example="", allow_none=False):
        value = self.raw(name, default, example=example)
        if value is None and allow_none:
            return None
        if not isinstance(value, str) or not value:
            self.fail(self.where(name), f"must be a non-empty string, got {_kind(value)}{_eg(example)}")
        if choices is not None and value not in choices:
            self.fail(self.where(name), f"{value!r} is unknown; use one of: {', '.join(map(str, choices))}")
        return value

    def sub(self, name: str) -> "_Reader":
        self.seen.add(name)
        return _Reader(self.source, self.where(name), self.mapping.get(name), self.flags)

    def finish(self, known: tuple[str, ...] | None = None) -> None:
        """Fail on the first key that was not read (unknown or misspelled)."""
        for key in self.mapping:
            if key not in self.seen:
                expected = ", ".join(known) if known else ", ".join(sorted(self.seen))
                where = self.where(str(key))
                self.fail(where, f"unknown key; remove it or use one of: {expected}")


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _eg(example: str) -> str:
    return f", e.g. {example}" if example else ""


def _field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "source")


# --------------------------------------------------------------------------- sections


def _read_problem(r: _Reader) -> ProblemSpec:
    from mutransfer.problems import PROBLEMS

    p = ProblemSpec(
        name=r.string("name", choices=tuple(PROBLEMS), example="burgers"),
        data=r.string("data", None, allow_none=True, example="data/burgers.h5"),
        generated_resolution=r.integer("generated_resolution", None, minimum=2, allow_none=True, example="1024"),
        resolution=r.integer("resolution", None, minimum=2, allow_none=True, example="128"),
        n_train=r.integer("n_train", None, minimum=1, allow_none=True, example="200"),
        n_test=r.integer("n_test", None, minimum=1, allow_none=True, example="50"),
        time_resolution=r.integer("time_resolution", None, minimum=1, allow_none=True, example="16"),
        data_seed=r.integer("data_seed", 0, minimum=0, example="0"),
        stream=r.raw("stream", "auto"),
    )
    if p.stream not in STREAM or (isinstance(p.stream, int) and not isinstance(p.stream, bool)):
        r.fail(r.where("stream"), f"must be auto, true or false, got {_kind(p.stream)}")
    r.finish(_field_names(ProblemSpec))
    return p


#: operator options the study sets through its own fields (not through operator.options)
_RESERVED_OPTIONS = ("coord_dim", "in_channels", "out_channels", "width", "layers", "heads", "width_parametrization", "base_width")


def _read_operator(r: _Reader) -> OperatorSpec:
    kind = r.string("type", "fno", choices=OPERATORS)
    if kind == "fno":
        for key in ("heads", "options"):
            if r.has(key):
                r.fail(r.where(key), f"applies to the attention operators ({', '.join(POINT_OPERATORS)}), not fno; remove it")
    else:
        for key in ("padding", "projection_channels"):
            if r.has(key):
                r.fail(r.where(key), f"applies to fno only, not {kind}; remove it")
    options = r.raw("options", {})
    if options is None:
        options = {}
    if not isinstance(options, dict):
        r.fail(r.where("options"), f"must be a mapping of {kind} arguments, got {_kind(options)}, e.g. options: {{ffn_ratio: 2}}")
    for key in options:
        if key in _RESERVED_OPTIONS:
            field_name = {"width": "operator.width", "layers": "operator.layers", "heads": "operator.heads",
                          "width_parametrization": "width_parametrization", "base_width": "operator.width"}.get(key)
            fix = f"set {field_name} instead" if field_name else "the study derives it from the data; remove it"
            r.fail(f"{r.where('options')}.{key}", f"is set by the study, not in options; {fix}")
    o = OperatorSpec(
        type=kind,
        width=r.integer("width", 32, minimum=1, example="32"),
        layers=r.integer("layers", 4, minimum=1, example="4"),
        padding=r.integer("padding", None, minimum=0, allow_none=True, example="0"),
        projection_channels=r.integer("projection_channels", 128, minimum=1, example="128"),
        heads=None if kind == "fno" else r.integer("heads", 4, minimum=1, example="4"),
        options=dict(options),
    )
    r.finish(_field_names(OperatorSpec))
    return o


def _check_param_value(name: str, value: float) -> str | None:
    """Why ``value`` is invalid for hyperparameter ``name`` (None if fine)."""
    if name in ("lr", "clip_value", "init_scale") and not value > 0:
        return "must be > 0"
    if name == "weight_decay" and value < 0:
        return "must be >= 0"
    if name == "beta2" and not 0 < value < 1:
        return "must be in (0, 1)"
    return None


def _read_distribution(r: _Reader, name: str) -> Distribution:
    allowed = SEARCHABLE[name]
    kind = r.string("type", example=allowed[0], choices=allowed)
    example = _EXAMPLES[name]
    if kind == "choice":
        values = r.raw("values", example=example if name == "batch_size" else f"[{example}]")
        if not isinstance(values, list) or not values:
            r.fail(r.where("values"), f"must be a non-empty list, e.g. values: {example if name == 'batch_size' else f'[{example}]'}")
        checked = []
        for i, v in enumerate(values):
            where = f"{r.where('values')}[{i}]"
            if name == "batch_size":
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    r.fail(where, f"must be an integer >= 1, got {_kind(v)}, e.g. 20")
                checked.append(v)
            else:
                number = r.as_number(where, v, example)
                problem = _check_param_value(name, number)
                if problem:
                    r.fail(where, f"{problem}, got {number:g}, e.g. {example}")
                checked.append(number)
        if len(set(checked)) != len(checked):
            r.fail(r.where("values"), "has duplicates; list each value once")
        dist = Distribution("choice", values=checked)
    else:
        low = r.number("low", example=example)
        high = r.number("high", example=example)
        for key, value in (("low", low), ("high", high)):
            problem = _check_param_value(name, value)
            if problem is None and kind == "loguniform" and value <= 0:
                problem = "must be > 0 (log scale)"
            if problem:
                r.fail(r.where(key), f"{problem}, e.g. {example}")
        if not high > low:
            r.fail(r.where("high"), f"must be > low ({low:g}); give a range low < high")
        dist = Distribution(kind, low=low, high=high)
    r.finish(("type", "values") if kind == "choice" else ("type", "low", "high"))
    return dist


def _read_search_space(r: _Reader) -> dict[str, Distribution]:
    space = {}
    for key in r.mapping:
        if key not in SEARCHABLE:
            r.fail(r.where(str(key)), f"cannot be searched; use one of: {', '.join(SEARCHABLE)}")
        space[key] = _read_distribution(r.sub(key), key)
    if not space:
        r.fail(
            r.path,
            "is empty; search at least one hyperparameter, e.g. search_space: {lr: {type: loguniform, low: 1e-4, high: 1e-2}}",
        )
    return space


def _read_training(r: _Reader) -> TrainingSpec:
    t = TrainingSpec(
        lr=r.number("lr", 1e-3, example="1e-3", check=lambda v: None if v > 0 else "must be > 0"),
        batch_size=r.integer("batch_size", 20, minimum=1, example="20"),
        betas=_read_betas(r),
        weight_decay=r.number("weight_decay", 0.0, example="0", check=lambda v: None if v >= 0 else "must be >= 0"),
        schedule=r.string("schedule", "step", choices=SCHEDULES),
        milestones=_read_milestones(r),
        step_size=r.integer("step_size", None, minimum=1, allow_none=True, example="50"),
        gamma=r.number("gamma", 0.5, example="0.5", check=lambda v: None if 0 < v <= 1 else "must be in (0, 1]"),
        clip_value=r.number(
            "clip_value", None, allow_none=True, example="0.01", check=lambda v: None if v > 0 else "must be > 0 (or null for no clipping)"
        ),
        init_scale=r.number("init_scale", 1.0, example="1.0", check=lambda v: None if v > 0 else "must be > 0"),
        seed=r.integer("seed", 0, minimum=0, example="0"),
        loss=r.string("loss", "relative_l2", choices=("relative_l2", "pino")),
        data_weight=r.number(
            "data_weight", None, allow_none=True, example="5", check=lambda v: None if v >= 0 else "must be >= 0"
        ),
        physics_weight=r.number(
            "physics_weight", None, allow_none=True, example="1", check=lambda v: None if v >= 0 else "must be >= 0"
        ),
        precision=r.string("precision", "fp32", choices=PRECISIONS),
    )
    if t.loss != "pino" and (t.data_weight is not None or t.physics_weight is not None):
        r.fail(r.where("loss"), "data_weight/physics_weight only apply to loss pino; drop them or set loss: pino")
    if t.milestones is not None and t.step_size is not None:
        r.fail(r.where("step_size"), "set at most one of milestones and step_size")
    if (t.milestones is not None or t.step_size is not None) and t.schedule != "step":
        r.fail(r.where("schedule"), f"milestones/step_size only apply to schedule step, not {t.schedule!r}")
    r.finish(_field_names(TrainingSpec))
    return t


def _read_betas(r: _Reader) -> list:
    value = r.raw("betas", [0.9, 0.999])
    if not isinstance(value, list) or len(value) != 2:
        r.fail(r.where("betas"), f"must be a list of two numbers in [0, 1), got {_kind(value)}, e.g. [0.9, 0.999]")
    out = []
    for i, v in enumerate(value):
        number = r.as_number(f"{r.where('betas')}[{i}]", v, "0.9")
        if not 0 <= number < 1:
            r.fail(f"{r.where('betas')}[{i}]", f"must be in [0, 1), got {number:g}, e.g. 0.999")
        out.append(number)
    return out


def _read_milestones(r: _Reader) -> list | None:
    value = r.raw("milestones", None)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        r.fail(r.where("milestones"), f"must be a list of epochs, got {_kind(value)}, e.g. [100, 150, 200]")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            r.fail(f"{r.where('milestones')}[{i}]", f"must be a positive integer (an epoch), got {_kind(v)}")
    return sorted(value)


def _read_search(r: _Reader) -> SearchSpec:
    s = SearchSpec(
        algorithm=r.string("algorithm", "tpe", choices=ALGORITHMS),
        num_trials=r.integer("num_trials", 8, minimum=1, example="8"),
        seed=r.integer("seed", 0, minimum=0, example="0"),
        max_concurrent=r.integer("max_concurrent", None, minimum=1, allow_none=True, example="2"),
    )
    r.finish(_field_names(SearchSpec))
    return s


def _read_budget(r: _Reader) -> BudgetSpec:
    b = BudgetSpec(
        epochs=r.integer("epochs", 10, minimum=1, example="10"),
        grace_period=r.integer("grace_period", 2, minimum=1, example="2"),
        reduction_factor=r.integer("reduction_factor", 2, minimum=2, example="2"),
        max_failures=r.integer("max_failures", 1, minimum=0, example="1"),
    )
    r.finish(_field_names(BudgetSpec))
    return b


def _read_resources(r: _Reader) -> ResourcesSpec:
    res = ResourcesSpec(
        cpus_per_trial=r.integer("cpus_per_trial", 1, minimum=1, example="1"),
        gpus_per_trial=r.number(
            "gpus_per_trial", 0.0, example="0.5", check=lambda v: None if v >= 0 else "must be >= 0 (a fraction of a GPU is fine)"
        ),
    )
    r.finish(_field_names(ResourcesSpec))
    return res


def _read_target(r: _Reader) -> TargetSpec:
    use_gpu = r.raw("use_gpu", "auto")
    if use_gpu not in USE_GPU or (isinstance(use_gpu, int) and not isinstance(use_gpu, bool)):
        r.fail(r.where("use_gpu"), f"must be auto, true or false, got {_kind(use_gpu)}")
    t = TargetSpec(
        epochs=r.integer("epochs", 20, minimum=1, example="20"),
        num_workers=r.integer("num_workers", 1, minimum=1, example="1"),
        use_gpu=use_gpu,
        cpus_per_worker=r.integer("cpus_per_worker", 1, minimum=1, example="1"),
        checkpoint_every=r.integer("checkpoint_every", 1, minimum=1, example="1"),
    )
    r.finish(_field_names(TargetSpec))
    return t


def _read_tracking(r: _Reader) -> TrackingSpec:
    t = TrackingSpec(
        experiment=r.string("experiment", "mutransfer", example="mutransfer"),
        uri=r.string("uri", None, allow_none=True, example="http://127.0.0.1:5000"),
    )
    r.finish(_field_names(TrackingSpec))
    return t


# --------------------------------------------------------------------------- cross-field checks


def _resolve_and_check(study: Study, r: _Reader) -> None:
    """Fill problem defaults (resolution, split) and check what depends on several fields."""
    from mutransfer.data.loading import PERIODIC, valid_resolutions
    from mutransfer.problems import get_problem

    problem = get_problem(study.problem.name)
    p = study.problem
    points = getattr(problem, "kind", "grid") == "points"
    if points and study.is_fno:
        r.fail(
            "operator.type",
            f"fno needs a grid, and {problem.name!r} is a point-set (irregular mesh) problem; use one of: {', '.join(POINT_OPERATORS)}",
        )
    _resolve_width(study, r)
    if points:
        _resolve_points_problem(study, problem, r)
        return
    if study.training.loss == "pino" and problem.name != "darcy":
        r.fail("training.loss", f"pino is the Darcy physics loss, not for {problem.name!r}; use relative_l2")
    timed = getattr(problem, "time_resolution", None) is not None
    if p.time_resolution is not None and not timed:
        r.fail("problem.time_resolution", f"only applies to space-time problems, not {problem.name!r}; remove it")
    if timed and p.time_resolution is None:
        p.time_resolution = int(problem.time_resolution)
    if p.data is not None:
        if p.generated_resolution is not None:
            r.fail("problem.generated_resolution", "only applies to generated data (data: null); remove it")
        native, n_available, file_problem = _data_header(p.data, r)
        if file_problem not in (None, problem.name):
            r.fail("problem.data", f"{p.data} holds {file_problem!r} data, not {problem.name!r}; fix problem.name or data")
        _resolve_file_split(p, n_available, r)
    else:
        native = p.generated_resolution or problem.generated_resolution
        p.generated_resolution = native
        p.n_train = problem.n_train if p.n_train is None else p.n_train
        p.n_test = problem.n_test if p.n_test is None else p.n_test
    if p.resolution is None:
        p.resolution = problem.resolution if p.data is None and native >= problem.resolution else native
    periodic = PERIODIC.get(problem.name, True)
    valid = valid_resolutions(native, periodic=periodic)
    if p.resolution not in valid:
        near = [v for v in valid if v <= native]
        best = min(near, key=lambda v: abs(v - p.resolution)) if near else native
        rule = "divide" if periodic else "have (N-1) divide"
        r.fail(
            "problem.resolution",
            f"{p.resolution} cannot be strided from data at resolution {native} (it must {rule} it); use e.g. {best}",
        )

    if study.is_fno:
        _check_fno_modes(study, problem, r)
    _check_search_algorithm(study, r)


def _resolve_width(study: Study, r: _Reader) -> None:
    """target_width and width_parametrization defaults; the proxy must not be wider than the target."""
    o = study.operator
    if study.target_width is None:
        study.target_width = o.width
    if study.target_width < o.width:
        r.fail("target_width", f"must be >= operator.width ({o.width}): operator.width is the proxy's width, e.g. target_width: {4 * o.width}")
    if study.width_parametrization is None:
        study.width_parametrization = "mup" if study.scales_width else "standard"
    if not study.is_fno:
        if not study.scales_width:
            r.fail(
                "target_width",
                f"{o.type} scales in width only: set target_width > operator.width ({o.width}), e.g. target_width: {4 * o.width}",
            )
        for key, width in (("operator.width", o.width), ("target_width", study.target_width)):
            if width % o.heads:
                r.fail(key, f"{width} is not divisible by operator.heads {o.heads}; use a multiple of {o.heads}")
        _check_operator_options(study, r)


def _check_operator_options(study: Study, r: _Reader) -> None:
    """Build the proxy operator once (cheap) so a wrong option fails now, with its field path."""
    from mutransfer.problems import get_problem
    from operators.adapters import build_point_operator
    from operators.errors import OperatorConfigError

    o = study.operator
    config = dict(
        coord_dim=get_problem(study.problem.name).dim, in_channels=1, out_channels=1, width=o.width, layers=o.layers,
        heads=o.heads, **o.options,
    )
    try:
        build_point_operator(o.type, config)
    except OperatorConfigError as exc:
        r.fail("operator.options", f"{exc}")


def _resolve_file_split(p: ProblemSpec, n_available: int, r: _Reader) -> None:
    """Default split of a data file (80 % / 20 %), and a check that the requested one fits."""
    if p.n_test is None:
        p.n_test = max(1, n_available // 5)
    if p.n_train is None:
        p.n_train = n_available - p.n_test
    if p.n_train + p.n_test > n_available:
        r.fail(
            "problem.n_train",
            f"n_train + n_test = {p.n_train + p.n_test} exceeds the {n_available} samples in {p.data}; lower them",
        )


def _resolve_points_problem(study: Study, problem, r: _Reader) -> None:
    """Point-set problems: sample counts from the file or the problem; no resolution (there is no grid to stride)."""
    p = study.problem
    if p.resolution is not None:
        r.fail("problem.resolution", f"{problem.name!r} is a point-set problem with no grid to stride; remove it")
    if p.data is not None:
        if p.generated_resolution is not None:
            r.fail("problem.generated_resolution", "only applies to generated data (data: null); remove it")
        if not Path(p.data).is_file():
            r.fail("problem.data", f"file {p.data} not found; fix the path or use data: null for the cached default dataset")
        from mutransfer.data.pointclouds import is_point_file, point_file_header

        if not is_point_file(p.data):
            r.fail("problem.data", f"{p.data} is not a point-set file; generate one with `mutransfer data generate {problem.name} --out {p.data}`")
        try:
            header = point_file_header(p.data)
        except UserInputError as exc:
            r.fail("problem.data", str(exc))
        if header.get("problem") not in (None, problem.name):
            r.fail("problem.data", f"{p.data} holds {header.get('problem')!r} data, not {problem.name!r}; fix problem.name or data")
        n_available = int(header["n_samples"])
        _resolve_file_split(p, n_available, r)
    else:
        p.generated_resolution = p.generated_resolution or problem.generated_resolution
        p.n_train = problem.n_train if p.n_train is None else p.n_train
        p.n_test = problem.n_test if p.n_test is None else p.n_test
    _check_search_algorithm(study, r)


def _check_fno_modes(study: Study, problem, r: _Reader) -> None:
    from operators.errors import OperatorConfigError
    from operators.parametrization import check_modes
    from operators.spectral import check_grid

    p = study.problem
    if study.proxy_K > study.target_K or (study.proxy_K == study.target_K and not study.scales_width):
        r.fail(
            "proxy_K",
            f"must be < target_K ({study.target_K}): the proxy is the small model, e.g. proxy_K: {max(2, study.target_K // 4)} "
            "(equal K is fine when the width scales: target_width > operator.width)",
        )
    for key in ("proxy_K", "target_K"):
        k = getattr(study, key)
        try:
            check_modes(k, problem.dim, study.parametrization)
            check_grid(study.grid_shape, k)
        except OperatorConfigError as exc:
            grid = "x".join(str(n) for n in study.grid_shape)
            times = f", time_resolution {p.time_resolution}" if p.time_resolution is not None else ""
            r.fail(key, f"{exc} (training grid {grid} = resolution {p.resolution}{times} + padding {study.padding})")



def _check_search_algorithm(study: Study, r: _Reader) -> None:
    if study.search.algorithm == "grid":
        for name, dist in study.search_space.items():
            if dist.type != "choice":
                r.fail(
                    f"search_space.{name}.type",
                    "search.algorithm grid needs choice distributions; use type: choice with values: [...]",
                )
    if study.resources.gpus_per_trial and study.resources.gpus_per_trial > 1 and study.resources.gpus_per_trial % 1:
        r.fail("resources.gpus_per_trial", "must be a fraction <= 1 or a whole number of GPUs, e.g. 0.5 or 2")


def _data_header(path: str, r: _Reader) -> tuple[int, int, str | None]:
    """(native resolution, n_samples, problem) from a data file's header, without reading arrays.

    Any format ``mutransfer.data.readers`` detects on its own (no key options) is accepted.
    """
    if not Path(path).is_file():
        r.fail("problem.data", f"file {path} not found; fix the path or use data: null for the cached default dataset")
    try:
        try:
            from mutransfer.data.readers import open_data
        except ImportError:  # older data layer: project HDF5 only
            from mutransfer.data.hdf5_io import open_dataset

            with open_dataset(path) as f:
                problem = f.attrs.get("problem")
                problem = problem.decode() if isinstance(problem, bytes) else problem
                return int(f["input"].shape[1]), int(f["input"].shape[0]), problem
        with open_data(path) as src:
            return int(src.output.grid_shape[0]), int(src.n_samples), src.problem
    except UserInputError as exc:
        r.fail("problem.data", str(exc))


# --------------------------------------------------------------------------- public API


def parse_study(mapping: Any, source: str, *, flags: dict[str, str] | None = None) -> Study:
    """Validate a raw mapping (from YAML) into a :class:`Study`.

    ``flags`` maps field paths to the CLI flags that set them, so their errors say so.
    """
    r = _Reader(source, "", mapping, flags or {})
    name = r.string("name", example="my-study")
    if not _NAME_RE.match(name):
        r.fail("name", f"{name!r} must be letters, digits, '.', '_' or '-' (it names a directory), e.g. burgers-k6")
    problem = _read_problem(r.sub("problem"))
    if not r.has("search_space"):
        r.fail("search_space", "is required; e.g. search_space: {lr: {type: loguniform, low: 1e-4, high: 1e-2}}")
    operator = _read_operator(r.sub("operator"))
    if operator.type != "fno":
        for key in ("proxy_K", "target_K", "parametrization"):
            if r.has(key):
                fix = "use target_width to scale the width" if key != "parametrization" else "use width_parametrization"
                r.fail(key, f"applies to fno only ({operator.type} has no Fourier modes); remove it and {fix}")
    study = Study(
        name=name,
        problem=problem,
        operator=operator,
        parametrization=r.string("parametrization", "mup", choices=PARAMETRIZATIONS),
        proxy_K=r.integer("proxy_K", minimum=2, example="6") if operator.type == "fno" else None,
        target_K=r.integer("target_K", minimum=2, example="24") if operator.type == "fno" else None,
        target_width=r.integer("target_width", None, minimum=1, allow_none=True, example="128"),
        width_parametrization=r.string("width_parametrization", None, allow_none=True, choices=WIDTH_PARAMETRIZATIONS),
        search_space=_read_search_space(r.sub("search_space")),
        training=_read_training(r.sub("training")),
        search=_read_search(r.sub("search")),
        budget=_read_budget(r.sub("budget")),
        resources=_read_resources(r.sub("resources")),
        target=_read_target(r.sub("target")),
        tracking=_read_tracking(r.sub("tracking")),
        source=source,
    )
    if operator.type != "fno":
        fixed = {"clip_value": study.training.clip_value is not None, "init_scale": study.training.init_scale != 1.0}
        for key in FNO_ONLY_HPARAMS:
            where = f"search_space.{key}" if key in study.search_space else f"training.{key}" if fixed[key] else None
            if where:
                r.fail(where, f"acts on FNO's spectral weights only, not {operator.type}; remove it")
    r.finish(_TOP_ORDER)
    _resolve_and_check(study, r)
    return study


def default_study_text() -> str:
    """The built-in default study (quick.yaml shipped inside the package)."""
    return resources.files("mutransfer").joinpath("studies_data", f"{DEFAULT_STUDY}.yaml").read_text(encoding="utf-8")


def read_study_mapping(path: str | os.PathLike | None) -> tuple[dict, str]:
    """(raw mapping, source label) for a study file, or the built-in default when ``path`` is None."""
    if path is None:
        text, source = default_study_text(), f"{DEFAULT_STUDY} (built-in)"
    else:
        source = str(path)
        p = Path(path)
        if not p.is_file():
            hint = "pass an existing YAML file, e.g. studies/quick.yaml" if not p.is_dir() else "pass a YAML file, not a directory"
            raise UserInputError(f"study {source}: file not found; {hint}")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserInputError(f"study {source}: cannot be read ({type(exc).__name__}); check the file") from None
    try:
        mapping = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserInputError(f"study {source}: not valid YAML ({where}{reason}); fix the syntax") from None
    if not isinstance(mapping, dict):
        raise UserInputError(f"study {source}: must be a YAML mapping of fields (name, problem, proxy_K, ...), got {_kind(mapping)}")
    return mapping, source


#: CLI override name -> (field path, flag)
OVERRIDES = {
    "name": ("name", "--name"),
    "proxy_K": ("proxy_K", "--proxy-K"),
    "target_K": ("target_K", "--target-K"),
    "proxy_width": ("operator.width", "--proxy-width"),
    "target_width": ("target_width", "--target-width"),
    "num_trials": ("search.num_trials", "--num-trials"),
    "epochs": ("budget.epochs", "--epochs"),
    "target_epochs": ("target.epochs", "--target-epochs"),
    "tracking_uri": ("tracking.uri", "--tracking-uri"),
    "precision": ("training.precision", "--precision"),
}


@dataclass(frozen=True)
class Override:
    """One CLI flag that changed a study field (reported, never silent)."""

    flag: str
    path: str
    value: Any
    previous: Any

    def describe(self) -> str:
        before = "unset" if self.previous is _UNSET else repr(self.previous)
        return f"{self.flag} {self.value!r} overrides {self.path} (study file: {before})"


_UNSET = object()


def _get_path(mapping: dict, path: str):
    node = mapping
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return node


def _set_path(mapping: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    node = mapping
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {} if node.get(part) is None else node[part]
        node = node[part]
    node[last] = value


def load_study(path: str | os.PathLike | None = None, overrides: dict[str, Any] | None = None) -> tuple[Study, list[Override]]:
    """Load, override and validate a study (no compute, no Ray, no data generation).

    ``overrides`` uses the keys of :data:`OVERRIDES` (None values are ignored).
    Returns the study and the overrides that changed a value.
    """
    mapping, source = read_study_mapping(path)
    applied: list[Override] = []
    flags: dict[str, str] = {}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        field_path, flag = OVERRIDES[key]
        previous = _get_path(mapping, field_path)
        flags[field_path] = flag
        if previous != value:
            applied.append(Override(flag, field_path, value, previous))
        _set_path(mapping, field_path, value)
    return parse_study(mapping, source, flags=flags), applied


def study_from_yaml_text(text: str, source: str) -> Study:
    """Parse a study stored as YAML text (e.g. the copy kept in a study directory)."""
    try:
        mapping = yaml.safe_load(text)
    except yaml.YAMLError:
        raise UserInputError(f"study {source}: not valid YAML; delete the study directory or fix the file") from None
    return parse_study(mapping, source)
