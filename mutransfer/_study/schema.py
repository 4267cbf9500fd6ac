"""The study schema: one dataclass per section, each field declared once with its default, check and help.

The declarations (mutransfer._config.settings) drive the study-file reader
(mutransfer._study.files), the sweep's override flags and docs/sweep.md's table;
the training section's fields are the trainer's own (mutransfer._training.hyperparameters).
Cross-field checks and defaults that depend on the problem or the data file live in
mutransfer._study.resolve.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from mutransfer._config.executors import EXECUTORS
from mutransfer._config.reader import kind_of
from mutransfer._config.settings import fraction, non_negative, positive, setting
from mutransfer._problems import PROBLEMS, get_problem
from mutransfer._study.distribution import Distribution
from mutransfer._study.k_exponent import K_EXPONENT_FROM_DATA, parse_k_exponent, read_k_exponent
from mutransfer._study.ladder import LadderSize, ladder_sizes, read_ladder
from mutransfer._training.hyperparameters import MAX_SEED, Hyperparameters
from mutransfer.errors import UserInputError
from operators.factory import factory_family
from operators.registry import OPERATORS, OperatorFamily
from operators.transfer import Scaling


def _read_auto(r, name, default):
    """auto, true or false (``problem.stream``, ``target.use_gpu``)."""
    return r.choice(name, default, ("auto", True, False), what="auto, true or false")


#: the most proxy trials a study may ask for (a search of more could never finish; split it into studies)
MAX_TRIALS = 10_000
#: the most epochs a proxy trial or the target may ask for
MAX_EPOCHS = 100_000


def _read_options(r, name, default):
    options = r.raw(name, default)
    if not isinstance(options, dict | None):
        r.fail(
            r.where(name),
            f"must be a mapping of operator arguments, got {kind_of(options)}, e.g. options: {{ffn_ratio: 2}}",
        )
    return dict(options or {})


@dataclass
class ProblemSpec:
    """The PDE data: a problem name, a data file or None (the cached default), the split and resolution."""

    name: str = setting(help="the PDE problem", kind="str", choices=lambda: tuple(PROBLEMS), example="burgers")
    data: str | None = setting(
        None,
        "data file; null: the problem's generated dataset, cached",
        kind="str",
        nullable=True,
        example="data/burgers.h5",
    )
    generated_resolution: int | None = setting(
        None, "resolution of the generated dataset (data: null)", kind="int", minimum=2, nullable=True, example="1024"
    )
    resolution: int | None = setting(
        None, "training resolution, reached by striding", kind="int", minimum=2, nullable=True, example="128"
    )
    n_train: int | None = setting(
        None, "training samples (the first ones)", kind="int", minimum=1, nullable=True, example="200"
    )
    n_test: int | None = setting(
        None, "test samples (the last ones)", kind="int", minimum=1, nullable=True, example="50"
    )
    n_val: int | None = setting(
        None,
        "validation samples, the last n_val of the n_train: every selection reads them, every model trains on the "
        "n_train - n_val before them (null: n_train // 5)",
        kind="int",
        minimum=1,
        nullable=True,
        example="40",
    )
    time_resolution: int | None = setting(
        None, "output times (space-time problems)", kind="int", minimum=1, nullable=True, example="16"
    )
    data_seed: int = setting(0, "seed of the generated dataset", kind="int", minimum=0, maximum=MAX_SEED, example="0")
    stream: Any = setting(
        "auto", "read the data lazily in batches: auto (when larger than half the RAM), true, false", read=_read_auto
    )

    @property
    def n_fit(self) -> int:
        """The samples every model trains on: the first n_train - n_val."""
        return int(self.n_train or 0) - int(self.n_val or 0)


@dataclass
class OperatorSpec:
    """The operator: its family, the proxy's width (see ``Study.target_width``), depth and family options."""

    type: str = setting("fno", "operator family", kind="str", choices=lambda: tuple(OPERATORS))
    width: int = setting(32, "the proxy's width m (the width-muP base width)", kind="int", minimum=1, example="32")
    layers: int = setting(4, "Fourier layers / attention blocks", kind="int", minimum=1, example="4")
    padding: int | None = setting(
        None,
        "FNO: domain padding in grid points per axis (null: the problem's)",
        kind="int",
        minimum=0,
        nullable=True,
        example="0",
    )
    projection_channels: int = setting(
        128, "FNO: hidden size of the projection MLP", kind="int", minimum=1, example="128"
    )
    k_exponent: float | str = setting(
        1.0,
        "FNO under muP: the exponent rho of the K rule, spectral init std and Adam LR x (d log K)^(-rho/2); 1 is the "
        "paper's rule, 'data' estimates rho from the energy the kept modes of the training data carry (beyond the "
        "paper: docs/sweep.md)",
        read=read_k_exponent,
        parse=parse_k_exponent,
        example="data",
    )
    heads: int | None = setting(
        None,
        "attention operators: heads (must divide both widths; default 4)",
        kind="int",
        minimum=1,
        nullable=True,
        example="4",
    )
    options: dict = setting(
        help="attention operators and a factory: further constructor arguments, e.g. {attention_type: fourier}",
        factory=dict,
        read=_read_options,
    )
    #: not in the file: a factory ``type``'s module's directory (None: installed) and its model's class name
    factory_dir: str | None = field(default=None, compare=False)
    factory_label: str | None = field(default=None, compare=False)


