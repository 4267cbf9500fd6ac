"""muP facts on the parameters (mutransfer.mup, operators.base_shapes): roles read from two instances, the
init rescaled, Adam's LRs set by the rules, and a one-line refusal wherever the shapes cannot tell."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mutransfer import mup
from operators import FNO, GNOT, ONO, GalerkinTransformer
from operators.errors import OperatorConfigError
from operators.parametrization import optimizer_param_groups
from operators.width_mup import MuLinear, width_roles


class PairSpectral(nn.Module):
    """A user's 1-D spectral layer storing its weight as real (re, im) pairs: (in, out, K, 2)."""

    def __init__(self, width: int, modes: int):
        super().__init__()
        self.modes = modes
        self.weight = nn.Parameter(torch.randn(width, width, modes, 2) / width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, width, N)
        z = torch.fft.rfft(x, dim=-1)[..., : self.modes]
        out = torch.einsum("bik,iok->bok", z, torch.view_as_complex(self.weight))
        return torch.fft.irfft(out, n=x.shape[-1], dim=-1)


class UserOperator(nn.Module):
    """A user's own 1-D operator: lift, spectral layer with a pointwise skip, readout; channel-first."""

    def __init__(self, K: int, width: int, extra: bool = False):
        super().__init__()
        self.lift = nn.Conv1d(1, width, 1)
        self.spectral = PairSpectral(width, K)
        self.skip = nn.Conv1d(width, width, 1)
        self.readout = nn.Conv1d(width, 1, 1)
        if extra:  # a plain (width, 3) matrix: input or readout? The shapes cannot tell.
            self.mix = nn.Parameter(torch.randn(width, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lift(x)
        h = torch.relu(self.spectral(h) + self.skip(h))
        return self.readout(h)


def _fno(K: int, width: int) -> FNO:
    return FNO(dim=2, in_channels=1, out_channels=1, modes=K, width=width, layers=2)


def _roles(model: nn.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, p in model.named_parameters():
        fact = mup.shape_of(p)
        assert fact is not None, name
        found[name] = fact.role
    return found


def _lrs(opt: torch.optim.Optimizer, model: nn.Module) -> dict[str, float]:
    by_id = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    return {name: by_id[id(p)] for name, p in model.named_parameters()}


def test_a_user_operator_with_re_im_pairs_gets_its_roles_from_two_instances():
    model, base = UserOperator(K=24, width=64), UserOperator(K=6, width=16)
    mup.set_base_shapes(model, base)
    roles = _roles(model)
    assert roles == {
        "lift.weight": "input",
        "lift.bias": "vector",
        "spectral.weight": "spectral",
        "skip.weight": "hidden",
        "skip.bias": "vector",
        "readout.weight": "readout",
        "readout.bias": "fixed",
    }
    fact = mup.shape_of(model.spectral.weight)
    assert fact is not None
    assert (fact.k_dims, fact.width_dims, fact.modes, fact.base_modes) == ((2,), (0, 1), 24, 6)
    text = mup.describe(model)
    assert len(text.splitlines()) == 1 + len(roles)
    assert "spectral" in text and "24/6" in text


def test_the_spectral_and_hidden_lrs_transfer_by_the_papers_rules():
    """Done-when of issue 34: the target's spectral LR is the proxy's x sqrt(log K_p / log K_t) (x width_p/width_t
    for its width), the hidden LR x width_p/width_t, read from the optimizer; at the base's sizes every LR is lr."""
    proxy, target = UserOperator(K=6, width=16), UserOperator(K=24, width=64)
    mup.set_base_shapes(target, UserOperator(K=6, width=16))
    mup.set_base_shapes(proxy, UserOperator(K=6, width=16))
    lr = 3e-3
    p_lrs, t_lrs = _lrs(mup.Adam(proxy.parameters(), lr=lr), proxy), _lrs(mup.Adam(target.parameters(), lr=lr), target)
    assert set(p_lrs.values()) == {lr}
    k_rule = math.sqrt(math.log(6) / math.log(24))
    assert t_lrs["spectral.weight"] == pytest.approx(p_lrs["spectral.weight"] * k_rule * 16 / 64, rel=1e-12)
    assert t_lrs["skip.weight"] == pytest.approx(p_lrs["skip.weight"] * 16 / 64, rel=1e-12)
    assert t_lrs["readout.weight"] == pytest.approx(lr * 16 / 64, rel=1e-12)
    for name in ("lift.weight", "lift.bias", "skip.bias", "readout.bias"):
        assert t_lrs[name] == p_lrs[name] == lr
    # the rule reaches K_t: with rho = 2 the spectral LR moves by (log K_p / log K_t) instead
    again = UserOperator(K=24, width=64)
    mup.set_base_shapes(again, UserOperator(K=6, width=16), k_exponent=2.0)
    assert _lrs(mup.Adam(again.parameters(), lr=lr), again)["spectral.weight"] == pytest.approx(
        lr * k_rule**2 * 16 / 64, rel=1e-12
    )


def test_the_init_is_rescaled_from_the_base_by_the_rules_and_nothing_else_moves():
    torch.manual_seed(0)
    model, base = UserOperator(K=24, width=64), UserOperator(K=6, width=16)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    mup.set_base_shapes(model, base)
    rms = lambda t: float(t.detach().pow(2).mean().sqrt())  # noqa: E731
    want = rms(base.spectral.weight) * math.sqrt(math.log(6) / math.log(24)) * math.sqrt(16 / 64)
    assert rms(model.spectral.weight) == pytest.approx(want, rel=1e-6)
    assert torch.equal(model.readout.weight, before["readout.weight"] * 0.5)  # sqrt(m0/m)
    for name in ("lift.weight", "skip.weight", "skip.bias", "readout.bias"):
        assert torch.equal(dict(model.named_parameters())[name], before[name])
    # at the base's own sizes, muP is the author's init
    again = UserOperator(K=6, width=16)
    kept = {n: p.detach().clone() for n, p in again.named_parameters()}
    mup.set_base_shapes(again, base)
    for name, p in again.named_parameters():
        assert torch.equal(p, kept[name]), name


def test_muadam_keeps_a_hidden_coordinate_update_width_free_and_plain_adam_does_not():
    """The width rule checked where it acts: after one Adam step, the change of the skip layer's output per
    coordinate stays put from width 64 to 1024 under mup.Adam and grows about 16x under torch's Adam."""

    def update(width: int, optimizer: str) -> float:
        torch.manual_seed(1)
        model, base = UserOperator(K=6, width=width), UserOperator(K=6, width=64)
        mup.set_base_shapes(model, base)
        x, y = torch.randn(8, 1, 32), torch.randn(8, 1, 32)
        h = model.lift(x).detach()
        before = model.skip(h).detach()
        opt = (
            mup.Adam(model.parameters(), lr=1e-2) if optimizer == "mup" else torch.optim.Adam(model.parameters(), 1e-2)
        )
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        return float((model.skip(h).detach() - before).pow(2).mean().sqrt())

    mu = update(1024, "mup") / update(64, "mup")
    sp = update(1024, "sp") / update(64, "sp")
    assert 0.5 < mu < 2.0, mu
    assert sp > 8.0, sp  # the check fails without the facts


@pytest.mark.parametrize("cls", [GalerkinTransformer, ONO, GNOT])
def test_the_attention_operators_roles_agree_with_their_own_width_mup(cls):
    """Read from the shapes alone (the MuLinear layers' own declarations removed, so the comparison is not of a
    declaration with itself), the roles are the operators' own width-muP roles. One known difference: ONO's
    ``orthogonal.proj`` (width -> eigenfunctions) reads as a readout, which its layer declares hidden: the same LR
    m0/m (docs/operators.md, the whitening divides the readout's multiplier out)."""
    kw = {"coord_dim": 2, "in_channels": 1, "out_channels": 1}
    model, base = cls(width=64, **kw), cls(width=16, **kw)
    for module in (*model.modules(), *base.modules()):
        if isinstance(module, MuLinear):
            del module.weight.mutransfer_declared
    facts = mup.infer_shapes(model, base)
    declared = width_roles(cls(width=64, width_parametrization="mup", base_width=16, **kw))
    same = {"input": {"input"}, "hidden": {"hidden"}, "output": {"readout"}, "fixed": {"fixed"}}
    for name, fact in facts.items():
        allowed = same.get(declared[name], {"vector", "fixed"})
        if name.endswith("orthogonal.proj.weight"):
            allowed = {"hidden", "readout"}
            assert fact.lr_multiplier == 16 / 64
        assert fact.role in allowed, (name, fact.role, declared[name])


def test_the_fnos_facts_move_its_lrs_as_its_own_mup_does():
    """One mechanism: the FNO built in SP, with the facts on its parameters, moves its spectral and hidden LRs from
    the base to the target as its own muP layers do (its readout takes Table 3's LR/init form instead of a forward
    multiplier, and its multipliers are relative to the base where the FNO's c(K) is absolute)."""
    model, base = _fno(24, 64), _fno(6, 16)
    mup.set_base_shapes(model, base)
    ours = _lrs(mup.Adam(model.parameters(), lr=1.0), model)

    def native(K: int, width: int) -> dict[str, float]:
        fno = FNO(
            dim=2,
            in_channels=1,
            out_channels=1,
            modes=K,
            width=width,
            layers=2,
            parametrization="mup",
            width_parametrization="mup",
            base_width=16,
        )
        by_id = {id(p): float(g["lr"]) for g in optimizer_param_groups(fno, lr=1.0) for p in g["params"]}  # type: ignore[attr-defined]
        return {name: by_id[id(p)] for name, p in fno.named_parameters()}

    at_target, at_base = native(24, 64), native(6, 16)
    checked = [n for n in ours if n.startswith(("spectral.", "pointwise.")) and not n.endswith("bias")]
    assert len(checked) == 2 * 2 + 2
    for name in checked:
        assert ours[name] == pytest.approx(at_target[name] / at_base[name], rel=1e-12), name
    assert _roles(model)["project.0.weight"] == "readout"


def test_a_k_only_transfer_touches_only_the_spectral_weights():
    model, base = _fno(24, 32), _fno(6, 32)
    mup.set_base_shapes(model, base)
    assert {r for n, r in _roles(model).items() if n.startswith("spectral.")} == {"spectral"}
    for name, p in model.named_parameters():
        fact = mup.shape_of(p)
        assert fact is not None
        moved = (fact.lr_multiplier, fact.init_multiplier) != (1.0, 1.0)
        assert moved == name.startswith("spectral."), name


def test_ambiguous_sizes_are_refused_and_delta_settles_them():
    """K 16 -> 64 with width 16 -> 64: the spectral weight's mode dim grows by the width's sizes."""
    model, base = UserOperator(K=64, width=64), UserOperator(K=16, width=16)
    with pytest.raises(OperatorConfigError) as err:
        mup.set_base_shapes(model, base)
    message = str(err.value)
    assert "\n" not in message and "'spectral.weight'" in message and "delta=" in message
    mup.set_base_shapes(model, base, delta=UserOperator(K=16, width=64))
    fact = mup.shape_of(model.spectral.weight)
    assert fact is not None and (fact.role, fact.k_dims, fact.width_dims) == ("spectral", (2,), (0, 1))


def test_a_plain_matrix_growing_in_one_dim_is_named_and_declare_settles_it():
    model, base = UserOperator(K=24, width=64, extra=True), UserOperator(K=6, width=16, extra=True)
    with pytest.raises(OperatorConfigError, match=r"'mix' \(64, 3\).*input or readout\?.*mup\.declare"):
        mup.set_base_shapes(model, base)
    mup.declare(model.mix, role="input")
    mup.set_base_shapes(model, base)
    assert _roles(model)["mix"] == "input"


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda m, b: mup.Adam(UserOperator(6, 16).parameters()), "call mup.set_base_shapes(model, base)"),
        (lambda m, b: mup.Adam(m), "pass model.parameters()"),
        (lambda m, b: mup.set_base_shapes(m, nn.Linear(2, 2)), "the base has no parameter"),
        (
            lambda m, b: mup.set_base_shapes(m, UserOperator(6, 16, extra=True)),
            "the base has parameters the model lacks",
        ),
        (lambda m, b: mup.set_base_shapes(m, b), "already has its muP facts"),
        (
            lambda m, b: mup.set_base_shapes(
                FNO(dim=1, in_channels=1, out_channels=1, modes=8, width=32, parametrization="mup"), _fno(4, 16)
            ),
            "applies muP itself",
        ),
        (lambda m, b: mup.declare(m.lift.weight, role="output"), "role 'output' is unknown"),
        (lambda m, b: mup.declare(m.lift.weight, role="hidden", k_dims=(0,)), "only a spectral one has them"),
        (lambda m, b: mup.declare(m.lift.weight, role="hidden", width_dims=(5,)), "use distinct dims in 0..2"),
        (lambda m, b: mup.declare(m.spectral.weight, role="spectral", k_dims=(2,), modes=1), "modes 1"),
        (lambda m, b: mup.set_base_shapes(m, b, k_exponent=-1), "k_exponent -1"),
    ],
)
def test_misuse_is_one_line_naming_the_fix(call, needle):
    model, base = UserOperator(K=24, width=64), UserOperator(K=6, width=16)
    if needle == "already has its muP facts":
        mup.set_base_shapes(model, base)
    with pytest.raises(OperatorConfigError) as err:
        call(model, base)
    assert needle in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------- neuraloperator 2.x


