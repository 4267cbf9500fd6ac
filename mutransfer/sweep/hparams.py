"""From a study and a sampled configuration to a model and a TrainConfig.

Shared by the proxy trials and the target: both build the FNO and the
trainer's config through these functions, so the only differences between
proxy and target are K and the epoch budget (and, under muP, the spectral
multipliers the model derives from K itself).
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
        progress=False,
        **options,
    )


def build_model(study: Study, modes: int, init_scale: float, in_channels: int = 1, out_channels: int = 1):
    """The study's FNO with ``modes`` Fourier modes."""
    from operators import FNO

    return FNO(
        study.dim,
        in_channels,
        out_channels,
        modes=int(modes),
        width=study.operator.width,
        layers=study.operator.layers,
        parametrization=study.parametrization,
        projection_channels=study.operator.projection_channels,
        padding=study.padding,
        init_scale=float(init_scale),
    )


def effective_spectral_lr(model, lr: float) -> float:
    """The spectral weights' Adam LR at step 0, read from the optimizer param groups (c(K)·lr)."""
    from operators import optimizer_param_groups

    for group in optimizer_param_groups(model, lr):
        if group["name"] == "spectral":
            return float(group["lr"])
    return float(lr)


def effective_spectral_init_std(study: Study, modes: int, init_scale: float) -> float:
    """Std of the real/imaginary parts of a spectral weight entry at init (what the model draws)."""
    from operators.parametrization import base_spectral_init_std, spectral_init_multiplier

    width = study.operator.width
    base = base_spectral_init_std(width, width, study.parametrization)
    return float(init_scale) * base * spectral_init_multiplier(int(modes), study.dim, study.parametrization)


def is_finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
