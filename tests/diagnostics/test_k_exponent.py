"""The K rule's exponent from the data (mutransfer._diagnostics.k_exponent), checked against spectra whose energy
in the kept modes is known in closed form."""

from __future__ import annotations

import math

import pytest
import torch

from mutransfer._diagnostics.k_exponent import (
    KExponentEstimate,
    estimate_k_exponent,
    exponent_between,
    fourier_layer_inputs,
    kept_mode_energy,
)
from operators import FNO

N = 128


def _grid(n: int = N) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float64) / n


def test_a_cosine_carries_its_energy_only_once_k_passes_its_frequency():
    """a·cos(2π f x) has energy a²/2, all of it at mode f: E(K) = 0 for K ≤ f and a²/2 for K > f."""
    h = (3.0 * torch.cos(2 * math.pi * 5 * _grid())).reshape(1, 1, N)
    assert kept_mode_energy(h, 5, 1) == pytest.approx(0.0, abs=1e-12)
    assert kept_mode_energy(h, 6, 1) == pytest.approx(4.5)
    assert kept_mode_energy(h, 40, 1) == pytest.approx(4.5)


def test_every_mode_kept_gives_parseval():
    """With every mode kept, the energy is the mean of h² over the grid (samples and channels averaged)."""
    torch.manual_seed(0)
    h = torch.randn(3, 2, 16, 14, dtype=torch.float64)  # K = 8: k1 in -8..7, k2 in 0..7 (14 // 2 = 7 is the last)
    assert kept_mode_energy(h, 8, 2) == pytest.approx(float(h.square().mean()), rel=1e-10)


def test_two_d_keeps_both_signs_on_the_first_axis():
    """cos(2π(3x + 2y)) sits at (±3, 2) in rfft2's half plane: kept by K = 4 (|k1| < 4, k2 < 4), not by K = 3."""
    x = _grid(16)
    h = torch.cos(2 * math.pi * (3 * x[:, None] + 2 * x[None, :])).reshape(1, 1, 16, 16)
    assert kept_mode_energy(h, 3, 2) == pytest.approx(0.0, abs=1e-12)
    assert kept_mode_energy(h, 4, 2) == pytest.approx(0.5)
    h = torch.cos(2 * math.pi * (-3 * x[:, None] + 2 * x[None, :])).reshape(1, 1, 16, 16)
    assert kept_mode_energy(h, 4, 2) == pytest.approx(0.5)


