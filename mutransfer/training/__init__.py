"""Training loop, losses and LR schedules."""

from mutransfer.training.losses import relative_l2
from mutransfer.training.trainer import (
    DIVERGED_METRIC,
    StopTraining,
    TrainConfig,
    TrainResult,
    load_checkpoint,
    train,
)

__all__ = [
    "DIVERGED_METRIC",
    "StopTraining",
    "TrainConfig",
    "TrainResult",
    "load_checkpoint",
    "relative_l2",
    "train",
]
