"""The FNO's pointwise linear map W_l: a 1×1 convolution computed as one batched matrix product.

``nn.Conv1d/2d/3d`` with ``kernel_size=1`` is what the FNO's W_l is; oneDNN runs it as a general
convolution, which on CPU was 1.6–2.5× slower in fp32 than the same map as ``baddbmm`` over the
flattened grid (forward and backward, batch 20, width 64: 1D 1024 points, 2D 64×64;
``python benchmarks/bench_fno_step.py --profile``, docs/benchmarks.md). The classes here are the
convolutions with only ``forward`` replaced: the same parameters (weight (m_out, m_in, 1, …, 1),
bias (m_out,)), the same initialisation and random draws, the same state-dict keys, so seeded
models and saved checkpoints are unchanged.

Input (B, m_in, N_1, …, N_d), channel-first; output (B, m_out, N_1, …, N_d).
"""

from __future__ import annotations

import torch
from torch import nn


def pointwise(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y[b, o, n] = Σ_i weight[o, i]·x[b, i, n] + bias[o] over every grid point n: one ``baddbmm``.

    Under autocast the weight is cast before it is broadcast over the batch: autocast's own cast of the
    broadcast view would materialise B copies of it (and autograd would keep them for backward)."""
    if torch.is_autocast_enabled(x.device.type):
        dtype = torch.get_autocast_dtype(x.device.type)
        with torch.autocast(x.device.type, enabled=False):
            return pointwise(x.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))
    batch, m_in = x.shape[:2]
    m_out = weight.shape[0]
    w = weight.reshape(m_out, m_in).expand(batch, m_out, m_in)
    flat = x.reshape(batch, m_in, -1)
    y = torch.bmm(w, flat) if bias is None else torch.baddbmm(bias.view(1, m_out, 1), w, flat)
    return y.view((batch, m_out) + tuple(x.shape[2:]))


class Pointwise1d(nn.Conv1d):
    """``nn.Conv1d(m_in, m_out, 1)`` computed by :func:`pointwise`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pointwise(x, self.weight, self.bias)


class Pointwise2d(nn.Conv2d):
    """``nn.Conv2d(m_in, m_out, 1)`` computed by :func:`pointwise`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pointwise(x, self.weight, self.bias)


class Pointwise3d(nn.Conv3d):
    """``nn.Conv3d(m_in, m_out, 1)`` computed by :func:`pointwise`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pointwise(x, self.weight, self.bias)


#: the pointwise layer of a d-dimensional FNO
POINTWISE: dict[int, type[nn.Conv1d] | type[nn.Conv2d] | type[nn.Conv3d]] = {
    1: Pointwise1d,
    2: Pointwise2d,
    3: Pointwise3d,
}
