"""Training loop, losses and LR schedules."""

from mutransfer.training.checkpoint import load_checkpoint
from mutransfer.training.config import TrainConfig
from mutransfer.training.losses import relative_l2
from mutransfer.training.records import DIVERGED_METRIC, EpochRecord, TrainEnd, TrainResult
from mutransfer.training.trainer import StopTraining, train

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
