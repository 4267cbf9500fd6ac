"""Mixed precision for training: autocast for the real-valued layers, fp32 FFTs, fp16 loss scaling.

``fp32``: everything in float32 (the default).
``bf16`` / ``fp16``: ``torch.autocast`` runs the lift, the pointwise 1×1
convolutions and the projection MLP in the low precision; the spectral layers
turn autocast off and run the FFTs and the spectral contraction in
float32/complex64 (operators.spectral), returning to the caller's dtype. The
weights, their gradients and Adam's states stay float32 (master weights); the
loss and the metrics are computed in float32 on the upcast prediction.
``fp16`` adds dynamic loss scaling (:class:`LossScaler`): the loss is scaled
before backward, the gradients are unscaled before the element-wise spectral
clipping (so the clip value means what it says), and a step whose gradients
overflowed is skipped while the scale backs off. ``torch.amp.GradScaler`` does
the same but cannot unscale complex gradients (the spectral weights are
complex): its ``_amp_foreach_non_finite_check_and_unscale_`` kernel has no
ComplexFloat version (torch 2.13), so the scaler here works on real views.

Used by the trainer as::

    amp = Precision(config.precision, device)
    with amp.autocast():
        pred = model(x)
    loss = loss_fn(pred.float(), y)
    amp.backward(loss); amp.unscale(optimizer); clip(...); amp.step(optimizer)
"""

from __future__ import annotations

import contextlib

import torch

from mutransfer._training.losses import relative_l2
from operators.parametrization import real_view
from operators.precision import Precision as PrecisionName
from operators.precision import check_precision

#: precision -> autocast dtype (None: no autocast)
AUTOCAST_DTYPES: dict[PrecisionName, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """Autocast context, loss scaling and the optimizer step for one precision on one device."""

    def __init__(self, name: str, device: torch.device):
        self.name = check_precision(name)
        self.device = torch.device(device)
        self.dtype = AUTOCAST_DTYPES[self.name]
        self.scaler = LossScaler() if name == "fp16" else None

    def autocast(self):
        """A context manager: autocast to the low precision, or nothing for fp32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring the gradients back to their true scale (fp16) before clipping them."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """optimizer.step(), through the scaler for fp16 (which skips steps with inf/NaN gradients)."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)

    def state_dict(self) -> dict | None:
        return None if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def training_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, amp: Precision, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """One plain training step as the trainer takes it (no clipping, no divergence checks), for measurements.

    zero_grad, the forward under ``amp``'s autocast, the relative L2 in float32,
    backward (scaled for fp16), unscale, optimizer step. Returns the loss.
    """

    optimizer.zero_grad(set_to_none=True)
    with amp.autocast():
        pred = model(x)
    loss = relative_l2(pred.float(), y)
    amp.backward(loss)
    amp.unscale(optimizer)
    amp.step(optimizer)
    return loss


def all_finite(params: list[torch.Tensor]) -> bool:
    """True when every tensor holds only finite values (the trainer's divergence check after each step, and the fp16
    loss scaler's overflow check of the unscaled gradients).

    Read from each tensor's sum (a NaN or an infinity makes it non-finite), accumulated in float32, or float64 for
    float64 tensors, so half-precision tensors do not overflow: one reduction per tensor and no boolean copy of it.
    On the default study's target (FNO-1D, K 24, width 64, one thread) 0.09 ms a step instead of 1.27 ms for
    ``isfinite`` per element, against an 11.3-ms training step (``python benchmarks/trainer_overheads.py``). A tensor whose finite entries sum past
    float32's range (entries near 1e34 and beyond, a diverged training in all but name) counts as not finite."""
    if not params:
        return True
    sums = [r.sum(dtype=torch.float64 if r.dtype == torch.float64 else torch.float32) for r in map(real_view, params)]
    return bool(torch.stack(sums).isfinite().all())


class LossScaler:
    """Dynamic loss scaling for fp16 that also handles complex gradients (through their real views).

    The scale starts at 2^16; a step whose unscaled gradients hold an inf or NaN is
    skipped and the scale halves; after ``growth_interval`` good steps it doubles
    (the schedule of torch.amp.GradScaler's defaults).
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ):
        self.scale_value = float(init_scale)
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self.growth_tracker = 0
        self._unscaled = False
        self._found_inf = False

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_value

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide every gradient by the scale (once per step) and note whether any is inf/NaN."""
        if self._unscaled:
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        grads = [real_view(g) for g in grads]
        if grads:
            torch._foreach_mul_(grads, 1.0 / self.scale_value)
            self._found_inf = not all_finite(grads)
        self._unscaled = True

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale if not done yet, step unless a gradient overflowed, update the scale; True if it stepped."""
        self.unscale_(optimizer)
        stepped = not self._found_inf
        if stepped:
            optimizer.step()
            self.growth_tracker += 1
            if self.growth_tracker >= self.growth_interval:
                self.scale_value *= self.growth_factor
                self.growth_tracker = 0
        else:
            self.scale_value *= self.backoff_factor
            self.growth_tracker = 0
        self._unscaled = self._found_inf = False
        return stepped

    def state_dict(self) -> dict:
        return {"scale": self.scale_value, "growth_tracker": self.growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        self.scale_value = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])
