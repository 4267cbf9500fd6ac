"""What the trainer measures: the test metric, the schedule's master LR, whether the weights are finite."""

from __future__ import annotations

import torch
from torch import nn

from mutransfer._training.losses import relative_l2
from mutransfer._training.precision import Precision
from mutransfer.data._streaming import LazySamples, iterate_chunks


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: torch.Tensor | LazySamples,
    y: torch.Tensor | LazySamples,
    batch_size: int,
    device: torch.device,
    amp: Precision | None = None,
) -> float:
    """Mean relative L2 of ``model`` over (x, y), shapes (n, *grid, C), in batches (the metric in float32)."""
    was_training = model.training
    model.eval()
    amp = amp or Precision("fp32", device)
    total = 0.0
    for xb, yb in iterate_chunks(x, y, batch_size):
        xb = xb.to(device, non_blocking=True)
        yb = yb.to(device, non_blocking=True)
        with amp.autocast():
            pred = model(xb)
        total += float(relative_l2(pred.float(), yb, reduction="sum"))
    model.train(was_training)
    return total / x.shape[0]


def base_lr(optimizer: torch.optim.Optimizer) -> float:
    """Current LR of the multiplier-1 ("other") group, i.e. the schedule's master LR."""
    for group in optimizer.param_groups:
        if group.get("name") == "other":
            return float(group["lr"])
    group = optimizer.param_groups[0]
    return float(group["lr"]) / float(group.get("lr_multiplier", 1.0))
