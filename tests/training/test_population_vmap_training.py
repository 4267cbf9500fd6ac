"""Attention operators train as populations too (``vmap``: operators.population_vmap), each member as
:func:`mutransfer._training.train` trains it alone; a model ``vmap`` refuses trains alone, and says why.

Three Galerkin Transformers (width-muP, on the grid as a point set) on a small regression problem: members at two
ordinary LRs and one that blows up. Each member's records and final weights match its solo run to float32 rounding;
the diverged member leaves alone; a member trained at another LR does not match (the comparison can fail).
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

import operators.registry  # noqa: F401 -- registers the built-in families the adapters build
from mutransfer._training import TrainConfig, train
from mutransfer._training._population import Member, _epoch_permutation, _Population, train_population, why_alone
from mutransfer.data._streaming import iterate_batches
from operators.adapters import GridPointSet
from operators.population_vmap import VmapPopulation

CONFIG = {
    "coord_dim": 1, "in_channels": 1, "out_channels": 1, "width": 8, "layers": 1, "heads": 2,
    "width_parametrization": "mup", "base_width": 4,
}  # fmt: skip
LRS = (3e-3, 1e-2, 1e6)


def _data() -> SimpleNamespace:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(28, 16, 1, generator=g)
    y = torch.roll(x, 3, dims=1) * 0.5 + 0.1 * x**2
    return SimpleNamespace(train_x=x[:20], train_y=y[:20], test_x=x[20:], test_y=y[20:])


def _model(operator: str = "galerkin") -> GridPointSet:
    torch.manual_seed(0)  # as a trial: the init depends on the study's seed only
    return GridPointSet(1, operator, CONFIG)


def _config(lr: float) -> TrainConfig:
    return TrainConfig(lr=lr, batch_size=6, epochs=3, schedule="cosine", progress=False, device="cpu")


def _alone(lr: float) -> tuple[list, GridPointSet, str]:
    model = _model()
    result = train(model, _data(), _config(lr), resume=False)
    return result.history, model, result.status


def _drift(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(
        float((x - y).abs().max() / (y.abs().max() + 1e-12))
        for x, y in zip(a.state_dict().values(), b.state_dict().values())
    )


def test_each_galerkin_member_trains_as_it_does_alone():
    assert why_alone(_model(), _config(1e-3), _data()) is None
    results = train_population([Member(_model(), _config(lr)) for lr in LRS], _data(), lambda i, r, w: False)
    assert [r.status for r in results] == ["completed", "completed", "diverged"]
    for index in (0, 1):
        history, _model_alone, status = _alone(LRS[index])
        assert status == "completed"
        for mine, solo in zip(results[index].history, history, strict=True):
            assert mine.test_error == pytest.approx(solo.test_error, rel=1e-4)
            assert mine.train_loss == pytest.approx(solo.train_loss, rel=1e-4)
    assert _alone(LRS[2])[2] == "diverged"


def test_final_weights_match_the_solo_runs_and_another_lr_does_not():
    run = _Population([Member(_model(), _config(lr)) for lr in LRS[:2]], _data())
    assert isinstance(run.model, VmapPopulation)
    data = _data()
    for epoch in range(3):
        for xb, yb in iterate_batches(data.train_x, data.train_y, _epoch_permutation(20, 0, epoch), 6):
            run.step(xb, yb)
    kept = [run.model.member(m) for m in range(2)]
    for index, lr in enumerate(LRS[:2]):
        assert _drift(kept[index], _alone(lr)[1]) < 1e-4
    assert _drift(kept[1], _alone(LRS[1] * 3)[1]) > 1e-2  # the comparison can fail


def test_onos_join_too_and_a_model_vmap_refuses_trains_alone_and_says_why():
    assert why_alone(_model("ono"), _config(1e-3), _data()) is None  # its whitening is branch-free
    from mutransfer.neuralop import fno1d

    neuralop = fno1d(K=4, width=8, in_channels=1, out_channels=1)  # in-place writes into a tensor its forward makes
    reason = why_alone(neuralop, _config(1e-3), _data())
    assert reason is not None and reason.startswith("its model is a FNO: vmap cannot batch its forward"), reason


def test_each_ono_member_gets_the_gradient_it_gets_alone():
    """ONO's running second moment is a buffer each member keeps for itself, and its whitening is branch-free: each
    member's gradient of a step is its solo gradient to float32 rounding. (Whole trajectories are compared on the
    Galerkin Transformer above: at this tiny size ONO's Adam steps part under any rounding, as a solo run nudged by
    1e-7 parts from itself.)"""
    data = _data()
    x, y = data.train_x[:6], data.train_y[:6]
    members = [_model("ono") for _ in range(2)]
    with torch.no_grad():  # member 1 differs: its gradient is its own
        for p in members[1].parameters():
            p.mul_(1.5)
    solos = [copy.deepcopy(m) for m in members]
    population = VmapPopulation(members)
    pred = population(x.unsqueeze(0).expand(2, *x.shape))
    ((pred - y) ** 2).mean(dim=(1, 2, 3)).sum().backward()
    for m, solo in enumerate(solos):
        ((solo(x) - y) ** 2).mean().backward()
        grads = {name: p.grad for name, p in solo.named_parameters() if p.grad is not None}
        scale = max(float(g.abs().max()) for g in grads.values())  # some of ONO's gradients are rounding noise
        for stacked, name in population.stacks:
            assert stacked.grad is not None and name in grads
            assert float((stacked.grad[m] - grads[name]).abs().max()) / scale < 1e-4, name
    other = population.stacks[0][0].grad
    assert other is not None and float((other[0] - other[1]).abs().max()) > 1e-6  # the comparison can fail
