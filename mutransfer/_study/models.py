"""From a study and a sampled configuration to a model and a TrainConfig.

Shared by the proxy trials and the target: both build the operator and the
trainer's config through these functions, so the only differences between
proxy and target are K, the width and the epoch budget (and, under muP, the
multipliers the model derives from K and the width itself).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torch import nn

from mutransfer._problems import get_problem
from mutransfer._study import Study
from mutransfer._study.search_space import SEARCHABLE, SIZE_KEYS, is_operator_key, trial_study, typed
from mutransfer._training import TrainConfig
from mutransfer.data._validation import SelectionSplit, coarsen
from operators.adapters import normalization_from
from operators.family import ModelSpec
from operators.parametrization import model_spectral_lr

#: the hyperparameter keys every trial and the target are described by
HPARAM_KEYS = ("lr", "batch_size", "beta1", "beta2", "weight_decay", "clip_value", "init_scale")
#: the other training fields a study may search (mutransfer._study.search_space.SEARCHABLE): a trial's and the
#: target's description carries those its study searches, and the training takes the study's fixed ones otherwise
SEARCHED_ONLY = tuple(name for name in SEARCHABLE if name not in HPARAM_KEYS)


@dataclass(frozen=True)
class Hyperparameters:
    """The hyperparameters of one trial or the target: the study's fixed ones with the sampled ones over them.

    ``searched``: the values of the study's searched fields beyond :data:`HPARAM_KEYS` (``schedule``,
    ``warmup``, …), by name; empty when the study searches none of them, so a study that does not search them
    describes its trials as before."""

    lr: float
    batch_size: int
    beta1: float
    beta2: float
    weight_decay: float
    clip_value: float | None
    init_scale: float
    searched: tuple[tuple[str, object], ...] = ()

    @classmethod
    def merged(cls, study: Study, config: dict | None = None) -> Hyperparameters:
        """The one merge: ``study.training``'s values, overridden by the sampled ``config`` (searched keys)."""
        t = study.training
        values = {
            "lr": t.lr,
            "batch_size": t.batch_size,
            "beta1": t.betas[0],
            "beta2": t.betas[1],
            "weight_decay": t.weight_decay,
            "clip_value": t.clip_value,
            "init_scale": t.init_scale,
        }
        config = config or {}
        values.update({key: value for key, value in config.items() if key in values})
        return cls(
            lr=float(values["lr"]),
            batch_size=int(values["batch_size"]),
            beta1=float(values["beta1"]),
            beta2=float(values["beta2"]),
            weight_decay=float(values["weight_decay"]),
            clip_value=None if values["clip_value"] is None else float(values["clip_value"]),
            init_scale=float(values["init_scale"]),
            searched=tuple(
                (key, typed(key, value))
                for key, value in config.items()
                if key in SEARCHED_ONLY or key in SIZE_KEYS or is_operator_key(key)
            ),
        )

    def as_dict(self) -> dict:
        """The flat mapping trials, the target and the report use (keys of HPARAM_KEYS, then the searched ones)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "searched"}
        return {**out, **dict(self.searched)}


def fixed_hyperparameters(study: Study) -> dict:
    """The study's fixed hyperparameters (``training``) as a flat dict."""
    return Hyperparameters.merged(study).as_dict()


def merge_hyperparameters(study: Study, config: dict) -> dict:
    """Fixed hyperparameters overridden by the sampled ``config`` (keys of the search space)."""
    return Hyperparameters.merged(study, config).as_dict()


def train_config(study: Study, hp: dict, *, epochs: int, batch_size: int | None = None, **options):
    """A :class:`~mutransfer._training.TrainConfig` for merged hyperparameters ``hp`` (the study's fixed training
    fields where ``hp`` does not carry a searched one)."""

    t = study.training
    return TrainConfig(
        lr=hp["lr"],
        batch_size=int(batch_size if batch_size is not None else hp["batch_size"]),
        epochs=int(epochs),
        betas=(hp["beta1"], hp["beta2"]),
        weight_decay=hp["weight_decay"],
        schedule=hp.get("schedule", t.schedule),
        warmup=float(hp.get("warmup", t.warmup)),
        milestones=None if t.milestones is None else list(t.milestones),
        step_size=hp.get("step_size", t.step_size),
        gamma=float(hp.get("gamma", t.gamma)),
        clip_value=hp["clip_value"],
        seed=int(t.seed),
        loss=hp.get("loss", t.loss),
        data_weight=hp.get("data_weight", t.data_weight),
        physics_weight=hp.get("physics_weight", t.physics_weight),
        precision=hp.get("precision", t.precision),
        progress=False,
        **options,
    )


