"""The activations a model's forward pass keeps for its backward, measured on the meta device (no memory, no FLOPs).

A user's factory has no analytic memory model (the project's FNO and attention operators have theirs:
operators.planning, operators.planning_attention). What it keeps for backward is read instead from autograd
itself: the model is built on the meta device, a meta input of shape (B, N_1, …, N_d, C_in) goes through its
forward under :func:`torch.autograd.graph.saved_tensors_hooks`, and every tensor autograd saves is counted once
per storage (a view and its base are one), parameters excluded (they are counted as parameters), the output
included. At two batch sizes this gives a fixed part and a per-sample part: the bytes at batch B are
``fixed + B * per_sample``.

It is what backward needs at its start; the backward's own temporaries (e.g. an FFT's workspace) are not counted,
so a step's peak can be higher. A forward that cannot run on the meta device (an op without a meta kernel, a
data-dependent branch, ``.item()``) gives None: unknown, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class SavedActivations:
    """Bytes autograd keeps for backward: ``fixed + batch * per_sample`` (fp32 parameters and input)."""

    fixed: int
    per_sample: int

    def at(self, batch: int) -> int:
        """The bytes at ``batch`` samples."""
        return self.fixed + batch * self.per_sample


def _saved_bytes(model: nn.Module, sample: tuple[int, ...], batch: int) -> int | None:
    """The bytes ``model``'s forward (on the meta device) saves for backward on a meta input of shape
    (batch, *sample) (``sample``: the grid and the channels, channel-last); None where it cannot run there."""
    owned = {p.untyped_storage()._cdata for p in model.parameters()}
    kept: dict[int, int] = {}
    refs: list[torch.Tensor] = []  # held until counted: a freed storage's address could be reused

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in owned:
            kept[storage._cdata] = max(kept.get(storage._cdata, 0), storage.nbytes())
            refs.append(t)
        return t

    x = torch.empty((batch, *sample), device="meta", requires_grad=True)
    try:  # with gradients whatever the caller's mode, and a tensor the forward makes lands on the meta device too
        with torch.enable_grad(), torch.device("meta"), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(x)
    except Exception:  # no meta kernel, a data-dependent branch, a model of its own mind: unknown
        return None
    if not isinstance(out, torch.Tensor):
        return None
    kept[out.untyped_storage()._cdata] = out.untyped_storage().nbytes()
    return sum(kept.values())


def saved_activations(model: nn.Module, sample: tuple[int, ...]) -> SavedActivations | None:
    """The bytes ``model``'s forward (``model`` on the meta device) keeps for backward on (batch, *sample) inputs, as
    a fixed and a per-sample part read at batch 1 and 2; None where the forward cannot run on the meta device."""
    one, two = _saved_bytes(model, sample, 1), _saved_bytes(model, sample, 2)
    if one is None or two is None:
        return None
    return SavedActivations(fixed=max(2 * one - two, 0), per_sample=max(two - one, 0))
