"""The spectral layer's kernels (operators.contraction) against the einsum/torch.fft formulation."""

import itertools

import pytest
import torch

import operators.spectral as spectral_module
from operators import FNO, plan_fno
from operators.contraction import (
    einsum_contraction,
    packed_to_planar,
    planar_to_packed,
    spectral_contraction,
    truncated_dft,
    truncated_idft,
)
from operators.spectral import SpectralConv
from tests.operator_helpers import saved_activation_bytes

# (dim, grid, modes): odd and even sizes, K = N/2 + 1 on an even last axis (Nyquist kept), 2K = N.
CASES = [
    (1, (16,), 3),
    (1, (9,), 5),
    (2, (12, 9), 3),
    (2, (8, 6), 4),
    (3, (8, 10, 7), 2),
    (3, (6, 6, 4), 3),
]
IDS = [f"{d}d-{'x'.join(map(str, g))}-K{k}" for d, g, k in CASES]


def packed_shape(batch, channels, dim, modes):
    return (batch, channels) + (2 * modes,) * (dim - 1) + (modes,)


def corner_weights(m_in, m_out, dim, modes, dtype=torch.complex64, requires_grad=True):
    return [
        torch.randn((m_in, m_out) + (modes,) * dim, dtype=dtype).requires_grad_(requires_grad)
        for _ in range(2 ** (dim - 1))
    ]


def reference_truncated_spectrum(x, modes, dim):
    """Slice the kept modes out of a full rfftn, packed (…, 2K, …, 2K, K)."""
    z = torch.fft.rfftn(x, dim=tuple(range(-dim, 0)))[..., :modes]
    for axis in range(-2, -dim - 1, -1):
        n = z.shape[axis]
        z = torch.cat([z.narrow(axis, 0, modes), z.narrow(axis, n - modes, modes)], dim=axis)
    return z


