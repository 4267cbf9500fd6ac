"""Width-muP (Tensor Programs V, Adam): the pure rules, and LR / init ratios measured on all four operators."""

import math

import pytest
import torch
from torch import nn

from operators import FNO, GNOT, ONO, GalerkinTransformer, OperatorConfigError, optimizer_param_groups, width_roles
from operators.parametrization import spectral_lr_multiplier
from operators.width_mup import (
    MuLinear,
    WidthSpec,
    attention_scale,
    forward_multiplier,
    hidden_lr_multiplier,
    init_std,
    input_lr_multiplier,
    lr_multiplier,
    output_lr_multiplier,
    output_multiplier,
    relative_attention_scale,
    spectral_width_init_std,
    spectral_width_lr_multiplier,
)
from tests.operator_helpers import lr_by_parameter

BASE, M1, M2 = 16, 32, 128
LR = 1e-3


def build(kind, width, width_parametrization="mup", base_width=BASE):
    kw = dict(width=width, width_parametrization=width_parametrization, base_width=base_width)
    if kind == "fno":
        return FNO(2, 1, 1, modes=4, layers=2, parametrization="mup", projection_channels=24, **kw)
    if kind == "galerkin":
        return GalerkinTransformer(2, 1, 1, layers=2, heads=2, **kw)
    if kind == "ono":
        return ONO(2, 1, 1, layers=2, heads=2, eigenfunctions=4, **kw)
    return GNOT(2, 1, 1, theta_dim=2, layers=1, heads=2, experts=2, **kw)


def forward(kind, model, seed=0):
    g = torch.Generator().manual_seed(seed)
    if kind == "fno":
        return model(torch.randn(2, 12, 12, 1, generator=g))
    coords, features = torch.rand(2, 20, 2, generator=g), torch.randn(2, 20, 1, generator=g)
    if kind == "gnot":
        return model(coords, features, theta=torch.rand(2, 2, generator=g))
    return model(coords, features)


KINDS = ["fno", "galerkin", "ono", "gnot"]
PARAMS = ["standard", "mup"]


# --------------------------------------------------------------------------- pure rules


def test_lr_and_output_multipliers():
    assert hidden_lr_multiplier(64, 16) == 0.25
    assert output_multiplier(64, 16) == 0.25
    assert input_lr_multiplier(64, 16) == output_lr_multiplier(64, 16) == 1.0
    assert hidden_lr_multiplier(16, 16) == output_multiplier(16, 16) == 1.0
    for role, lr, mult in (("input", 1.0, 1.0), ("hidden", 0.25, 1.0), ("output", 1.0, 0.25), ("fixed", 1.0, 1.0)):
        assert lr_multiplier(role, 64, 16, "mup") == lr
        assert forward_multiplier(role, 64, 16, "mup") == mult
        assert lr_multiplier(role, 64, 16, "standard") == forward_multiplier(role, 64, 16, "standard") == 1.0


def test_attention_scale_is_inverse_d_under_mup():
    assert attention_scale(64, "standard") == pytest.approx(1 / 8)
    assert attention_scale(64, "mup") == pytest.approx(1 / 64)
    assert attention_scale(64, "mup", base_head_dim=16) == pytest.approx(4 / 64)
    assert attention_scale(16, "mup", base_head_dim=16) == pytest.approx(attention_scale(16, "standard"))
    assert relative_attention_scale(64, 16, "mup") == pytest.approx(0.5)
    assert relative_attention_scale(64, 16, "standard") == 1.0
    # the ratio of two widths' logit scales is d1/d2 under muP, √(d1/d2) under SP
    assert attention_scale(64, "mup", 8) / attention_scale(16, "mup", 8) == pytest.approx(16 / 64)


def test_init_std_is_inverse_sqrt_fan_in():
    assert init_std(48) == pytest.approx(1 / math.sqrt(3 * 48))
    assert init_std(12) / init_std(48) == pytest.approx(2.0)
    layer = MuLinear(400, 300, "hidden", WidthSpec("mup", 400, 100))
    assert layer.weight.std().item() == pytest.approx(init_std(400), rel=0.02)


@pytest.mark.parametrize("k_parametrization", ["standard", "mup"])
def test_spectral_rules_compose_with_k_mup(k_parametrization):
    c = spectral_lr_multiplier(6, 2, k_parametrization)
    assert spectral_width_lr_multiplier(64, 16, 6, 2, k_parametrization) == pytest.approx(c * 16 / 64)
    ratio = spectral_width_init_std(256, 16, 6, 2, k_parametrization) / spectral_width_init_std(
        64, 16, 6, 2, k_parametrization
    )
    assert ratio == pytest.approx(0.5)


