"""operators.pointwise: the FNO's 1×1 maps as one baddbmm. Same numbers, gradients, parameters, init and
state-dict keys as the convolutions they replace (so seeded models and saved checkpoints are unchanged)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from operators.pointwise import POINTWISE


@pytest.mark.parametrize("dim, grid", [(1, (11,)), (2, (5, 7)), (3, (3, 4, 5))])
def test_pointwise_equals_the_convolution_forward_and_backward(dim, grid):
    conv_class = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dim]
    torch.manual_seed(0)
    conv = conv_class(6, 4, kernel_size=1)
    torch.manual_seed(0)
    ours = POINTWISE[dim](6, 4, kernel_size=1)
    assert list(ours.state_dict()) == list(conv.state_dict())
    for a, b in zip(ours.parameters(), conv.parameters(), strict=True):
        assert torch.equal(a, b)  # the same init from the same random draws
    x = torch.randn(3, 6, *grid, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    y, y_ref = ours(x), conv(x2)
    assert y.shape == y_ref.shape and torch.allclose(y, y_ref, atol=1e-6)
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    assert torch.allclose(x.grad, x2.grad, atol=1e-5)
    for a, b in zip(ours.parameters(), conv.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-4)


def test_a_wrong_pointwise_map_is_caught():
    """The comparison above can fail: a map with its weight transposed differs from the convolution."""
    torch.manual_seed(0)
    conv = nn.Conv1d(5, 5, kernel_size=1)
    x = torch.randn(2, 5, 9)
    wrong = torch.einsum("io,bin->bon", conv.weight[:, :, 0], x) + conv.bias[:, None]
    assert not torch.allclose(wrong, conv(x), atol=1e-6)


def test_under_autocast_the_weight_is_cast_once_not_per_sample():
    """Autocast's cast of a weight broadcast over the batch would make B copies (kept for backward)."""
    torch.manual_seed(0)
    layer = POINTWISE[1](8, 8, kernel_size=1)
    x = torch.randn(16, 8, 32, requires_grad=True)  # its gradient needs the weight: the weight is saved
    saved = []

    def pack(t):
        saved.append((t.dtype, t.untyped_storage().nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    weight_copies = [nbytes for dtype, nbytes in saved if dtype == torch.bfloat16 and nbytes < x.numel() * 2]
    assert weight_copies == [8 * 8 * 2]  # one bf16 copy of the 8x8 weight, not 16


@pytest.mark.parametrize("base_width", [16, 4])  # 16: the standard model; 4: width-muP, readout x 4/16
def test_the_fnos_channel_first_projection_is_its_projection_module(base_width):
    """FNO._project computes self.project (readout with its muP multiplier, GELU, last layer) channel-first:
    the same numbers as the module applied channel-last. Without the multiplier (x 1 instead of 4/16) it differs."""
    from operators.fno import FNO

    torch.manual_seed(0)
    model = FNO(
        dim=2,
        in_channels=1,
        out_channels=2,
        modes=3,
        width=16,
        layers=2,
        width_parametrization="mup",
        base_width=base_width,
    )
    h = torch.randn(3, 16, 5, 7)
    ours = model._project(h).movedim(1, -1)
    reference = model.project(h.movedim(1, -1))
    assert torch.allclose(ours, reference, atol=1e-5)
    readout = model.project[0]
    if readout.multiplier != 1.0:
        dropped = model.project[2](
            torch.nn.functional.gelu(torch.nn.functional.linear(h.movedim(1, -1), readout.weight, readout.bias))
        )
        assert not torch.allclose(dropped, reference, atol=1e-5)
