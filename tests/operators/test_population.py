"""A population of FNOs (operators/population.py): each member computes, and trains, as it would alone.

The population's loss is the sum of its members' losses, so member m's gradient is its own; with
:class:`PopulationAdam` at member m's LR and β1, its weights after a few steps are the weights of the same FNO
trained alone by ``torch.optim.Adam`` over ``optimizer_param_groups`` (the trainer's optimizer), to float32
rounding. A population whose members' learning rates were handed out in the wrong order fails the same check.
"""

from __future__ import annotations

import pytest
import torch

from operators import FNO
from operators.errors import OperatorConfigError
from operators.parametrization import clip_spectral_gradients, optimizer_param_groups
from operators.population import PopulationAdam, PopulationFNO, clip_population_spectral_gradients

PROXY = dict(dim=1, in_channels=1, out_channels=1, modes=6, width=16, parametrization="mup")


def _members(count: int, **config) -> list[FNO]:
    members = []
    for seed in range(count):
        torch.manual_seed(seed)
        members.append(FNO(**config))
    return members


@pytest.mark.parametrize(
    "config, grid",
    [
        (PROXY, (32,)),
        (dict(PROXY, padding=3, layers=2), (30,)),
        (dict(dim=2, in_channels=1, out_channels=2, modes=3, width=8, parametrization="mup"), (12, 10)),
        (dict(PROXY, width=12, width_parametrization="mup", base_width=8), (32,)),
        (dict(dim=3, in_channels=2, out_channels=1, modes=2, width=4, layers=2, parametrization="mup"), (8, 8, 6)),
    ],
    ids=["proxy", "padded", "2d", "width-mup", "3d"],
)
def test_each_member_computes_what_it_computes_alone(config, grid):
    members = _members(3, **config)
    population = PopulationFNO(members)
    x = torch.randn(3, 4, *grid, config["in_channels"])
    out = population(x)
    assert out.shape == (3, 4, *grid, config["out_channels"])
    for m, model in enumerate(members):
        torch.testing.assert_close(out[m], model(x[m]), rtol=1e-4, atol=1e-5)
        back = population.member(m)
        for (name, p), q in zip(model.named_parameters(), back.parameters()):
            assert torch.equal(p, q), name


def _train_alone(model, batches, lr, beta1, clip) -> None:
    opt = torch.optim.Adam(optimizer_param_groups(model, lr, 1e-4), lr=lr, betas=(beta1, 0.999), weight_decay=1e-4)
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        clip_spectral_gradients(model, clip)
        opt.step()


def _train_together(population, batches, lrs, beta1s, clip) -> None:
    opt = PopulationAdam(population, lrs, beta1s, weight_decay=1e-4)
    for x, y in batches:
        opt.zero_grad()
        out = population(x)
        sum(torch.nn.functional.mse_loss(out[m], y[m]) for m in range(population.size)).backward()
        clip_population_spectral_gradients(population, clip)
        opt.step()


def _drift(trained: list[FNO], population: PopulationFNO, config: dict) -> float:
    """The largest, over members and parameters, of |together − alone| / |alone − start|: how far the member
    trained in the population is from the one trained alone, relative to how far training moved it."""
    worst = 0.0
    with torch.no_grad():
        for m, (model, start) in enumerate(zip(trained, _members(len(trained), **config))):
            together = population.member(m)
            for p, q, p0 in zip(model.parameters(), together.parameters(), start.parameters()):
                moved = (p - p0).abs().pow(2).sum().sqrt()
                assert moved > 0, f"member {m} did not train"
                worst = max(worst, float((q - p).abs().pow(2).sum().sqrt() / moved))
    return worst


