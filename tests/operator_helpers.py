"""Helpers shared by the point-set operator tests (Galerkin, ONO, GNOT, width-muP)."""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def pad_batch(samples: list[torch.Tensor], fill: float = float("nan")) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack (n_i, C) tensors into (B, n_max, C) padded with ``fill``, and the bool mask (B, n_max)."""
    n_max = max(s.shape[0] for s in samples)
    out = torch.full((len(samples), n_max, samples[0].shape[1]), fill, dtype=samples[0].dtype)
    mask = torch.zeros(len(samples), n_max, dtype=torch.bool)
    for i, s in enumerate(samples):
        out[i, : s.shape[0]] = s
        mask[i, : s.shape[0]] = True
    return out, mask


def saved_activation_bytes(model, x, autocast_dtype=None):
    """(bytes of the distinct storages autograd saves for backward, parameters excluded; the output).

    ``autocast_dtype`` (e.g. torch.bfloat16) runs the forward under CPU autocast.
    """
    import contextlib

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    cast = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype is not None else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), cast:
        out = model(x)
    return sum(saved.values()), out


class _ShapeRecorder(TorchDispatchMode):
    """Records the shape of every tensor any ATen op returns (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.shapes.append((str(func), tuple(t.shape)))
        return out


def large_square_tensors(step, n: int) -> list[tuple[str, tuple[int, ...]]]:
    """Run ``step()`` (forward + backward) and return every tensor with two or more dims of size ≥ n.

    Looks at the outputs of all ATen ops (a TorchDispatchMode, which also sees
    the backward pass) and at every tensor autograd saves for backward
    (saved-tensor hooks).
    """
    recorder = _ShapeRecorder()
    saved: list[tuple[str, tuple[int, ...]]] = []

    def pack(t):
        saved.append(("saved", tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), recorder:
        step()
    return [(name, shape) for name, shape in recorder.shapes + saved if sum(s >= n for s in shape) >= 2]


def smooth_regression(batch: int, n: int, coord_dim: int = 2, seed: int = 0):
    """Point sets on [0,1]^d with input a(x) and target u(x) = sin(πx1)·a(x) + cos(πx2) (a smooth map)."""
    g = torch.Generator().manual_seed(seed)
    coords = torch.rand(batch, n, coord_dim, generator=g)
    phase = torch.rand(batch, 1, 1, generator=g) * 2
    a = torch.sin(2 * math.pi * coords[..., :1] + phase)
    u = torch.sin(math.pi * coords[..., :1]) * a + torch.cos(math.pi * coords[..., -1:])
    return coords, a, u


def adam_loss_drop(model, forward, target, steps: int = 30, lr: float = 3e-3) -> tuple[float, float]:
    """Train with Adam on the optimizer param groups for ``steps`` steps; return (first, last) MSE."""
    from operators import optimizer_param_groups

    optimizer = torch.optim.Adam(optimizer_param_groups(model, lr))
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.mean((forward() - target) ** 2)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses[0], min(losses[-3:])


def lr_by_parameter(model, groups) -> dict[str, float]:
    """Parameter name → LR of the optimizer group that holds it."""
    lr_of = {id(p): g["lr"] for g in groups for p in g["params"]}
    return {name: lr_of[id(p)] for name, p in model.named_parameters()}
