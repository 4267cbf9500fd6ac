"""Measure the peak bytes of live tensors of a piece of PyTorch code, on any device (the CPU included).

CUDA has an allocator that counts (``torch.cuda.max_memory_allocated``); the CPU has
none. :class:`LiveTensorPeak` counts what the planner counts: the bytes of every
tensor storage that is alive, sampled at every ATen operation (forward, backward
and the optimizer's), from a :class:`~torch.utils._python_dispatch.TorchDispatchMode`.
A storage is counted from the op that created it until it is freed (a weak
reference to the storage expires). Views share their storage and count once.
Scratch memory inside a single kernel (an FFT plan's buffers, a BLAS workspace)
is invisible to it, as it is to the planner's activation formula.

Usage::

    with LiveTensorPeak(model.parameters(), optimizer_state_tensors) as meter:
        step()
    meter.peak_bytes, meter.baseline_bytes
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mutransfer._training.precision import Precision, training_step
from operators import optimizer_param_groups


class LiveTensorPeak(TorchDispatchMode):
    """Peak live-storage bytes while the context is active (``existing`` tensors count from the start)."""

    def __init__(self, existing: Iterable[torch.Tensor] = ()):
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.bytes = 0
        for t in existing:
            self._add(t)
        self.baseline_bytes = self.bytes
        self.peak_bytes = self.bytes
        self.ops = 0

    def _add(self, t) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in self._live and not self._live[key][0].expired():
            return
        nbytes = storage.nbytes()
        self._live[key] = (StorageWeakRef(storage), nbytes)
        self.bytes += nbytes

    def _collect(self) -> None:
        for key in [k for k, (ref, _) in self._live.items() if ref.expired()]:
            self.bytes -= self._live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._collect()  # what was freed since the previous op
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self._add(t)
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        self.ops += 1
        return out


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor in an optimizer's state (Adam's moments and step counters)."""
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def measure_training_peak(
    model: torch.nn.Module,
    batch: int,
    grid: tuple[int, ...],
    *,
    precision: str = "fp32",
    steps: int = 3,
    lr: float = 1e-4,
) -> dict:
    """Peak bytes of one Adam training step of ``model`` (already on its device), after warm-up steps.

    Runs ``steps`` steps of the trainer's step (autocast at ``precision``, relative L2 in
    float32, fp16 loss scaling, Adam on the muP param groups) on random data of shape
    (batch, *grid, C); the last step is measured, when Adam's states exist. On CUDA the
    peak is ``torch.cuda.max_memory_allocated`` (everything the caching allocator handed
    out: tensors, cuFFT and cuBLAS workspaces); on the CPU it is :class:`LiveTensorPeak`.
    The input and target batch are subtracted. Returns {"peak_bytes", "device", "data_bytes"}.
    """

    device = next(model.parameters()).device
    optimizer = torch.optim.Adam(optimizer_param_groups(model, lr))
    amp = Precision(precision, device)
    in_channels = model.config.get("in_channels", 1) if hasattr(model, "config") else 1
    out_channels = model.config.get("out_channels", 1) if hasattr(model, "config") else 1
    x = torch.randn(batch, *grid, in_channels, device=device)
    y = torch.randn(batch, *grid, out_channels, device=device)
    data = (x.numel() + y.numel()) * 4

    def step() -> None:
        training_step(model, optimizer, amp, x, y)

    for _ in range(max(0, steps - 1)):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
    else:
        existing = [*model.parameters(), *optimizer_tensors(optimizer), x, y]
        with LiveTensorPeak(existing) as meter:
            step()
        peak = meter.peak_bytes
    return {"peak_bytes": int(peak - data), "device": str(device), "data_bytes": int(data)}