@pytest.mark.parametrize(
    "config, grid",
    [
        (PROXY, (32,)),
        (dict(dim=2, in_channels=1, out_channels=1, modes=3, width=6, layers=2, parametrization="mup"), (10, 8)),
        (dict(PROXY, width=12, layers=2, width_parametrization="mup", base_width=8), (32,)),
    ],
    ids=["proxy", "2d", "width-mup"],
)
def test_each_member_trains_as_it_trains_alone_and_a_swapped_lr_does_not(config, grid):
    """Six Adam steps with L2 decay and spectral clipping, each member at its own LR and beta1 on its own batches:
    every parameter within 1e-3 of how far it moved (float32 rounding: Adam's m/sqrt(v) magnifies it where a
    gradient entry is near zero); the same population with two members' LRs swapped is off by far more. In 2-D
    (four modes' corners) and under width-muP (the hidden and readout multipliers) too."""
    lrs, beta1s, steps, clip = [3e-3, 1e-2, 3e-2], [0.9, 0.8, 0.95], 6, 0.5
    torch.manual_seed(10)
    shape = (3, 5, *grid)
    batches = [
        (torch.randn(*shape, config["in_channels"]), torch.randn(*shape, config["out_channels"])) for _ in range(steps)
    ]  # each member its own data
    alone = _members(3, **config)
    for m, model in enumerate(alone):
        _train_alone(model, [(x[m], y[m]) for x, y in batches], lrs[m], beta1s[m], clip)
    population = PopulationFNO(_members(3, **config))
    _train_together(population, batches, lrs, beta1s, clip)
    drift = _drift(alone, population, config)
    print(f"{config['dim']}-D drift {drift:.2g}", end=" ")  # docs/benchmarks.md quotes the 1-D proxy's
    assert drift < 1e-3

    swapped = PopulationFNO(_members(3, **config))
    _train_together(swapped, batches, [lrs[1], lrs[0], lrs[2]], beta1s, clip)
    off = _drift(alone, swapped, config)
    print(f"swapped {off:.2g}")
    assert off > 0.1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_a_population_trains_on_a_gpu():
    population = PopulationFNO(_members(2, **PROXY)).cuda()
    optimizer = PopulationAdam(population, [1e-3, 3e-3])
    x = torch.randn(2, 4, 32, 1, device="cuda")
    population(x).square().mean().backward()
    optimizer.step()
    assert population.member(1).lift.weight.device.type == "cuda"


def test_a_float64_population_computes_in_float64():
    members = [m.double() for m in _members(2, **PROXY)]
    population = PopulationFNO(members)
    x = torch.randn(2, 3, 32, 1, dtype=torch.float64)
    out = population(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out[1], members[1](x[1]))
    assert population.member(0).lift.weight.dtype == torch.float64


def test_members_of_different_configurations_or_bad_settings_are_one_line():
    with pytest.raises(OperatorConfigError, match="its modes differ from member 0's; a population holds members"):
        PopulationFNO(_members(1, **PROXY) + _members(1, **dict(PROXY, modes=4)))
    with pytest.raises(OperatorConfigError, match="needs at least one member"):
        PopulationFNO([])
    with pytest.raises(OperatorConfigError, match="population member 0: is a Linear, not an FNO"):
        PopulationFNO([torch.nn.Linear(2, 2)])
    population = PopulationFNO(_members(2, **PROXY))
    with pytest.raises(OperatorConfigError, match="lr: 3 values for a population of 2; give one per member"):
        PopulationAdam(population, [1e-3, 1e-3, 1e-3])
    with pytest.raises(OperatorConfigError, match="every member's learning rate must be positive"):
        PopulationAdam(population, [1e-3, 0.0])
    with pytest.raises(OperatorConfigError, match="beta1, beta2: must lie in"):
        PopulationAdam(population, 1e-3, beta1=[0.9, 1.0])
    with pytest.raises(OperatorConfigError, match="clip_value -1: must be positive"):
        clip_population_spectral_gradients(population, -1)
    with pytest.raises(OperatorConfigError, match="expects \\(2, batch, N, channels\\)"):
        population(torch.randn(3, 4, 32, 1))
    with pytest.raises(OperatorConfigError, match="member 2: the population has members 0 … 1"):
        population.member(2)
    with pytest.raises(OperatorConfigError, match="parameters have no gradient; call backward on a loss"):
        PopulationAdam(population, [1e-3, 1e-3]).step()


def test_keep_drops_members_and_the_others_train_on():
    """A stopped member leaves (PopulationFNO.keep, PopulationAdam.keep): the others keep their weights, LRs and Adam
    moments and take the same next step they would have taken in the full population; bad keeps are refused."""
    population = PopulationFNO(_members(3, **PROXY))
    optimizer = PopulationAdam(population, [1e-3, 2e-3, 3e-3])
    full = PopulationFNO(_members(3, **PROXY))
    full_optimizer = PopulationAdam(full, [1e-3, 2e-3, 3e-3])
    x = torch.randn(3, 2, 32, 1)
    for model, opt in ((population, optimizer), (full, full_optimizer)):
        (model(x) ** 2).mean(dim=(1, 2, 3)).sum().backward()
        opt.step()
    with pytest.raises(OperatorConfigError, match="PopulationFNO.keep"):
        optimizer.keep([0, 2])  # the model first
    population.keep([0, 2])
    optimizer.keep([0, 2])
    with pytest.raises(OperatorConfigError, match="distinct members"):
        population.keep([1, 1])
    for model, opt, inputs in ((population, optimizer, x[[0, 2]]), (full, full_optimizer, x)):
        opt.zero_grad()
        (model(inputs) ** 2).mean(dim=(1, 2, 3)).sum().backward()
        opt.step()
    for kept, original in ((0, 0), (1, 2)):
        for a, b in zip(population.member(kept).parameters(), full.member(original).parameters()):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    assert optimizer.lr.tolist() == [1e-3, 3e-3] and population.size == 2