def test_rule_errors_are_one_line():
    for call, match in (
        (lambda: WidthSpec("mup", 32, None), "base_width None"),
        (lambda: WidthSpec("mu-p", 32, 8), "width_parametrization 'mu-p' is unknown"),
        (lambda: hidden_lr_multiplier(0, 8), "width 0"),
        (lambda: lr_multiplier("readout", 8, 8, "mup"), "role 'readout' is unknown"),
        (lambda: attention_scale(0, "mup"), "head_dim 0"),
        (lambda: FNO(1, 1, 1, modes=4, width=8, width_parametrization="mup"), "base_width None"),
    ):
        with pytest.raises(OperatorConfigError, match=match) as err:
            call()
        assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- measured on the operators


def _module_of(model, name):
    return model.get_submodule(name.rsplit(".", 1)[0])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("width_parametrization", PARAMS)
def test_lr_ratios_between_two_widths_follow_the_rule(kind, width_parametrization):
    m1, m2 = build(kind, M1, width_parametrization), build(kind, M2, width_parametrization)
    lr1 = lr_by_parameter(m1, optimizer_param_groups(m1, LR))
    lr2 = lr_by_parameter(m2, optimizer_param_groups(m2, LR))
    roles = width_roles(m1)
    assert lr1.keys() == lr2.keys() == roles.keys()
    assert {"input", "hidden", "output", "other"} <= set(roles.values())
    mup = width_parametrization == "mup"
    for name, role in roles.items():
        expected = M1 / M2 if (mup and role == "hidden") else 1.0
        assert lr2[name] / lr1[name] == pytest.approx(expected, rel=1e-12), name
        spectral = ".spectral." in f".{name}"
        c = spectral_lr_multiplier(4, 2, "mup") if spectral else 1.0
        absolute = c * (BASE / M2 if (mup and role == "hidden") else 1.0)
        assert lr2[name] == pytest.approx(LR * absolute, rel=1e-12), name


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("width_parametrization", PARAMS)
def test_init_std_ratios_between_two_widths_follow_the_rule(kind, width_parametrization):
    torch.manual_seed(0)
    m1 = build(kind, M1, width_parametrization)
    m2 = build(kind, M2, width_parametrization)
    p1, p2 = dict(m1.named_parameters()), dict(m2.named_parameters())
    mup = width_parametrization == "mup"
    checked = set()
    for name, role in width_roles(m1).items():
        w1, w2 = p1[name].detach(), p2[name].detach()
        if role not in ("input", "hidden", "output") or w1.dim() < 2:
            continue
        if w1.is_complex():  # FNO spectral weights: √(m1/m2) under width-muP, K-muP's 1/m_in rule otherwise
            expected = math.sqrt(M1 / M2) if mup else M1 / M2
            w1, w2 = torch.view_as_real(w1), torch.view_as_real(w2)
        else:
            fan_in1, fan_in2 = w1[0].numel(), w2[0].numel()
            expected = math.sqrt(fan_in1 / fan_in2)
            if role == "output":  # effective readout weight = multiplier × W
                mult1, mult2 = _module_of(m1, name).multiplier, _module_of(m2, name).multiplier
                assert (mult1, mult2) == ((BASE / M1, BASE / M2) if mup else (1.0, 1.0))
                expected *= mult2 / mult1
        ratio = (w2.std() / w1.std()).item() * (
            (_module_of(m2, name).multiplier / _module_of(m1, name).multiplier) if role == "output" else 1.0
        )
        tolerance = max(0.03, 3.0 / math.sqrt(min(w1.numel(), w2.numel())))
        assert ratio == pytest.approx(expected, rel=tolerance), name
        checked.add(role)
    assert checked == {"input", "hidden", "output"}


@pytest.mark.parametrize("kind", KINDS)
def test_non_width_parameters_are_untouched(kind):
    """Same seed, same width: muP changes no init except FNO's spectral draw, and non-width parameters keep lr."""
    torch.manual_seed(5)
    standard = build(kind, M1, "standard", None)
    torch.manual_seed(5)
    mup = build(kind, M1, "mup")
    roles = width_roles(mup)
    lr_sp = lr_by_parameter(standard, optimizer_param_groups(standard, LR))
    lr_mup = lr_by_parameter(mup, optimizer_param_groups(mup, LR))
    sp_params = dict(standard.named_parameters())
    for name, p in mup.named_parameters():
        if not (kind == "fno" and ".spectral." in f".{name}"):
            assert torch.equal(p, sp_params[name]), name
        if roles[name] in ("other", "input", "output", "fixed"):
            assert lr_mup[name] == lr_sp[name], name
    others = [n for n, r in roles.items() if r == "other"]
    assert others and all(n.endswith("bias") or "norm" in n or n.endswith(".mu") for n in others)
    assert all(lr_mup[n] == LR for n in others)