def _random_phase_field(power, samples: int = 64, seed: int = 0) -> torch.Tensor:
    """(samples, 1, N) real fields with |û_k|² = power(k) at every k ≥ 1 and random phases; mean 0."""
    g = torch.Generator().manual_seed(seed)
    k = torch.arange(1, N // 2)
    phase = 2 * math.pi * torch.rand(samples, k.numel(), generator=g, dtype=torch.float64)
    amp = torch.sqrt(torch.as_tensor([power(int(v)) for v in k], dtype=torch.float64))
    x = _grid()
    h = (2 * amp[None, :, None] * torch.cos(2 * math.pi * k[None, :, None] * x + phase[..., None])).sum(1)
    return h[:, None, :] / 2


def test_the_exponent_is_zero_on_smooth_data_near_one_on_a_scale_invariant_spectrum_and_above_on_white_noise():
    """E(K) ∝ Σ_{1≤k<K} P(k): for P(k) = 1/k (scale-invariant in 1D) E ∝ H_{K−1} ≈ ln K + γ, so ρ between
    K 4 and 32 is ln(H_31/H_3)/ln(ln 32/ln 4) = 0.86 (the paper's rule is ρ = 1 for E ∝ ln K exactly); for a
    spectrum that ends below K = 4, ρ = 0; for white noise (P = 1, E ∝ K − 1), ρ = ln(31/3)/ln(2.5) = 2.55."""
    harmonic = lambda n: sum(1 / j for j in range(1, n + 1))  # noqa: E731
    cases = {
        "smooth": (lambda k: 1.0 if k < 3 else 0.0, 0.0),
        "scale-invariant": (
            lambda k: 1.0 / k,
            math.log(harmonic(31) / harmonic(3)) / math.log(math.log(32) / math.log(4)),
        ),
        "white": (lambda k: 1.0, math.log(31 / 3) / math.log(math.log(32) / math.log(4))),
    }
    measured = {}
    for name, (power, expected) in cases.items():
        h = _random_phase_field(power)
        measured[name] = exponent_between(kept_mode_energy(h, 4, 1), kept_mode_energy(h, 32, 1), 4, 32)
        assert measured[name] == pytest.approx(expected, rel=1e-6), name
    assert measured["smooth"] < 0.1 < measured["scale-invariant"] < 1.0 < 2.0 < measured["white"]


def test_the_exponent_refuses_what_it_cannot_measure():
    with pytest.raises(ValueError, match="2 <= K_lo < K_hi"):
        exponent_between(1.0, 2.0, 8, 8)
    with pytest.raises(ValueError, match="all zero"):
        exponent_between(0.0, 0.0, 4, 8)
    with pytest.raises(ValueError, match="2K <= N"):
        kept_mode_energy(torch.zeros(1, 1, 8, 8), 5, 2)


def test_the_estimate_reads_every_fourier_layers_input_and_rises_with_the_datas_roughness():
    """On an FNO (μP, K = 4): one input per Fourier layer; data rough in every mode measure a larger ρ than a
    single low mode, and the model's training mode is left as it was."""
    torch.manual_seed(0)
    model = FNO(1, 1, 1, modes=4, width=16, layers=3, parametrization="mup").train()
    smooth = torch.sin(2 * math.pi * _grid().float())[None, :, None].repeat(16, 1, 1)
    rough = torch.randn(16, N, 1)
    assert len(fourier_layer_inputs(model, smooth)) == 3 and model.training
    lo, hi = (estimate_k_exponent(model, x, 4, 32) for x in (smooth, rough))
    assert len(lo.layer_exponents) == 3 and lo.samples == 16 and lo.modes == (4, 32)
    assert lo.exponent < hi.exponent
    assert KExponentEstimate.from_dict(hi.as_dict()) == hi
    assert "rho = " in hi.describe()


def test_a_model_without_fourier_layers_is_refused():
    with pytest.raises(ValueError, match="no Fourier layer"):
        fourier_layer_inputs(torch.nn.Linear(1, 1), torch.zeros(2, 1))


CHANNELS_LAST_MODULE = """
import torch
from torch import nn


class SpectralLast(nn.Module):
    def __init__(self, width, K):
        super().__init__()
        self.K = K
        self.weight = nn.Parameter(torch.randn(width, width, K, dtype=torch.cfloat) / width)

    def forward(self, x):  # (B, N, C)
        z = torch.fft.rfft(x, dim=1)
        out = torch.zeros_like(z)
        out[:, : self.K] = torch.einsum("bki,iok->bko", z[:, : self.K], self.weight)
        return torch.fft.irfft(out, n=x.shape[1], dim=1)


class LastFNO(nn.Module):
    def __init__(self, K, width, in_channels, out_channels):
        super().__init__()
        self.lift = nn.Linear(in_channels, width)
        self.spectral = SpectralLast(width, K)
        self.readout = nn.Linear(width, out_channels)

    def forward(self, x):
        h = self.lift(x)
        return self.readout(torch.nn.functional.gelu(self.spectral(h) + h))


def build(*, K, width, in_channels, out_channels):
    return LastFNO(K, width, in_channels, out_channels)
"""


def _users_model(module_text: str, K: int = 24):
    """A user's model from ``module_text`` (its ``build`` factory) at ``K``, its muP facts set against K = 6."""
    import types

    from mutransfer import mup

    module = types.ModuleType("users_model")
    exec(compile(module_text, "users_model.py", "exec"), module.__dict__)  # the test's own text, as a .py would be
    config = {"width": 8, "in_channels": 1, "out_channels": 1}
    model = module.build(K=K, **config)
    mup.set_base_shapes(model, module.build(K=6, **config))
    return model


def test_on_a_users_model_the_estimate_reads_the_layers_holding_its_spectral_weights():
    """A user's model (a factory's, issue 34 item 1) has no layer of the project's protocol: the estimate reads the
    input of the nearest module that runs above each parameter its muP facts mark spectral, one per layer; rough
    data measure a larger ρ than smooth."""
    from tests.sweep.test_user_operator import USER_MODULE

    torch.manual_seed(0)
    model = _users_model(USER_MODULE)
    smooth = torch.sin(2 * math.pi * _grid().float())[None, :, None].repeat(16, 1, 1)
    rough = torch.randn(16, N, 1)
    inputs = fourier_layer_inputs(model, smooth)
    assert len(inputs) == 2 and all(h.shape == (16, 8, N) for h in inputs)  # (B, C, N): the user's Spectral1d
    lo, hi = (estimate_k_exponent(model, x, 6, 24) for x in (smooth, rough))
    assert len(lo.layer_exponents) == 2 and lo.exponent < hi.exponent


def test_a_users_spectral_layer_taking_channels_last_is_refused_in_one_line():
    """The energy is read as (B, C, *grid): a user's spectral layer that takes (B, N, C) cannot be read, and is
    named with the fix (a number for operator.k_exponent) rather than measured wrong."""
    from operators.errors import OperatorConfigError

    model = _users_model(CHANNELS_LAST_MODULE)
    with pytest.raises(OperatorConfigError) as caught:
        fourier_layer_inputs(model, torch.randn(4, N, 1))
    message = str(caught.value)
    assert "\n" not in message and "LastFNO.spectral" in message and "give operator.k_exponent a number" in message


ROOT_HELD_MODULE = """
import torch
from torch import nn


class RootSpectral(nn.Module):
    def __init__(self, K, width, in_channels, out_channels):
        super().__init__()
        self.K = K
        self.weight = nn.Parameter(torch.randn(in_channels, out_channels, K, dtype=torch.cfloat))

    def forward(self, x):  # (B, N, C): the spectral weight sits on the model itself
        z = torch.fft.rfft(x.movedim(-1, 1))
        out = torch.zeros(z.shape[0], self.weight.shape[1], z.shape[-1], dtype=z.dtype)
        out[..., : self.K] = torch.einsum("bik,iok->bok", z[..., : self.K], self.weight)
        return torch.fft.irfft(out, n=x.shape[1]).movedim(1, -1)


def build(*, K, width, in_channels, out_channels):
    return RootSpectral(K, width, in_channels, out_channels)
"""


def test_a_spectral_weight_held_by_the_model_itself_is_read_at_its_input_and_refused_in_one_line():
    """The nearest module above the weight is the model: its input, (B, N, C), is not (B, C, *grid): named, with
    the fix, not silently skipped."""
    from operators.errors import OperatorConfigError

    model = _users_model(ROOT_HELD_MODULE)
    with pytest.raises(OperatorConfigError) as caught:
        fourier_layer_inputs(model, torch.randn(4, N, 1))
    message = str(caught.value)
    assert "\n" not in message and "reads the input of RootSpectral, which holds" in message
