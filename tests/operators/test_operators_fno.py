"""FNO structure: K convention, parameter counts, shapes, resolution transfer, errors."""

import math

import pytest
import torch

from operators import FNO, OperatorConfigError, plan_fno, spectral_parameters
from operators.spectral import SpectralConv
from tests.operator_helpers import saved_activation_bytes

DIMS = [1, 2, 3]
PARAMETRIZATIONS = ["standard", "mup"]
GRIDS = {1: (32,), 2: (16, 12), 3: (8, 8, 6)}


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("modes", [2, 3])
def test_spectral_entries_per_layer(dim, modes):
    width = 5
    conv = SpectralConv(width, width, modes, dim)
    entries = sum(w.numel() for w in conv.spectral_weights())
    assert entries == 2 ** (dim - 1) * width**2 * modes**dim
    assert len(conv.spectral_weights()) == 2 ** (dim - 1)
    assert all(w.shape == (width, width) + (modes,) * dim and w.is_complex() for w in conv.spectral_weights())


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("parametrization", PARAMETRIZATIONS)
def test_planner_counts_match_model(dim, parametrization):
    model = FNO(dim, 2, 3, modes=3, width=6, layers=3, parametrization=parametrization, projection_channels=7)
    plan = plan_fno(dim, 3, 6, 3, in_channels=2, out_channels=3, projection_channels=7)
    spectral = sum(p.numel() for p in spectral_parameters(model))
    assert plan.spectral_params == spectral
    assert plan.total_params == sum(p.numel() for p in model.parameters())
    assert plan.real_scalars == sum(
        torch.view_as_real(p).numel() if p.is_complex() else p.numel() for p in model.parameters()
    )


def test_planner_matches_meta_device_model_at_paper_scale():
    with torch.device("meta"):
        model = FNO(3, 1, 1, modes=24, width=64, layers=4)
    plan = plan_fno(3, 24, 64, 4)
    assert plan.spectral_params == 905_969_664  # the paper's "906M"
    assert plan.total_params == sum(p.numel() for p in model.parameters())
    assert plan_fno(3, 3, 64, 4).spectral_params == 1_769_472  # the paper's "1.7M"


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("padding", [0, 2])
def test_planner_activation_bytes_equal_saved_tensors(dim, padding):
    """The planner's activation memory is exactly what autograd saves for backward."""
    grid, batch = GRIDS[dim], 3
    model = FNO(dim, 1, 1, modes=2, width=4, layers=3, padding=padding, projection_channels=9)
    saved, _ = saved_activation_bytes(model, torch.randn(batch, *grid, 1))
    plan = plan_fno(dim, 2, 4, 3, grid=grid, batch=batch, padding=padding, projection_channels=9)
    assert plan.activations_bytes == saved


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("parametrization", PARAMETRIZATIONS)
def test_forward_shape_and_backward(dim, parametrization):
    model = FNO(dim, 2, 3, modes=2, width=4, layers=2, parametrization=parametrization, padding=1)
    x = torch.randn(2, *GRIDS[dim], 2)
    y = model(x)
    assert y.shape == (2, *GRIDS[dim], 3)
    y.square().mean().backward()
    assert all(
        p.grad is not None and torch.isfinite(torch.view_as_real(p.grad) if p.is_complex() else p.grad).all()
        for p in model.parameters()
    )