def _neuralop(name: str, K: int, width: int, **kw: object) -> nn.Module:
    models = pytest.importorskip("neuralop.models")
    return getattr(models, name)(
        n_modes=(2 * K, 2 * K), in_channels=1, out_channels=1, hidden_channels=width, n_layers=2, **kw
    )


@pytest.mark.parametrize(("K", "width", "base_K", "base_width"), [(24, 64, 6, 16), (8, 32, 4, 16)])
def test_neuraloperators_fno_gets_its_roles_and_k_from_its_own_layout(K, width, base_K, base_width):
    """n_modes = 2K: full dims hold 2K entries, the half-spectrum dim K + 1. In the second case the full dim grows
    8 -> 16, the sizes of the channel MLP's width/2 layer: the layout (in, out, modes...) still reads it as K's."""
    model, base = _neuralop("FNO", K, width), _neuralop("FNO", base_K, base_width)
    mup.set_base_shapes(model, base)
    roles = _roles(model)
    assert roles["fno_blocks.convs.0.weight.tensor"] == "spectral"
    assert roles["fno_blocks.fno_skips.0.conv.weight"] == "hidden"
    assert roles["lifting.fcs.0.weight"] == "input"
    assert roles["projection.fcs.1.weight"] == "readout"
    assert roles["fno_blocks.convs.0.bias"] == "vector"
    fact = mup.shape_of(dict(model.named_parameters())["fno_blocks.convs.0.weight.tensor"])
    assert fact is not None and (fact.modes, fact.base_modes, fact.k_dims, fact.width_dims) == (
        K,
        base_K,
        (2, 3),
        (0, 1),
    )
    # and it trains a step with the facts' optimizer
    opt = mup.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(2, 1, 64, 64)
    model(x).pow(2).mean().backward()
    opt.step()


