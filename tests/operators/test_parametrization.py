"""The abc-parametrization rules: init std, LR multipliers, param groups, clipping."""

import math

import pytest
import torch

from operators import FNO, OperatorConfigError, clip_spectral_gradients, optimizer_param_groups, spectral_parameters
from operators.parametrization import (
    mup_scale,
    spectral_init_multiplier,
    spectral_lr_multiplier,
    transfer_init_variance_factor,
    transfer_lr_factor,
)


def _spectral_std(model):
    values = torch.cat([torch.view_as_real(p.detach()).flatten() for p in spectral_parameters(model)])
    return values.std().item()


def test_mup_scale_is_inverse_sqrt_d_log_k():
    assert mup_scale(8, 3) == pytest.approx(1 / math.sqrt(3 * math.log(8)))
    assert spectral_lr_multiplier(8, 3, "standard") == 1.0
    assert spectral_init_multiplier(8, 3, "standard") == 1.0
    assert spectral_lr_multiplier(8, 3, "mup") == spectral_init_multiplier(8, 3, "mup") == mup_scale(8, 3)


def test_transfer_factors_are_log_ratios():
    assert transfer_lr_factor(6, 24) == pytest.approx(math.sqrt(math.log(6) / math.log(24)))
    assert transfer_init_variance_factor(6, 24) == pytest.approx(math.log(6) / math.log(24))
    assert transfer_lr_factor(5, 5) == 1.0
    with pytest.raises(OperatorConfigError, match="K must be an integer >= 2"):
        transfer_lr_factor(1, 8)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("parametrization", ["standard", "mup"])
def test_init_std_and_lr_ratio_between_two_k(dim, parametrization):
    """Under muP std and LR ratios equal sqrt(log K1 / log K2); under SP both are 1."""
    k1, k2 = {1: (4, 16), 2: (3, 9), 3: (2, 4)}[dim]
    width = {1: 32, 2: 16, 3: 12}[dim]
    m1 = FNO(dim, 1, 1, modes=k1, width=width, layers=2, parametrization=parametrization)
    m2 = FNO(dim, 1, 1, modes=k2, width=width, layers=2, parametrization=parametrization)
    expected = math.sqrt(math.log(k1) / math.log(k2)) if parametrization == "mup" else 1.0
    assert _spectral_std(m2) / _spectral_std(m1) == pytest.approx(expected, rel=0.04)
    lr = 1e-3
    g1 = {g["name"]: g["lr"] for g in optimizer_param_groups(m1, lr)}
    g2 = {g["name"]: g["lr"] for g in optimizer_param_groups(m2, lr)}
    assert g2["spectral"] / g1["spectral"] == pytest.approx(expected, rel=1e-12)
    assert g1["other"] == g2["other"] == lr


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_mup_init_std_is_absolute_rule(dim):
    width, k = 16, 4
    model = FNO(dim, 1, 1, modes=k, width=width, layers=2, parametrization="mup", init_scale=2.0)
    assert _spectral_std(model) == pytest.approx(2.0 / width / math.sqrt(dim * math.log(k)), rel=0.05)


def test_non_spectral_parameters_identical_across_parametrizations_and_k():
    models = []
    for parametrization, k in (("standard", 4), ("mup", 4), ("mup", 7)):
        torch.manual_seed(123)
        models.append(FNO(2, 1, 1, modes=k, width=8, layers=3, parametrization=parametrization))
    spectral_names = [{n for n, p in m.named_parameters() if p.is_complex()} for m in models]
    reference = {n: p for n, p in models[0].named_parameters() if n not in spectral_names[0]}
    for model, names in zip(models[1:], spectral_names[1:]):
        others = {n: p for n, p in model.named_parameters() if n not in names}
        assert others.keys() == reference.keys()
        assert all(torch.equal(others[n], reference[n]) for n in reference)


def test_param_groups_cover_every_parameter_once():
    model = FNO(2, 1, 1, modes=4, width=8, layers=2, parametrization="mup")
    groups = optimizer_param_groups(model, 1e-3, weight_decay=1e-4)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    spectral = next(g for g in groups if g["name"] == "spectral")
    assert {id(p) for p in spectral["params"]} == {id(p) for p in spectral_parameters(model)}
    assert all(g["weight_decay"] == 1e-4 for g in groups)
    torch.optim.Adam(groups)  # accepted as-is by Adam


def test_clipping_bounds_spectral_gradients_and_touches_nothing_else():
    model = FNO(2, 1, 1, modes=4, width=8, layers=2, parametrization="mup")
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 10
    before = {n: p.grad.clone() for n, p in model.named_parameters()}
    clip_spectral_gradients(model, 0.01)
    for name, p in model.named_parameters():
        if p.is_complex():
            grad = torch.view_as_real(p.grad)
            assert grad.abs().max() <= 0.01
            # entries already inside the bound are unchanged
            original = torch.view_as_real(before[name])
            inside = original.abs() <= 0.01
            assert torch.equal(grad[inside], original[inside])
        else:
            assert torch.equal(p.grad, before[name])


def test_clipping_off_when_unset_and_rejects_non_positive():
    model = FNO(1, 1, 1, modes=4, width=4, layers=1)
    for p in model.parameters():
        p.grad = torch.full_like(p, 5.0)
    clip_spectral_gradients(model, None)
    assert all(torch.equal(p.grad, torch.full_like(p, 5.0)) for p in model.parameters())
    with pytest.raises(OperatorConfigError, match="clip_value"):
        clip_spectral_gradients(model, 0.0)


def test_checkpoint_round_trip_keeps_mup_metadata():
    """The muP LR multiplier is recomputed from the config, so a reloaded model keeps it."""
    model = FNO(3, 1, 1, modes=5, width=4, layers=1, parametrization="mup")
    clone = FNO(**model.config)
    clone.load_state_dict(model.state_dict())
    assert [g["lr"] for g in optimizer_param_groups(clone, 1.0)] == [
        g["lr"] for g in optimizer_param_groups(model, 1.0)
    ]
