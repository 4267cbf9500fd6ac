"""A population's members train as :func:`mutransfer._training.train` trains each alone (mutransfer._training._population).

Four FNO-1D proxies on a small regression problem, the trainer's recipe (muP, Adam, step schedule, spectral
clipping): member 0 and 1 at ordinary LRs, member 2 at an LR that blows up, member 3 stopped by the observer
after its first evaluation (ASHA's stop). Each member's records and final weights match its solo run to
float32 rounding; the diverged member leaves alone and the others go on; a member trained at another LR does
not match (the comparison can fail).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from mutransfer._training import DIVERGED_METRIC, StopTraining, TrainConfig, train
from mutransfer._training._population import Member, population_key, train_population, why_alone
from operators.fno import FNO

SHAPE = dict(dim=1, in_channels=1, out_channels=1, modes=4, width=8, layers=2, parametrization="mup")
LRS = (3e-3, 1e-2, 1e6, 5e-3)
STOPPED = 3  # stopped by the observer after its first evaluation


def _data() -> SimpleNamespace:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(28, 16, 1, generator=g)
    y = torch.roll(x, 3, dims=1) * 0.5 + 0.1 * x**2
    return SimpleNamespace(train_x=x[:20], train_y=y[:20], test_x=x[20:], test_y=y[20:])


def _model() -> FNO:
    torch.manual_seed(0)  # as a trial: the init depends on the study's seed only
    return FNO(**SHAPE)


def _config(lr: float) -> TrainConfig:
    return TrainConfig(
        lr=lr, batch_size=6, epochs=3, schedule="step", step_size=1, clip_value=0.01, progress=False, device="cpu"
    )


def _galerkin() -> torch.nn.Module:
    """A Galerkin Transformer on the grid as a point set: a population of it stacks under vmap."""
    import operators.registry  # noqa: F401, PLC0415 -- registers the built-in families the adapter builds
    from operators.adapters import GridPointSet  # noqa: PLC0415 -- only this model's tests need it

    torch.manual_seed(0)
    return GridPointSet(1, "galerkin", {"coord_dim": 1, "in_channels": 1, "out_channels": 1, "width": 8, "layers": 1})


def _alone(
    lr: float, stop_after: int | None = None, build: Callable[[], torch.nn.Module] = _model
) -> tuple[list, torch.nn.Module, str]:
    model = build()

    def stop(event) -> None:
        if stop_after is not None and getattr(event, "epoch", None) == stop_after:
            raise StopTraining

    result = train(model, _data(), _config(lr), callbacks=[stop], resume=False)
    return result.history, model, result.status


def test_each_member_trains_as_it_does_alone_and_a_diverged_one_leaves_alone():
    members = [Member(_model(), _config(lr)) for lr in LRS]
    seen: list[tuple[int, int]] = []

    def on_record(index: int, record, wall: float) -> bool:
        assert wall > 0
        seen.append((index, record.epoch))
        return index == STOPPED and record.epoch == 1

    results = train_population(members, _data(), on_record)
    assert [r.status for r in results] == ["completed", "completed", "diverged", "stopped"]
    assert results[2].test_error == DIVERGED_METRIC and results[STOPPED].epochs_completed == 1
    assert all(r.seconds > 0 for r in results)  # each its share of the wall time, the diverged one's too
    assert results[0].seconds > results[STOPPED].seconds > results[2].seconds  # longer in it, a larger share
    assert (3, 2) not in seen and (0, 3) in seen and all(index != 2 for index, _ in seen)
    for index in (0, 1, STOPPED):
        history, model, status = _alone(LRS[index], stop_after=1 if index == STOPPED else None)
        assert status == results[index].status
        got = results[index].history
        assert [r.epoch for r in got] == [r.epoch for r in history]
        for mine, solo in zip(got, history):
            assert mine.test_error == pytest.approx(solo.test_error, rel=1e-4)
            assert mine.train_loss == pytest.approx(solo.train_loss, rel=1e-4)
            assert mine.lr == pytest.approx(solo.lr, rel=1e-12)
    _, diverged_alone, status = _alone(LRS[2])
    assert status == "diverged"


def test_final_weights_match_the_solo_runs_and_another_lr_does_not():
    members = [Member(_model(), _config(lr)) for lr in LRS[:2]]
    kept: list[FNO] = []
    results = train_population(members, _data(), lambda index, record, wall: False)
    assert [r.status for r in results] == ["completed", "completed"]
    # the weights: train again as a population and take the members out at the end
    from mutransfer._training import _population

    run = _population._Population([Member(_model(), _config(lr)) for lr in LRS[:2]], _data())
    for epoch in range(3):
        order = _population._epoch_permutation(20, 0, epoch)
        for xb, yb in _population.iterate_batches(_data().train_x, _data().train_y, order, 6):
            run.step(xb, yb)
    kept = [run.model.member(m) for m in range(2)]
    for index, lr in enumerate(LRS[:2]):
        _, solo, _ = _alone(lr)
        drift = max(
            float((a - b).abs().max() / (b.abs().max() + 1e-12))
            for a, b in zip(kept[index].state_dict().values(), solo.state_dict().values())
        )
        assert drift < 1e-4, drift
    _, other, _ = _alone(LRS[1] * 3)
    moved = max(
        float((a - b).abs().max() / (b.abs().max() + 1e-12))
        for a, b in zip(kept[1].state_dict().values(), other.state_dict().values())
    )
    assert moved > 1e-2  # the comparison can fail


def test_what_cannot_join_a_population_is_named():
    data = _data()
    assert why_alone(_model(), _config(1e-3), data) is None
    bf16 = _config(1e-3)
    bf16.precision = "bf16"
    assert why_alone(_model(), bf16, data) == "it trains in bf16"
    assert why_alone(torch.nn.Linear(1, 1), _config(1e-3), data) is None  # any model vmap batches joins
    dropout = torch.nn.Sequential(torch.nn.Linear(1, 2), torch.nn.Dropout(0.5))
    assert str(why_alone(dropout, _config(1e-3), data)).startswith("its model is a Sequential: vmap cannot batch")
    frozen = torch.nn.Linear(1, 1)
    frozen.bias.requires_grad_(False)  # PopulationAdam steps every stacked parameter
    assert why_alone(frozen, _config(1e-3), data) == "its model has parameters that do not train (requires_grad=False)"
    other = _config(1e-3)
    other.batch_size = 4
    assert population_key(other) != population_key(_config(1e-3))
    assert population_key(_config(1e-3)) == population_key(_config(5e-2))  # the LR may differ
    with pytest.raises(ValueError, match="member 1"):
        train_population([Member(_model(), _config(1e-3)), Member(_model(), other)], data, lambda i, r, w: False)


@pytest.mark.parametrize("build", [_model, _galerkin], ids=["fno", "galerkin"])
def test_a_member_cut_short_resumes_alone_from_its_checkpoint(tmp_path, build):
    """Each member writes the trainer's checkpoint after each evaluation; a population interrupted after epoch 2
    (the driver killed) leaves member 1 a checkpoint from which ``train(resume=True)`` ends where its solo run ends:
    the FNO's population and a vmap one (operators.population_vmap)."""
    members = [Member(build(), _config(lr)) for lr in LRS[:2]]
    paths = [tmp_path / "m0" / "checkpoint.pt", tmp_path / "m1" / "checkpoint.pt"]

    def killed(index: int, record, wall: float) -> bool:
        if record.epoch == 2 and index == 1:
            raise KeyboardInterrupt
        return False

    with pytest.raises(KeyboardInterrupt):
        train_population(members, _data(), killed, paths)
    assert paths[1].exists()
    config = _config(LRS[1])
    config.checkpoint_dir = str(paths[1].parent)
    resumed = train(build(), _data(), config, resume=True)
    assert resumed.resumed_from == 2 * 4  # 20 samples in batches of 6: 4 iterations an epoch
    solo, _, _ = _alone(LRS[1], build=build)
    assert [r.test_error for r in resumed.history] == pytest.approx([r.test_error for r in solo], rel=1e-4)