@pytest.mark.parametrize("factorization", ["tucker", "cp"])
def test_a_factorized_tfno_is_refused_in_one_line_naming_a_factor(factorization):
    model = _neuralop("TFNO", 24, 64, factorization=factorization, rank=0.5)
    base = _neuralop("TFNO", 6, 16, factorization=factorization, rank=0.5)
    with pytest.raises(OperatorConfigError) as err:
        mup.set_base_shapes(model, base)
    message = str(err.value)
    assert "\n" not in message and "fno_blocks.convs.0.weight." in message and "factorization=None" in message


@pytest.mark.parametrize(("factory", "grid"), [("fno1d", (16,)), ("fno2d", (16, 16)), ("tfno2d", (16, 16))])
def test_the_shipped_neuraloperator_factories_declare_k_and_train_a_step(factory, grid):
    """mutransfer.neuralop: n_modes = 2K; the 1-D weight holds K + 1 entries, so the factory states K on it."""
    pytest.importorskip("neuralop")
    from mutransfer import neuralop

    build = getattr(neuralop, factory)
    model = build(K=12, width=32, in_channels=1, out_channels=1, layers=2)
    mup.set_base_shapes(model, build(K=4, width=8, in_channels=1, out_channels=1, layers=2))
    spectral = [f for p in model.parameters() if (f := mup.shape_of(p)) is not None and f.role == "spectral"]
    assert len(spectral) == 2 and all((f.modes, f.base_modes, f.declared) == (12, 4, True) for f in spectral)
    opt = mup.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, *grid, 1)).pow(2).mean().backward()
    opt.step()