@dataclass
class TrainingSpec(Hyperparameters):
    """Fixed training hyperparameters (used for every hyperparameter not searched)."""

    init_scale: float = setting(
        1.0, "FNO: multiplies the spectral init std", kind="float", check=positive, example="1.0"
    )


@dataclass
class SearchSpec:
    algorithm: str = setting(
        "tpe",
        "tpe, random, grid, an optuna.samplers class (e.g. GPSampler) or a sampler's import path "
        "(e.g. optuna.samplers.QMCSampler)",
        kind="str",
    )
    num_trials: int = setting(8, "proxy trials", kind="int", minimum=1, maximum=MAX_TRIALS, example="8")
    seed: int = setting(0, "sampler seed", kind="int", minimum=0, maximum=MAX_SEED, example="0")
    max_concurrent: int | None = setting(
        None, "trials at once (null: as many as the CPUs/GPUs hold)", kind="int", minimum=1, nullable=True, example="2"
    )
    top_k: int = setting(
        1,
        "configurations carried to the target (the N best proxies); the winner is chosen by its target error",
        kind="int",
        minimum=1,
        example="2",
    )
    objectives: str = setting(
        "error",
        "error: minimise the validation error; error+seconds: also the trial's training seconds (two objectives, "
        "the report's Pareto front; the winner is still the lowest validation error)",
        kind="str",
        choices=("error", "error+seconds"),
    )


@dataclass
class BudgetSpec:
    """Per-trial budget and ASHA early stopping (on the test error, mode min)."""

    epochs: int = setting(10, "epochs per proxy trial", kind="int", minimum=1, maximum=MAX_EPOCHS, example="10")
    grace_period: int = setting(2, "ASHA: epochs before the first rung", kind="int", minimum=1, example="2")
    reduction_factor: int = setting(
        2, "ASHA: rungs at grace_period x reduction_factor^k", kind="int", minimum=2, example="2"
    )
    max_failures: int = setting(
        1, "retries of a failing trial (and of the target's worker group)", kind="int", minimum=0, example="1"
    )


def _gpu_fraction(value: float) -> str | None:
    return non_negative(value) and "must be >= 0 (a fraction of a GPU is fine)"


