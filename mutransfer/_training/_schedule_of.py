"""A TrainConfig's LR schedule: as the trainer's scheduler over an optimizer, or as a pure function of the
iteration (a population's members scale their own LRs by it: mutransfer._training._population)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR

from mutransfer._training.config import TrainConfig
from mutransfer._training.schedules import schedule_function


def _schedule_args(config: TrainConfig, unit: int) -> dict:
    """The schedule's arguments of ``config`` in iterations (``unit``: iterations per budget unit, an epoch's or 1):
    milestones and step size in the budget's unit; ``step`` with neither halves every budget/5."""
    step_size = config.step_size
    if config.schedule == "step" and step_size is None and config.milestones is None:
        step_size = max(1, int(config.epochs or config.iterations or 0) // 5)  # FNO recipe: halve every budget/5
    return dict(
        milestones=None if config.milestones is None else [m * unit for m in config.milestones],
        step_size=None if step_size is None else step_size * unit,
        gamma=config.gamma,
        warmup=config.warmup,
    )


def schedule_for(optimizer: torch.optim.Optimizer, config: TrainConfig, total_iterations: int, unit: int):
    """The per-iteration LR schedule of ``config`` over ``optimizer`` (a LambdaLR)."""
    return LambdaLR(optimizer, schedule_factor(config, total_iterations, unit))


def schedule_factor(config: TrainConfig, total_iterations: int, unit: int) -> Callable[[int], float]:
    """The same schedule as a pure function ``iteration -> factor`` of the base LR."""
    return schedule_function(config.schedule, total_iterations, **_schedule_args(config, unit))
