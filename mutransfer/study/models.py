"""From a study and a sampled configuration to a model and a TrainConfig.

Shared by the proxy trials and the target: both build the operator and the
trainer's config through these functions, so the only differences between
proxy and target are K, the width and the epoch budget (and, under muP, the
multipliers the model derives from K and the width itself).
"""

from __future__ import annotations

import math

from mutransfer.study import Study

#: the hyperparameter keys a trial / the target is described by
HPARAM_KEYS = ("lr", "batch_size", "beta1", "beta2", "weight_decay", "clip_value", "init_scale")


def fixed_hyperparameters(study: Study) -> dict:
    """The study's fixed hyperparameters (``training``) as a flat dict."""
    t = study.training
    return {
        "lr": float(t.lr),
        "batch_size": int(t.batch_size),
        "beta1": float(t.betas[0]),
        "beta2": float(t.betas[1]),
        "weight_decay": float(t.weight_decay),
        "clip_value": None if t.clip_value is None else float(t.clip_value),
        "init_scale": float(t.init_scale),
    }


def merge_hyperparameters(study: Study, config: dict) -> dict:
    """Fixed hyperparameters overridden by the sampled ``config`` (keys of the search space)."""
    hp = fixed_hyperparameters(study)
    for key, value in config.items():
        if key not in hp:
            continue
        hp[key] = int(value) if key == "batch_size" else float(value)
    return hp


def train_config(study: Study, hp: dict, *, epochs: int, batch_size: int | None = None, **options):
    """A :class:`~mutransfer.training.TrainConfig` for merged hyperparameters ``hp``."""
    from mutransfer.training import TrainConfig

    t = study.training
    return TrainConfig(
        lr=hp["lr"],
        batch_size=int(batch_size if batch_size is not None else hp["batch_size"]),
        epochs=int(epochs),
        betas=(hp["beta1"], hp["beta2"]),
        weight_decay=hp["weight_decay"],
        schedule=t.schedule,
        milestones=None if t.milestones is None else list(t.milestones),
        step_size=t.step_size,
        gamma=float(t.gamma),
        clip_value=hp["clip_value"],
        seed=int(t.seed),
        loss=t.loss,
        data_weight=t.data_weight,
        physics_weight=t.physics_weight,
        precision=t.precision,
        progress=False,
        **options,
    )


def build_model(
    study: Study,
    *,
    modes: int | None = None,
    width: int | None = None,
    init_scale: float = 1.0,
    input_channels: int = 1,
    output_channels: int = 1,
    normalization: dict | None = None,
):
    """The study's operator at ``modes`` K (FNO) and ``width`` (default: the proxy's operator.width).

    ``input_channels`` is the last-axis size of the input tensor (for point-set
    problems the packed [coords | features | mask] layout, see
    operators.adapters). Under width-muP the base width is the proxy's
    ``operator.width``, so the proxy is the standard model and wider models
    get the Tensor Programs V multipliers. ``normalization`` (attention operators
    only): per-channel standardisation from operators.adapters.normalization_from.
    """
    from operators import FNO
    from operators.adapters import point_set_model

    o = study.operator
    width = int(o.width if width is None else width)
    wp = study.width_parametrization or "standard"
    base_width = int(o.width) if wp == "mup" else None
    if study.is_fno:
        return FNO(
            study.dim,
            int(input_channels),
            int(output_channels),
            modes=int(modes if modes is not None else study.proxy_K),
            width=width,
            layers=o.layers,
            parametrization=study.parametrization,
            projection_channels=o.projection_channels,
            padding=study.padding,
            init_scale=float(init_scale),
            width_parametrization=wp,
            base_width=base_width,
        )
    return point_set_model(
        o.type, coord_dim=study.dim, input_channels=input_channels, output_channels=output_channels,
        packed=study.point_problem, normalization=normalization, width=width, layers=o.layers, heads=o.heads,
        width_parametrization=wp, base_width=base_width, **o.options,
    )


def model_for(
    study: Study, data, *, target: bool = False, init_scale: float = 1.0, modes: int | None = None, width: int | None = None
):
    """The proxy (``target=False``) or target model for ``data`` (channels and normalisation read from its tensors).

    ``modes`` / ``width`` override the proxy's or target's (landscapes vary them).
    """
    if modes is None and study.is_fno:
        modes = study.target_K if target else study.proxy_K
    if width is None:
        width = study.target_width if target else study.operator.width
    return build_model(
        study, modes=modes, width=width, init_scale=init_scale,
        input_channels=data.train_x.shape[-1], output_channels=data.train_y.shape[-1],
        normalization=data_normalization(study, data),
    )


def data_normalization(study: Study, data) -> dict | None:
    """The attention operators' per-channel standardisation from the training split (None for FNO)."""
    if study.is_fno:
        return None
    from operators.adapters import normalization_from

    return normalization_from(data.train_x, data.train_y, study.dim if study.point_problem else None)


def eval_metrics(record, spectral_lr0: float) -> dict:
    """What a proxy trial or the target reports to Ray for one evaluation (a training.EpochRecord)."""
    return {
        "epoch": record.epoch,
        "test_error": record.test_error,
        "train_loss": record.train_loss,
        "lr": record.lr,
        "trainer_seconds": record.seconds,
        "spectral_lr0": spectral_lr0,
    }


def effective_spectral_lr(model, lr: float) -> float:
    """The spectral weights' Adam LR at step 0, read from the optimizer param groups (c(K)·lr)."""
    from operators import optimizer_param_groups

    for group in optimizer_param_groups(model, lr):
        if group["name"] == "spectral":
            return float(group["lr"])
    return float(lr)


def is_finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
