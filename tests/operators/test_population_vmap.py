"""A population of any model ``vmap`` can batch (operators.population_vmap): each member computes what it computes
alone, members leave and come back out as plain models, and the models ``vmap`` refuses are named with the reason."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import operators.registry  # noqa: F401 -- registers the built-in families the adapters build
from operators.adapters import GridPointSet
from operators.errors import OperatorConfigError
from operators.fno import FNO
from operators.population import PopulationAdam, clip_population_spectral_gradients
from operators.population_vmap import VmapPopulation, vmap_refusal

CONFIG = {"coord_dim": 1, "in_channels": 1, "out_channels": 1, "width": 8, "layers": 1, "heads": 2}


def _galerkin(seed: int, **extra: object) -> GridPointSet:
    torch.manual_seed(seed)
    return GridPointSet(1, "galerkin", {**CONFIG, **extra})


def _input(members: int) -> torch.Tensor:
    x = torch.randn(3, 16, 1, generator=torch.Generator().manual_seed(1))
    return x.unsqueeze(0).expand(members, *x.shape)


def test_each_member_computes_what_it_computes_alone():
    members = [_galerkin(seed) for seed in range(3)]
    population = VmapPopulation(members)
    out = population(_input(3))
    for m, model in enumerate(members):
        assert torch.allclose(out[m], model(_input(1)[0]), atol=1e-6)
    assert not torch.allclose(out[0], out[1])  # the members' own weights: the comparison can fail


def test_keep_drops_members_and_member_gives_a_plain_copy():
    members = [_galerkin(seed) for seed in range(3)]
    population = VmapPopulation(members)
    population.keep([2, 0])
    assert population.size == 2
    out = population(_input(2))
    assert torch.allclose(out[0], members[2](_input(1)[0]), atol=1e-6)
    copy = population.member(0)
    assert isinstance(copy, GridPointSet) and copy is not members[2]
    assert torch.allclose(copy(_input(1)[0]), members[2](_input(1)[0]), atol=1e-6)
    with pytest.raises(OperatorConfigError, match="distinct members"):
        population.keep([0, 0])
    with pytest.raises(OperatorConfigError, match="member 5"):
        population.member(5)


def test_members_of_another_configuration_or_class_are_refused():
    with pytest.raises(OperatorConfigError, match="configuration or parameter shapes"):
        VmapPopulation([_galerkin(0), _galerkin(1, width=12)])
    with pytest.raises(OperatorConfigError, match="is a Linear"):
        VmapPopulation([_galerkin(0), nn.Linear(1, 1)])
    with pytest.raises(OperatorConfigError, match="at least one"):
        VmapPopulation([])


def test_population_adam_steps_each_member_as_adam_alone():
    """One step of PopulationAdam at two LRs against torch.optim.Adam on each member alone, width-muP groups."""
    extra = {"width_parametrization": "mup", "base_width": 4}
    members = [_galerkin(seed, **extra) for seed in range(2)]
    solos = [_galerkin(seed, **extra) for seed in range(2)]
    population = VmapPopulation(members)
    lrs = (1e-2, 3e-2)
    optimizer = PopulationAdam(population, lrs)
    x, y = _input(2), torch.ones(2, 3, 16, 1)
    ((population(x) - y) ** 2).mean(dim=(1, 2, 3)).sum().backward()
    clip_population_spectral_gradients(population, 0.01)  # no spectral parameters: nothing clipped
    optimizer.step()
    from operators.parametrization import optimizer_param_groups

    for m, (solo, lr) in enumerate(zip(solos, lrs)):
        adam = torch.optim.Adam(optimizer_param_groups(solo, lr), lr=lr)  # each group at its multiplier x lr
        ((solo(x[m]) - y[m]) ** 2).mean().backward()
        adam.step()
        mine = population.member(m).state_dict()
        for name, value in solo.state_dict().items():
            assert torch.allclose(mine[name], value, atol=1e-6), name
    moved = population.member(1).state_dict()
    assert any(not torch.allclose(moved[n], v, atol=1e-6) for n, v in solos[0].state_dict().items())


def test_models_vmap_cannot_batch_are_named_with_the_reason():
    sample = torch.randn(1, 16, 1)
    assert vmap_refusal(_galerkin(0), sample) is None
    torch.manual_seed(0)
    assert vmap_refusal(GridPointSet(1, "ono", {**CONFIG}), sample) is None  # its whitening is branch-free
    fno = FNO(1, 1, 1, modes=4, width=8, layers=1)  # its spectral contraction is an autograd.Function
    assert "setup_context" in str(vmap_refusal(fno, sample))
    dropout = nn.Sequential(nn.Linear(1, 4), nn.Dropout(0.5), nn.Linear(4, 1))
    assert "randomness" in str(vmap_refusal(dropout, sample))
    assert vmap_refusal(nn.Sequential(nn.Linear(1, 4), nn.Linear(4, 1)), sample) is None

    class Broken(nn.Module):  # a user's model whose forward fails in its own way: a reason, never raised
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise TypeError("my model takes two inputs")

    assert "my model takes two inputs" in str(vmap_refusal(Broken(), sample))


def test_a_sample_without_points_is_refused_alone_and_not_checked_inside_a_population():
    """Outside a population the model refuses an all-padding sample; inside, vmap cannot branch on values, so the
    check is off there (the data were checked when read: tests/data/test_data_pointclouds.py -k no_real_point)."""
    from operators.pointset import prepare_points
    from operators.value_checks import inside_population, values_checked

    coords, features = torch.rand(2, 5, 1), torch.rand(2, 5, 1)
    empty = torch.tensor([[True] * 5, [False] * 5])
    with pytest.raises(OperatorConfigError, match="every sample needs at least one real point"):
        prepare_points(coords, features, empty, 1, 1)
    assert values_checked()
    with inside_population():
        assert not values_checked()
        prepare_points(coords, features, empty, 1, 1)  # not checked here
    assert values_checked()