def model_spec(
    study: Study,
    *,
    modes: int | None = None,
    width: int | None = None,
    init_scale: float = 1.0,
    input_channels: int = 1,
    output_channels: int = 1,
    normalization: dict | None = None,
) -> ModelSpec:
    """The study's operator at ``modes`` K (families with the K axis) and ``width``, as the family's ModelSpec.

    Under width-muP the base width is the proxy's ``operator.width``, so the proxy is the
    standard model and wider models get the Tensor Programs V multipliers.
    """
    o = study.operator
    family = study.family
    wp = study.width_parametrization or "standard"
    options = {name: getattr(o, name) for name in family.fields}
    options["padding"] = study.padding
    if "k_exponent" in options:
        options["k_exponent"] = study.k_exponent  # a number: 'data' is replaced by its estimate
    return ModelSpec(
        dim=study.dim,
        input_channels=int(input_channels),
        output_channels=int(output_channels),
        width=int(o.width if width is None else width),
        layers=int(o.layers),
        modes=family.sized(study.proxy_K if modes is None else int(modes)),
        base_modes=family.sized(study.proxy_K),
        parametrization=study.parametrization,
        width_parametrization=wp,
        base_width=int(o.width) if wp == "mup" else None,
        init_scale=float(init_scale),
        packed=study.point_problem,
        normalization=normalization,
        options=options,
    )


def build_model(study: Study, **spec) -> nn.Module:
    """The study's operator (the one model builder of train, sweep, landscape and evaluate): ``model_spec``'s arguments.

    ``input_channels`` is the last-axis size of the input tensor (for point-set
    problems the packed [coords | features | mask] layout, see operators.adapters);
    ``normalization`` (families that standardise): from operators.adapters.normalization_from.
    """
    return study.family.build(model_spec(study, **spec))


def model_for(
    study: Study,
    data,
    *,
    target: bool = False,
    hp: dict | None = None,
    modes: int | None = None,
    width: int | None = None,
):
    """The proxy (``target=False``) or target model for ``data`` (channels and normalisation read from its tensors).

    ``hp``: the training's hyperparameters (its ``init_scale``, and the operator fields it searched); None: the
    study's operator at init scale 1. ``modes`` / ``width`` override the proxy's or target's (landscapes vary them).
    """
    hp = hp or {}
    init_scale = float(hp.get("init_scale", 1.0))
    study = trial_study(study, hp)
    if modes is None:
        modes = study.target_modes if target else study.proxy_modes
    if width is None:
        width = study.target_width if target else study.operator.width
    return build_model(
        study,
        modes=modes,
        width=width,
        init_scale=init_scale,
        input_channels=data.train_x.shape[-1],
        output_channels=data.train_y.shape[-1],
        normalization=data_normalization(study, data),
    )


def data_normalization(study: Study, data) -> dict | None:
    """The per-channel standardisation from the training split, for families that standardise (None otherwise)."""
    if not study.family.standardizes:
        return None
    return normalization_from(data.train_x, data.train_y, study.dim if study.point_problem else None)


def eval_metrics(record, spectral_lr0: float, *, error_key: str = "test_error") -> dict:
    """What a proxy trial or the target reports to Ray for one evaluation (a training.EpochRecord).

    ``error_key``: what the run's held-out error is called: ``val_error`` for a selection run (a proxy trial,
    whose held-out split is the validation split: mutransfer.data._validation), ``test_error`` for the target.
    """
    return {
        "epoch": record.epoch,
        error_key: record.test_error,
        "train_loss": record.train_loss,
        "lr": record.lr,
        "trainer_seconds": record.seconds,
        "spectral_lr0": spectral_lr0,
    }


def effective_spectral_lr(model, lr: float) -> float:
    """The spectral weights' Adam LR at step 0 (c(K)·lr), by the rule in operators.parametrization."""
    return model_spectral_lr(model, lr)


def proxy_split(study: Study, selection: SelectionSplit) -> SelectionSplit:
    """The selection split on the proxy's grid: strided to ``proxy_resolution`` on the space axes (the split itself
    when the proxy trains on the target's grid)."""
    resolution = study.proxy_resolution
    if resolution is None or not study.scales_resolution:
        return selection
    space_axes = study.dim - (1 if study.problem.time_resolution is not None else 0)
    periodic = get_problem(study.problem.name).periodic
    return coarsen(selection, resolution, periodic=periodic, space_axes=space_axes)