def reference_padded_inverse(z, grid):
    """Zero-pad packed modes into the full rfft grid and irfftn."""
    dim, modes = len(grid), z.shape[-1]
    full = z.new_zeros(tuple(z.shape[:-dim]) + tuple(grid[:-1]) + (grid[-1] // 2 + 1,))
    for flags in itertools.product((False, True), repeat=dim - 1):
        dst = tuple(slice(-modes, None) if f else slice(0, modes) for f in flags) + (slice(0, modes),)
        src = tuple(slice(modes, 2 * modes) if f else slice(0, modes) for f in flags) + (slice(0, modes),)
        full[(Ellipsis,) + dst] = z[(Ellipsis,) + src]
    return torch.fft.irfftn(full, s=grid, dim=tuple(range(-dim, 0)))


def grads(outputs, inputs, seed=0):
    g = torch.randn(outputs.shape, dtype=outputs.dtype, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad(outputs, inputs, g)


@pytest.mark.parametrize("dim, grid, modes", CASES, ids=IDS)
@pytest.mark.parametrize("batch", [1, 3])
def test_contraction_equals_einsum_forward_and_backward(dim, grid, modes, batch):
    torch.manual_seed(0)
    m_in, m_out = 4, 5
    x = torch.randn(packed_shape(batch, m_in, dim, modes), dtype=torch.complex64, requires_grad=True)
    weights = corner_weights(m_in, m_out, dim, modes)
    expected = einsum_contraction(x, weights)
    got = planar_to_packed(spectral_contraction(packed_to_planar(x, dim), weights), modes, dim)
    scale = expected.abs().max()
    assert torch.allclose(got, expected, rtol=0, atol=1e-6 * scale.item())
    for g_new, g_ref in zip(grads(got, [x, *weights]), grads(expected, [x, *weights])):
        assert torch.allclose(g_new, g_ref, rtol=0, atol=1e-6 * g_ref.abs().max().item())


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_contraction_gradcheck_complex128(dim):
    torch.manual_seed(0)
    modes, batch, m_in, m_out = 2, 2, 2, 3
    x = torch.randn((2, 2 ** (dim - 1) * modes**dim, batch, m_in), dtype=torch.float64, requires_grad=True)
    weights = corner_weights(m_in, m_out, dim, modes, dtype=torch.complex128)
    assert torch.autograd.gradcheck(lambda x, *w: spectral_contraction(x, w), (x, *weights))


@pytest.mark.parametrize("dim, grid, modes", CASES, ids=IDS)
def test_truncated_transforms_equal_sliced_rfftn_and_padded_irfftn(dim, grid, modes):
    torch.manual_seed(0)
    x = torch.randn((2, 3) + grid, dtype=torch.float64)
    planar = truncated_dft(x, modes, dim)
    assert planar.shape == (2, 2 ** (dim - 1) * modes**dim, 2, 3)
    expected = reference_truncated_spectrum(x, modes, dim)
    assert torch.allclose(
        planar_to_packed(planar, modes, dim), expected, rtol=0, atol=1e-12 * expected.abs().max().item()
    )
    z = torch.randn(planar.shape, dtype=torch.float64)
    expected = reference_padded_inverse(planar_to_packed(z, modes, dim), grid)
    assert torch.allclose(truncated_idft(z, modes, grid), expected, rtol=0, atol=1e-12 * expected.abs().max().item())


@pytest.mark.parametrize("dim, grid, modes", [(1, (7,), 3), (2, (6, 5), 2), (3, (4, 5, 4), 2)])
def test_truncated_transforms_gradcheck(dim, grid, modes):
    torch.manual_seed(0)
    x = torch.randn((1, 2) + grid, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: truncated_dft(x, modes, dim), (x,))
    z = torch.randn((2, 2 ** (dim - 1) * modes**dim, 1, 2), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: truncated_idft(z, modes, grid), (z,))


@pytest.mark.parametrize("dim, grid, modes", CASES, ids=IDS)
@pytest.mark.parametrize("transform", ["dft", "fft"])
def test_spectral_layer_equals_einsum_formulation(dim, grid, modes, transform, monkeypatch):
    torch.manual_seed(0)
    conv = SpectralConv(4, 5, modes, dim)
    x = torch.randn((3, 4) + grid, requires_grad=True)
    monkeypatch.setattr(spectral_module, "_CONTRACTION", "einsum")
    expected = conv(x)
    expected_grads = grads(expected, [x, *conv.weights])
    monkeypatch.setattr(spectral_module, "_CONTRACTION", "bmm")
    monkeypatch.setattr(spectral_module, "_TRANSFORM", transform)
    got = conv(x)
    assert torch.allclose(got, expected, rtol=0, atol=2e-6 * expected.abs().max().item())
    for g_new, g_ref in zip(grads(got, [x, *conv.weights]), expected_grads):
        assert torch.allclose(g_new, g_ref, rtol=0, atol=2e-6 * g_ref.abs().max().item())


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("padding", [0, 1])
@pytest.mark.parametrize("transform", ["dft", "fft"])
def test_fno_outputs_and_gradients_equal_einsum_formulation(dim, padding, transform, monkeypatch):
    grid = {1: (24,), 2: (12, 10), 3: (8, 8, 6)}[dim]
    torch.manual_seed(0)
    model = FNO(dim, 2, 3, modes=3, width=6, layers=3, padding=padding, projection_channels=8)
    x = torch.randn(2, *grid, 2)
    params = list(model.parameters())
    monkeypatch.setattr(spectral_module, "_CONTRACTION", "einsum")
    expected = model(x)
    expected_grads = grads(expected, params)
    monkeypatch.setattr(spectral_module, "_CONTRACTION", "bmm")
    monkeypatch.setattr(spectral_module, "_TRANSFORM", transform)
    got = model(x)
    assert torch.allclose(got, expected, rtol=0, atol=1e-5 * expected.abs().max().item())
    for g_new, g_ref in zip(grads(got, params), expected_grads):
        assert torch.allclose(g_new, g_ref, rtol=0, atol=1e-5 * g_ref.abs().max().item())


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("transform", ["dft", "fft"])
def test_saved_tensor_bytes_unchanged_and_as_planned(dim, transform, monkeypatch):
    grid = {1: (32,), 2: (16, 12), 3: (8, 8, 6)}[dim]
    model = FNO(dim, 1, 1, modes=2, width=4, layers=3, padding=1, projection_channels=9)
    x = torch.randn(3, *grid, 1)
    monkeypatch.setattr(spectral_module, "_TRANSFORM", transform)
    new, _ = saved_activation_bytes(model, x)
    monkeypatch.setattr(spectral_module, "_CONTRACTION", "einsum")
    old, _ = saved_activation_bytes(model, x)
    plan = plan_fno(dim, 2, 4, 3, grid=grid, batch=3, padding=1, projection_channels=9)
    assert new == old == plan.activations_bytes


def test_contraction_saves_only_the_kept_spectrum():
    x = torch.randn(2, 8, 3, 4, requires_grad=True)  # (2, M = 2·2², B, m_in) for d = 2, K = 2
    weights = corner_weights(4, 5, 2, 2)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        spectral_contraction(x, weights)
    kept = [t for t in saved if all(t is not w for w in weights)]
    assert len(kept) == 1 and kept[0].untyped_storage().nbytes() == x.numel() * 4
    assert sum(t is w for t in saved for w in weights) == len(weights)


@pytest.mark.parametrize("dtype, tolerance", [(torch.bfloat16, 3e-2), (torch.float16, 5e-3)])
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_fno_under_autocast_keeps_the_spectral_layer_in_float32(dim, dtype, tolerance):
    grid = {1: (64,), 2: (16, 16), 3: (8, 8, 8)}[dim]
    torch.manual_seed(0)
    model = FNO(dim, 1, 1, modes=3, width=16, layers=3)
    x = torch.randn(2, *grid, 1)
    expected = model(x)
    with torch.autocast("cpu", dtype=dtype):
        got = model(x)
    assert got.dtype == dtype
    relative = ((got.float() - expected).norm() / expected.norm()).item()
    assert relative < tolerance  # measured: bf16 2e-3…9e-3, fp16 3e-4…1e-3
    got.float().square().mean().backward()
    assert all(p.grad is not None and p.grad.dtype == p.dtype for p in model.parameters())


def test_spectral_layer_returns_the_input_dtype(monkeypatch):
    conv = SpectralConv(4, 4, 3, 2)
    x = torch.randn(1, 4, 8, 8)
    expected = conv(x)
    got = conv(x.bfloat16())
    assert got.dtype == torch.bfloat16
    assert ((got.float() - expected).norm() / expected.norm()).item() < 1e-2
    monkeypatch.setattr(spectral_module, "_SPECTRAL_BF16", "off")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert conv(x).dtype == torch.float32  # FFTs and contraction in fp32 under autocast
    monkeypatch.setattr(spectral_module, "_SPECTRAL_BF16", "on")
    monkeypatch.setattr(spectral_module, "_TRANSFORM", "dft")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert conv(x).dtype == torch.bfloat16  # the bf16 spectrum (CPUs with bf16 units): bf16, as autocast's ops
    assert conv(x.double()).dtype == torch.float64


def _copies_and_selects(modes: int) -> int:
    """aten::copy_ + aten::select calls of one 3D spectral layer's forward + backward."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    conv = SpectralConv(16, 16, modes, 3)
    x = torch.randn(2, 16, 8, 8, 6, requires_grad=True)
    conv(x).sum().backward()  # warm caches (the DFT matrices)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        conv(x).square().sum().backward()
    return sum(e.count for e in prof.key_averages() if e.key in ("aten::copy_", "aten::select"))


@pytest.mark.parametrize("transform", ["dft", "fft"])
def test_spectral_layer_copies_do_not_grow_with_the_modes(transform, monkeypatch):
    """No per-mode loop: a 3D layer's forward + backward makes as many copies at K = 3 as at K = 2."""
    monkeypatch.setattr(spectral_module, "_TRANSFORM", transform)
    assert _copies_and_selects(2) == _copies_and_selects(3) < 200


def test_einsum_formulation_copies_grow_with_the_modes(monkeypatch):
    """The former complex bmm loops over the K³ modes of each corner (what the new one removes)."""
    monkeypatch.setattr(spectral_module, "_CONTRACTION", "einsum")
    assert _copies_and_selects(3) > _copies_and_selects(2) + 300


def test_auto_transform_picks_gemms_for_few_modes_per_fft_length():
    pick = spectral_module._auto_transform
    cpu = torch.device("cpu")
    assert [pick(g, k, cpu) for g, k in [((32, 32, 32), 8), ((64, 64), 12), ((1024,), 16)]] == ["dft"] * 3
    assert [pick(g, k, cpu) for g, k in [((256, 256), 32), ((1024,), 48), ((4096,), 128)]] == ["fft"] * 3
    assert pick((32, 32, 32), 8, torch.device("meta")) == "fft"  # not a CPU: torch.fft (cuFFT on GPUs)