@pytest.mark.parametrize(
    "config, grid",
    [
        (PROXY, (32,)),
        (dict(dim=2, in_channels=1, out_channels=2, modes=3, width=8, parametrization="mup"), (12, 10)),
        (dict(dim=3, in_channels=2, out_channels=1, modes=2, width=4, layers=2, parametrization="mup"), (8, 8, 6)),
    ],
    ids=["1d", "2d", "3d"],
)
def test_the_gpu_spectral_path_computes_what_the_cpu_path_computes(config, grid):
    """The FFT path a GPU takes (PopulationFNO._spectral off the CPU) and the CPU's GEMM path agree, values and
    gradients: the GPU path is checked on every machine, not only where a GPU is."""
    population = PopulationFNO(_members(2, **config))
    h = torch.randn(2, config["width"], 3, *grid, requires_grad=True)
    fft = population._spectral_fft(h, 1)
    (g_fft,) = torch.autograd.grad(fft.square().sum(), h)
    gemm = population._spectral_gemm(h, 1)
    (g_gemm,) = torch.autograd.grad(gemm.square().sum(), h)
    torch.testing.assert_close(fft, gemm, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g_fft, g_gemm, rtol=1e-4, atol=1e-4)
    other = population._spectral_gemm(h, 0)  # another layer's weights: the check can tell layers apart
    assert not torch.allclose(other, fft, atol=1e-3)


def test_the_moments_are_each_members_own_and_keep_their_dtypes():
    """PopulationAdam.moments(p)[m] is the Adam state torch.optim.Adam holds for member m trained alone (what a
    member's checkpoint carries); in a float64 population (FNO.double(): real weights float64, the spectral ones
    stay complex64) each moment keeps its parameter's dtype, and the members still train as they do alone."""
    lrs, steps = [3e-3, 1e-2], 3
    torch.manual_seed(4)
    batches = [(torch.randn(2, 5, 32, 1, dtype=torch.float64), torch.randn(2, 5, 32, 1, dtype=torch.float64))] * steps
    alone, optimizers = [m.double() for m in _members(2, **PROXY)], []
    for m, model in enumerate(alone):
        opt = torch.optim.Adam(optimizer_param_groups(model, lrs[m]), lr=lrs[m])
        for x, y in batches:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x[m]), y[m]).backward()
            opt.step()
        optimizers.append(opt)
    population = PopulationFNO([m.double() for m in _members(2, **PROXY)])
    optimizer = PopulationAdam(population, lrs)
    assert optimizer.moments(population.lift_weight) is None  # before the first step
    for x, y in batches:
        optimizer.zero_grad()
        out = population(x)
        sum(torch.nn.functional.mse_loss(out[m], y[m]) for m in range(2)).backward()
        optimizer.step()
    for m, (model, opt) in enumerate(zip(alone, optimizers)):
        params = dict(model.named_parameters())
        for stacked, name in population._names:
            exp_avg, exp_avg_sq = optimizer.moments(stacked)
            assert exp_avg.dtype == stacked.dtype and exp_avg.shape == stacked.shape, name
            state = opt.state[params[name]]
            torch.testing.assert_close(
                exp_avg[m].reshape(state["exp_avg"].shape), state["exp_avg"], rtol=1e-4, atol=1e-9
            )
            torch.testing.assert_close(
                exp_avg_sq[m].reshape(state["exp_avg_sq"].shape), state["exp_avg_sq"], rtol=1e-4, atol=1e-12
            )
    assert population.spectral_weight[0].dtype == torch.complex64 and population.lift_weight.dtype == torch.float64
    first, _ = optimizer.moments(population.lift_weight)
    first.zero_()  # a copy: the optimizer's own state is untouched
    assert optimizer.moments(population.lift_weight)[0].abs().sum() > 0
    with pytest.raises(OperatorConfigError, match="not a parameter this optimizer steps"):
        optimizer.moments(torch.nn.Parameter(torch.zeros(2)))
