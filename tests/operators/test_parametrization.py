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


# ---- the K rule's exponent (beyond the paper: operators.parametrization.data_aware_scale)


def test_the_k_rules_exponent_one_is_the_paper_zero_is_no_correction_two_is_its_square():
    from operators.parametrization import data_aware_scale

    for k, d in ((2, 1), (6, 2), (24, 3)):
        assert data_aware_scale(k, d, 1.0) == pytest.approx(mup_scale(k, d))
        assert data_aware_scale(k, d, 0.0) == 1.0
        assert data_aware_scale(k, d, 2.0) == pytest.approx(mup_scale(k, d) ** 2)
        assert spectral_lr_multiplier(k, d, "mup", 0.5) == spectral_init_multiplier(k, d, "mup", 0.5)
        assert spectral_lr_multiplier(k, d, "standard", 0.5) == 1.0


@pytest.mark.parametrize("bad", [-0.1, 8.5, float("nan"), float("inf"), "1", True])
def test_a_k_exponent_out_of_range_or_not_a_number_is_refused_in_one_line(bad):
    with pytest.raises(OperatorConfigError, match=r"^k_exponent .*(must be a number|must be in \[0, 8\])"):
        FNO(1, 1, 1, modes=6, width=8, layers=1, parametrization="mup", k_exponent=bad)


def test_an_fno_built_with_a_k_exponent_scales_its_spectral_init_and_lr_by_it():
    """ρ = 0.5 at K = 24 in 1D: every spectral LR multiplier and the spectral init std are (log 24)^(-1/4), not
    the paper's (log 24)^(-1/2); the exponent is in the model's config, so a rebuilt model is the same."""
    torch.manual_seed(0)
    paper = FNO(1, 1, 1, modes=24, width=32, layers=2, parametrization="mup")
    torch.manual_seed(0)
    half = FNO(1, 1, 1, modes=24, width=32, layers=2, parametrization="mup", k_exponent=0.5)
    assert [m.lr_multiplier for m in half.spectral] == pytest.approx([math.log(24) ** -0.25] * 2)
    assert [m.lr_multiplier for m in paper.spectral] == pytest.approx([math.log(24) ** -0.5] * 2)
    assert _spectral_std(half) / _spectral_std(paper) == pytest.approx(math.log(24) ** 0.25, rel=1e-5)
    assert half.config["k_exponent"] == 0.5 and FNO(**half.config).spectral[0].k_exponent == 0.5
    groups = {g["name"]: g["lr"] for g in optimizer_param_groups(half, 1e-3) if g["name"].startswith("spectral")}
    assert list(groups.values()) == [pytest.approx(1e-3 * math.log(24) ** -0.25)]


def test_width_mup_composes_with_the_k_exponent():
    from operators.width_mup import spectral_width_init_std, spectral_width_lr_multiplier

    lr = spectral_width_lr_multiplier(64, 32, 12, 2, "mup", 0.0)
    assert lr == pytest.approx(0.5)  # no K correction, m0/m = 1/2
    ratio = spectral_width_init_std(64, 32, 12, 2, "mup", 1.0, 2.0) / spectral_width_init_std(64, 32, 12, 2, "mup")
    assert ratio == pytest.approx(mup_scale(12, 2))


def test_the_transfer_record_applies_the_k_exponent():
    """The transfer table's spectral LR factor is (log Kp / log Kt)^(ρ/2): ρ = 0 copies it, ρ = 2 squares the
    paper's factor, and its rule text names ρ."""
    from operators.transfer import Scaling, transfer

    paper = transfer_lr_factor(6, 24)
    for rho, factor in ((1.0, paper), (0.0, 1.0), (2.0, paper**2)):
        rec = transfer(Scaling(1, 6, 24, k_exponent=rho), 1e-3, init_scale=1.0)
        rows = {q.name: q for q in rec.quantities}
        assert rows["spectral_lr"].factor == pytest.approx(factor)
        assert rows["spectral_init_std"].factor == pytest.approx(factor)
        assert ("rho = " in rows["spectral_lr"].rule) == (rho != 1.0)