def test_same_weights_run_at_other_resolutions():
    """A smooth input sampled at 65, 129 and 257 nodes gives the same output at shared nodes."""
    model = FNO(1, 1, 1, modes=8, width=16, layers=4, parametrization="mup")
    outputs = []
    for n in (65, 129, 257):
        x = torch.linspace(0, 1, n)
        u = (torch.sin(2 * math.pi * x) + 0.5 * torch.cos(4 * math.pi * x)).reshape(1, n, 1)
        outputs.append(model(u)[0, :: (n - 1) // 64, 0].detach())
    for other in outputs[1:]:
        assert torch.allclose(other, outputs[0], rtol=0, atol=2e-3 * outputs[0].abs().max())


def test_spectral_conv_keeps_only_low_modes():
    """A pure high-frequency input is annihilated; a kept mode passes through R."""
    conv = SpectralConv(1, 1, modes=4, dim=1)
    n = 64
    x = torch.arange(n) / n
    high = torch.cos(2 * math.pi * 10 * x).reshape(1, 1, n)
    assert conv(high).abs().max() < 1e-6
    low = torch.cos(2 * math.pi * 3 * x).reshape(1, 1, n)
    r = conv.weights[0][0, 0, 3]
    expected = r.real * torch.cos(2 * math.pi * 3 * x) - r.imag * torch.sin(2 * math.pi * 3 * x)
    assert torch.allclose(conv(low)[0, 0], expected, atol=1e-6)


def test_modes_too_large_for_grid_is_a_clear_error():
    model = FNO(2, 1, 1, modes=9, width=4, layers=1)
    with pytest.raises(OperatorConfigError, match=r"modes 9 too large for grid size 16 on axis 0"):
        model(torch.randn(1, 16, 32, 1))
    with pytest.raises(OperatorConfigError, match=r"last axis"):
        FNO(1, 1, 1, modes=10, width=4, layers=1)(torch.randn(1, 16, 1))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(modes=1, parametrization="mup"), "undefined at K = 1"),
        (dict(modes=4, parametrization="ntk"), "parametrization 'ntk' is unknown"),
        (dict(modes=0), "modes 0"),
        (dict(modes=4, width=-3), "width -3"),
        (dict(modes=4, layers=0), "layers 0"),
        (dict(modes=4, padding=-1), "padding -1"),
    ],
)
def test_bad_configuration_is_a_one_line_error(kwargs, match):
    with pytest.raises(OperatorConfigError, match=match) as info:
        FNO(2, 1, 1, **kwargs)
    assert "\n" not in str(info.value)


def test_wrong_input_rank_is_a_clear_error():
    with pytest.raises(OperatorConfigError, match="expects"):
        FNO(2, 1, 1, modes=2, width=4, layers=1)(torch.randn(4, 16, 1))


@pytest.mark.parametrize("dim", DIMS)
def test_step_flops_match_torch_flop_counter_for_matmuls(dim, monkeypatch):
    """The matmul parts of the estimate equal torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    from operators.planning import step_flops

    # torch.fft transforms (FlopCounterMode counts no FFT flops), so that the matmuls are the
    # contraction, the pointwise and the lift/projection layers; on CPU the default computes the
    # truncated transforms as GEMMs (operators.contraction), which would count here too.
    monkeypatch.setattr("operators.spectral._TRANSFORM", "fft")

    grid, batch, modes, width, layers, proj = GRIDS[dim], 2, 2, 6, 2, 9
    model = FNO(dim, 1, 1, modes=modes, width=width, layers=layers, projection_channels=proj, padding=1)
    x = torch.randn(batch, *grid, 1)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    total = sum(counter.get_flop_counts()["Global"].values())
    # The contraction: one spectral layer's forward and backward (input and weight gradients), × L.
    # It is one real bmm per product (operators.contraction), whose flops torch counts as they are:
    # 8 real flops per complex multiply-add.
    h = torch.randn(batch, width, *(n + 1 for n in grid), requires_grad=True)
    with FlopCounterMode(display=False) as layer_counter:
        model.spectral[0](h).sum().backward()
    spectral = layers * sum(layer_counter.get_flop_counts()["Global"].values())
    estimate = step_flops(dim, modes, width, layers, grid, batch=batch, projection_channels=proj, padding=1)
    assert spectral == pytest.approx(estimate["spectral"], rel=1e-9)
    assert total - spectral == pytest.approx(estimate["pointwise"] + estimate["lift_projection"], rel=0.05)