@pytest.mark.parametrize("kind", KINDS)
def test_mup_at_the_base_width_is_the_standard_model(kind):
    torch.manual_seed(2)
    standard = build(kind, BASE, "standard", None)
    torch.manual_seed(2)
    mup = build(kind, BASE, "mup")
    standard.train(False), mup.train(False)
    torch.testing.assert_close(forward(kind, mup), forward(kind, standard), rtol=1e-6, atol=1e-7)
    sp_lr = lr_by_parameter(standard, optimizer_param_groups(standard, LR))
    assert lr_by_parameter(mup, optimizer_param_groups(mup, LR)) == pytest.approx(sp_lr, rel=1e-12)


@pytest.mark.parametrize("kind", ["galerkin", "ono", "gnot"])
def test_readout_is_scaled_by_base_over_width(kind):
    """Same weights: the muP model's readout multiplies W·x by m0/m (bias zeroed to compare)."""
    torch.manual_seed(1)
    standard = build(kind, M1, "standard", None)
    mup = build(kind, M1, "mup")
    mup.load_state_dict(standard.state_dict())
    readouts = [n for n, m in mup.named_modules() if isinstance(m, MuLinear) and m.role == "output"]
    assert readouts and all(mup.get_submodule(n).multiplier == BASE / M1 for n in readouts)
    last = {"galerkin": "decoder.fc2", "ono": "blocks.1.out_ffn.fc2", "gnot": "decoder.fc2"}[kind]
    sp_layer, mup_layer = standard.get_submodule(last), mup.get_submodule(last)
    x = torch.randn(3, mup_layer.in_features)
    torch.testing.assert_close(mup_layer(x) - mup_layer.bias, (sp_layer(x) - sp_layer.bias) * BASE / M1)


def test_fno_standard_width_rule_keeps_k_mup_groups_exactly():
    torch.manual_seed(4)
    default = FNO(2, 1, 1, modes=5, width=12, layers=2, parametrization="mup")
    torch.manual_seed(4)
    explicit = FNO(
        2, 1, 1, modes=5, width=12, layers=2, parametrization="mup", width_parametrization="standard", base_width=6
    )
    assert [g["name"] for g in optimizer_param_groups(default, LR)] == ["spectral", "other"]
    for a, b in zip(optimizer_param_groups(default, LR), optimizer_param_groups(explicit, LR)):
        assert (a["name"], a["lr"], a["lr_multiplier"]) == (b["name"], b["lr"], b["lr_multiplier"])
        assert all(torch.equal(p, q) for p, q in zip(a["params"], b["params"]))
    old_config = {k: v for k, v in default.config.items() if k not in ("width_parametrization", "base_width")}
    assert FNO(**old_config).config == default.config  # checkpoints written before width-muP still load


def test_fno_width_mup_groups():
    model = FNO(2, 1, 1, modes=5, width=64, layers=2, parametrization="mup", width_parametrization="mup", base_width=16)
    groups = {g["name"]: g for g in optimizer_param_groups(model, LR)}
    assert set(groups) == {"spectral", "hidden", "other"}
    assert groups["spectral"]["lr_multiplier"] == pytest.approx(spectral_lr_multiplier(5, 2, "mup") * 16 / 64)
    assert groups["hidden"]["lr_multiplier"] == 0.25
    assert {id(p) for p in groups["hidden"]["params"]} == {id(c.weight) for c in model.pointwise}
    assert model.project[0].multiplier == 0.25
    std = torch.view_as_real(model.spectral[0].weights[0].detach()).std().item()
    assert std == pytest.approx(spectral_width_init_std(64, 16, 5, 2, "mup"), rel=0.05)


# --------------------------------------------------------------------------- the optimizer protocol


class _Declaring(nn.Module):
    def __init__(self, conflicting=False):
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)
        self.conflicting = conflicting

    def mutransfer_lr_multipliers(self):
        yield self.a.weight, "hidden", 0.5
        yield self.b.weight, "head", 2.0
        if self.conflicting:
            yield self.a.weight, "hidden", 0.25


def test_param_groups_honour_declared_multipliers():
    model = nn.Sequential(_Declaring(), nn.LayerNorm(2))
    groups = optimizer_param_groups(model, 0.1, weight_decay=0.01)
    by_name = {g["name"]: g for g in groups}
    assert [g["name"] for g in groups] == ["hidden", "head", "other"]
    assert by_name["hidden"]["lr"] == pytest.approx(0.05) and by_name["head"]["lr"] == pytest.approx(0.2)
    assert by_name["other"]["lr"] == 0.1 and by_name["other"]["lr_multiplier"] == 1.0
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    torch.optim.Adam(groups)
    with pytest.raises(OperatorConfigError, match="declare it once"):
        optimizer_param_groups(_Declaring(conflicting=True), 0.1)


def test_trainer_base_lr_still_reads_the_multiplier_one_group():
    from mutransfer._training.trainer import _base_lr

    model = build("galerkin", M1)
    optimizer = torch.optim.Adam(optimizer_param_groups(model, LR))
    assert _base_lr(optimizer) == LR
