"""Training loop, losses and LR schedules."""

from mutransfer._training.checkpoint import load_checkpoint
from mutransfer._training.config import TrainConfig
from mutransfer._training.losses import relative_l2
from mutransfer._training.records import DIVERGED_METRIC, EpochRecord, TrainEnd, TrainResult
from mutransfer._training.trainer import StopTraining, train

__all__ = [
    "DIVERGED_METRIC",
    "EpochRecord",
    "StopTraining",
    "TrainConfig",
    "TrainEnd",
    "TrainResult",
    "load_checkpoint",
    "relative_l2",
    "train",
]
