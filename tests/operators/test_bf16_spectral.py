"""The bf16 spectral path (operators.spectral._bf16_spectrum): under CPU bf16 autocast on a CPU with bf16 matrix
units the truncated-DFT GEMMs and the contraction run in bf16 with float32 accumulation. Checked against the
float32 path: close to bf16's rounding, not equal (so the path is taken), weights' gradients still complex64."""

from __future__ import annotations

import pytest
import torch

import operators.spectral as spectral
from operators.fno import FNO


def _run(model: FNO, x: torch.Tensor, mode: str, monkeypatch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    monkeypatch.setattr(spectral, "_SPECTRAL_BF16", mode)
    monkeypatch.setattr(spectral, "_TRANSFORM", "dft")
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.float().square().mean().backward()
    return out.float().detach(), [w.grad.clone() for layer in model.spectral for w in layer.weights]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("dim, grid, modes", [(1, (64,), 8), (2, (16, 16), 4), (3, (8, 8, 8), 2)])
def test_bf16_spectrum_is_close_to_float32_and_is_really_taken(dim, grid, modes, monkeypatch):
    torch.manual_seed(0)
    model = FNO(dim, 1, 1, modes, width=16, layers=2, parametrization="mup")
    x = torch.randn(4, *grid, 1)
    ref, ref_grads = _run(model, x, "off", monkeypatch)
    low, low_grads = _run(model, x, "on", monkeypatch)
    assert 1e-5 < _rel(low, ref) < 3e-2  # bf16 rounding (8-bit mantissa), not the float32 path
    for g, r in zip(low_grads, ref_grads, strict=True):
        assert g.dtype == torch.complex64  # the master weights' gradients stay complex64
        assert _rel(g, r) < 5e-2


def test_auto_takes_the_bf16_spectrum_only_where_the_cpu_multiplies_bf16(monkeypatch):
    torch.manual_seed(0)
    model = FNO(2, 1, 1, 4, width=8, layers=1)
    x = torch.randn(2, 16, 16, 1)
    ref, _ = _run(model, x, "off", monkeypatch)
    monkeypatch.setattr(spectral, "cpu_multiplies_bf16", lambda: False)
    without, _ = _run(model, x, "auto", monkeypatch)
    assert torch.equal(without, ref)  # no bf16 matrix units: the float32 spectrum, as before
    monkeypatch.setattr(spectral, "cpu_multiplies_bf16", lambda: True)
    with_units, _ = _run(model, x, "auto", monkeypatch)
    assert not torch.equal(with_units, ref)


def test_only_bf16_on_the_cpu_with_the_gemm_transform_takes_the_bf16_spectrum(monkeypatch):
    monkeypatch.setattr(spectral, "_SPECTRAL_BF16", "on")
    monkeypatch.setattr(spectral, "_TRANSFORM", "dft")
    grid, modes = (16, 16), 4
    assert spectral.spectrum_in_bf16("bf16", "cpu", grid, modes)
    assert not spectral.spectrum_in_bf16("fp32", "cpu", grid, modes)
    assert not spectral.spectrum_in_bf16("fp16", "cpu", grid, modes)  # fp16 keeps the float32 spectrum
    assert not spectral.spectrum_in_bf16("bf16", "cuda", grid, modes)  # GPUs: cuFFT in float32
    monkeypatch.setattr(spectral, "_TRANSFORM", "fft")
    assert not spectral.spectrum_in_bf16("bf16", "cpu", grid, modes)  # torch.fft has no bf16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert spectral._autocast_precision(torch.device("cpu")) == "bf16"
    assert spectral._autocast_precision(torch.device("cpu")) == "fp32"