@dataclass
class ResourcesSpec:
    cpus_per_trial: int = setting(1, "CPUs per trial (torch threads)", kind="int", minimum=1, example="1")
    gpus_per_trial: float = setting(
        0.0, "GPU fraction per trial (0.25: four proxies per GPU)", kind="float", check=_gpu_fraction, example="0.5"
    )
    executor: str = setting(
        "ray", "where the trainings run (docs/sweep.md; --executor overrides)", kind="str", choices=EXECUTORS
    )


@dataclass
class TargetSpec:
    epochs: int = setting(20, "target training epochs", kind="int", minimum=1, maximum=MAX_EPOCHS, example="20")
    num_workers: int = setting(
        1, "the target's data-parallel workers (Ray Train, DDP; 1: one Ray actor)", kind="int", minimum=1, example="1"
    )
    use_gpu: Any = setting("auto", "auto (GPUs when the cluster has them), true or false", read=_read_auto)
    cpus_per_worker: int = setting(1, "CPUs (torch threads) per worker", kind="int", minimum=1, example="1")
    checkpoint_every: int = setting(1, "epochs between the target's checkpoints", kind="int", minimum=1, example="1")
    start_early: bool = setting(
        True, "start the target's workers while the last proxy trials run", kind="bool", example="true"
    )


@dataclass
class TrackingSpec:
    experiment: str = setting("mutransfer", "MLflow experiment", kind="str", example="mutransfer")
    uri: str | None = setting(
        None,
        "MLflow tracking URI (null: sqlite:///mlflow.db here)",
        kind="str",
        nullable=True,
        example="http://127.0.0.1:5000",
    )


#: the order of a study's top-level fields (and of its YAML)
TOP_ORDER = (
    "name",
    "problem",
    "operator",
    "parametrization",
    "proxy_K",
    "target_K",
    "target_width",
    "proxy_resolution",
    "width_parametrization",
    "ladder",
    "ladder_keep",
    "search_space",
    "training",
    "search",
    "budget",
    "resources",
    "target",
    "tracking",
)


@dataclass
class Study:
    name: str = setting(
        help="the study's name (names the study directory and the MLflow parent run)", kind="str", example="my-study"
    )
    problem: ProblemSpec = None
    search_space: dict[str, Distribution] = None
    proxy_K: int | None = setting(None, "FNO: Fourier modes K of the proxy", kind="int", minimum=2, example="6")
    target_K: int | None = setting(None, "FNO: Fourier modes K of the target", kind="int", minimum=2, example="24")
    operator: OperatorSpec = field(default_factory=OperatorSpec)
    parametrization: str = setting(
        "mup",
        "FNO: the parametrization in K (muP: spectral init std and LR ∝ 1/√(d log K))",
        kind="str",
        choices=("mup", "standard"),
    )
    target_width: int | None = setting(
        None,
        "the target's width (null: operator.width, no width scaling)",
        kind="int",
        minimum=1,
        nullable=True,
        example="128",
    )
    proxy_resolution: int | None = setting(
        None,
        "FNO: the proxy's training resolution, reached by striding the study's data (null: problem.resolution, "
        "the target's); the hyperparameters carry over to the target's grid unchanged",
        kind="int",
        minimum=2,
        nullable=True,
        example="64",
    )
    width_parametrization: str | None = setting(
        None,
        "the width rule: mup (Tensor Programs V, base width = "
        "operator.width) or standard (null: mup when the width scales)",
        kind="str",
        nullable=True,
        choices=("mup", "standard"),
    )
    ladder: list | None = setting(
        None,
        "model sizes from the proxy up to the target (K for FNO, else the width; or "
        "{K, width}): the best ladder_keep of each rung is rescaled by muP and trained at the "
        "next size (null: no ladder)",
        kind="ints",
        nullable=True,
        read=read_ladder,
        example="[4, 8, 16]",
    )
    ladder_keep: float = setting(
        0.5, "fraction of a ladder rung's trials promoted to the next size", kind="float", check=fraction, example="0.5"
    )
    training: TrainingSpec = field(default_factory=TrainingSpec)
    search: SearchSpec = field(default_factory=SearchSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    target: TargetSpec = field(default_factory=TargetSpec)
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    #: where the study came from ("studies/x.yaml" or "quick (built-in)"); not part of the file
    source: str = field(default="", compare=False)
    #: the K rule's exponent measured on the training data when ``operator.k_exponent`` is 'data' (set by
    #: mutransfer._sweep.runner._resolve_k_rule before the search and kept in the study folder's state.json); not part of the file
    k_exponent_estimate: float | None = field(default=None, compare=False)
    #: fields of the file ignored as not applying, a line each (the sweep says them); not part of the file
    notes: tuple[str, ...] = field(default=(), compare=False)

    # ---- derived -------------------------------------------------------------------
    @property
    def family(self) -> OperatorFamily:
        """The operator family (operators.registry); a factory's registers in whichever process asks first."""
        o = self.operator
        return OPERATORS.get(o.type) or factory_family(o.type, o.factory_dir, o.factory_label, name=o.type)

    @property
    def proxy_modes(self) -> int | None:
        """The proxy's K for a family with the K axis, else None."""
        return self.family.sized(self.proxy_K)

    @property
    def target_modes(self) -> int | None:
        """The target's K for a family with the K axis, else None."""
        return self.family.sized(self.target_K)

    @property
    def k_exponent(self) -> float:
        """The exponent rho of the K rule the models are built with (operators.parametrization.data_aware_scale):
        ``operator.k_exponent``, or its estimate when that is 'data'."""
        value = self.operator.k_exponent
        if value != K_EXPONENT_FROM_DATA:
            return float(value)
        if self.k_exponent_estimate is None:
            raise UserInputError(
                "operator.k_exponent: 'data' is estimated from the training data when `mutransfer sweep` starts a "
                "study; this command builds models without it: give a number (1 is the paper's rule)"
            )
        return float(self.k_exponent_estimate)

    def sized(self) -> Study:
        """This study, or a copy whose models can be built before the K rule's exponent is measured ('data': the
        paper's rule stands in; the exponent changes no size, FLOP or memory count)."""
        if self.operator.k_exponent == K_EXPONENT_FROM_DATA and self.k_exponent_estimate is None:
            return dataclasses.replace(self, k_exponent_estimate=1.0)
        return self

    @property
    def proxy_width(self) -> int:
        return int(self.operator.width)

    @property
    def scales_K(self) -> bool:
        return self.proxy_modes != self.target_modes

    @property
    def scales_width(self) -> bool:
        return self.target_width is not None and self.target_width != self.operator.width

    @property
    def scales_resolution(self) -> bool:
        """The proxy trains on a coarser grid than the target (``proxy_resolution``)."""
        return self.proxy_resolution is not None and self.proxy_resolution != self.problem.resolution

    def scaling(self) -> dict:
        """The operator and what scales from proxy to target, as flat fields (report, MLflow parent params)."""
        return {
            "operator": self.operator.type,
            "parametrization": self.parametrization if self.family.scales("K") else None,
            "proxy_K": self.proxy_K,
            "target_K": self.target_K,
            "proxy_width": self.operator.width,
            "target_width": self.target_width,
            "width_parametrization": self.width_parametrization,
            "proxy_resolution": self.proxy_resolution if self.scales_resolution else None,
            "target_resolution": self.problem.resolution if self.scales_resolution else None,
            # the K rule's exponent (a number; 'data' until the sweep has measured it)
            "k_exponent": (self.operator.k_exponent if self.k_exponent_estimate is None else self.k_exponent_estimate)
            if self.family.scales("K")
            else None,
        }

    def transfer_scaling(self):
        """What changes from proxy to target, for operators.transfer.transfer: K (spectral families) and the width."""

        return Scaling(
            dim=self.dim,
            proxy_modes=self.proxy_modes,
            target_modes=self.target_modes,
            parametrization=self.parametrization,
            proxy_width=self.operator.width,
            target_width=self.target_width,
            width_parametrization=self.width_parametrization or "standard",
            attention_scaled=self.family.attention_scaled,
            k_exponent=self.k_exponent if self.family.scales("K") else 1.0,
            proxy_resolution=self.proxy_resolution if self.scales_resolution else None,
            target_resolution=int(self.problem.resolution) if self.scales_resolution else None,
            relative=self.family.facts_on_parameters,
        )

    def ladder_sizes(self) -> list[LadderSize]:
        """The ladder's model sizes, proxy first ([] without a ladder; mutransfer._study.ladder)."""
        return ladder_sizes(self)

    def model_text(self, target: bool) -> str:
        """e.g. "FNO-2D K=24 width 32" or "galerkin width 64" (the proxy's or the target's)."""
        width = self.target_width if target else self.operator.width
        return self.family.describe(self.dim, self.target_modes if target else self.proxy_modes, width)

    def scale_text(self) -> str:
        """What scales from proxy to target, e.g. "K 6 -> 24" or "width 16 -> 64 (width-muP)"."""
        parts = []
        if self.family.scales("K"):
            parts.append(f"K {self.proxy_K} -> {self.target_K}")
        if self.scales_width:
            parts.append(f"width {self.operator.width} -> {self.target_width} (width-{self.width_parametrization})")
        if self.scales_resolution:
            parts.append(f"grid {self.proxy_resolution} -> {self.problem.resolution}")
        return ", ".join(parts)

    @property
    def trial_count(self) -> int:
        """Trials of the study: every grid combination, else ``search.num_trials``."""
        if self.search.algorithm == "grid":
            return math.prod(len(d.values) for d in self.search_space.values())
        return self.search.num_trials

    @property
    def point_problem(self) -> bool:
        """True for problems whose samples are point sets (irregular meshes), not grids."""
        return get_problem(self.problem.name).kind == "points"

    @property
    def dim(self) -> int:
        return get_problem(self.problem.name).dim

    @property
    def padding(self) -> int:
        own = self.operator.padding
        return own if own is not None else get_problem(self.problem.name).padding

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """The target's training grid the spectral layers see (resolution + padding on each axis; time last if any)."""
        return self.grid_shape_at(int(self.problem.resolution))

    @property
    def proxy_grid_shape(self) -> tuple[int, ...]:
        """The proxy's training grid (``proxy_resolution``, else the target's), padding included."""
        return self.grid_shape_at(int(self.proxy_resolution or self.problem.resolution))

    def grid_shape_at(self, resolution: int) -> tuple[int, ...]:
        """The grid the spectral layers see at ``resolution`` points per space axis (+ padding; time last if any)."""
        pad = self.padding
        if self.problem.time_resolution is not None:
            return (int(resolution) + pad,) * (self.dim - 1) + (int(self.problem.time_resolution) + pad,)
        return (int(resolution) + pad,) * self.dim

    def to_dict(self) -> dict:
        """The study as a plain mapping (the YAML schema: the fields of TOP_ORDER; ``source``, ``notes`` left out)."""
        d = dataclasses.asdict(self)
        d["operator"] = {k: v for k, v in d["operator"].items() if k not in ("factory_dir", "factory_label")}
        d["search_space"] = {k: v.to_dict() for k, v in self.search_space.items()}
        ordered = {k: d[k] for k in TOP_ORDER}
        # fields that do not apply to this operator are left out, so the mapping parses again
        for key in family_only_fields():
            if key not in self.family.fields:
                ordered["operator"].pop(key)
        if not self.family.scales("K"):
            for key in ("proxy_K", "target_K", "parametrization", "proxy_resolution"):
                ordered.pop(key)
        return ordered

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def family_only_fields() -> tuple[str, ...]:
    """Operator fields that some family declares as its own (operators.registry: OperatorFamily.fields)."""
    return tuple(dict.fromkeys(f for family in OPERATORS.values() for f in family.fields))
