"""Galerkin / Fourier Transformer: the invariants of /work/shared/notes/gnot-galerkin.md Part C (1-6)."""

import json

import pytest
import torch

from operators import GalerkinAttention, GalerkinTransformer, OperatorConfigError, WidthSpec
from tests.operator_helpers import adam_loss_drop, large_square_tensors, pad_batch, smooth_regression

TYPES = ["galerkin", "fourier"]
WIDTH_PARAMS = [("standard", None), ("mup", 8)]


def _model(attention_type="galerkin", width_parametrization="standard", base_width=None, **kw):
    kw = dict(dict(width=16, layers=2, heads=2), **kw)
    return GalerkinTransformer(
        2, 1, 1, attention_type=attention_type, width_parametrization=width_parametrization, base_width=base_width, **kw
    )


def _data(b=2, n=40, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    return torch.rand(b, n, 2, generator=g, dtype=dtype), torch.randn(b, n, 1, generator=g, dtype=dtype)


@pytest.mark.parametrize("attention_type", TYPES)
@pytest.mark.parametrize("width_parametrization,base_width", WIDTH_PARAMS)
def test_linear_path_equals_quadratic_reference(attention_type, width_parametrization, base_width):
    model = _model(attention_type, width_parametrization, base_width).double()
    reference = GalerkinTransformer(**dict(model.config, attention_impl="quadratic")).double()
    reference.load_state_dict(model.state_dict())
    coords, features = _data()
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 25:] = False
    torch.testing.assert_close(model(coords, features, mask), reference(coords, features, mask), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attention_type", TYPES)
def test_attention_is_the_explicit_kernel_product(attention_type):
    """z = (Q Kᵀ / n) V with the LayerNorms where the type puts them, computed without the n×n matrix."""
    attn = GalerkinAttention(8, 2, coord_dim=2, attention_type=attention_type).double()
    x, coords = torch.randn(3, 30, 8, dtype=torch.float64), torch.rand(3, 30, 2, dtype=torch.float64)
    q, k, v = attn._qkv(x, coords)
    explicit = attn.attention_matrix(x, coords) @ v
    expected = attn.out(explicit.transpose(1, 2).reshape(3, 30, -1))
    torch.testing.assert_close(attn(x, coords), expected, rtol=1e-10, atol=1e-10)
    assert attn.out.in_features == 2 * (4 + 2)  # heads · (d_h + d_coord): coordinates in every head


def test_layer_norm_placement():
    """Galerkin normalises K and V (rescaling W_K, W_V changes nothing), Fourier normalises Q and K."""
    x = torch.randn(2, 20, 8, dtype=torch.float64)
    for attention_type, invariant, linear in (
        ("galerkin", ("key", "value"), "query"),
        ("fourier", ("query", "key"), "value"),
    ):
        attn = GalerkinAttention(8, 2, coord_dim=0, attention_type=attention_type).double()
        assert set(attn.norms.keys()) == set(invariant)
        for norm in attn.norms.values():
            norm.eps = 1e-14  # exact scale invariance of the LayerNorm
        before = attn(x)
        with torch.no_grad():
            for name in invariant:
                getattr(attn, name).weight.mul_(7.0)
        torch.testing.assert_close(attn(x), before, rtol=1e-6, atol=1e-9)
        with torch.no_grad():
            getattr(attn, linear).weight.mul_(3.0)
        torch.testing.assert_close(attn(x), 3.0 * before, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("attention_type", TYPES)
def test_scale_propagation(attention_type):
    """Zero biases, no coordinates: Attn(c·y) = c·Attn(y) for c > 0 (up to the LayerNorm eps)."""
    attn = GalerkinAttention(8, 2, coord_dim=0, attention_type=attention_type).double()
    for norm in attn.norms.values():
        norm.eps = 1e-14  # "up to LN eps": with the paper's tiny init the default eps is not negligible
    y = torch.randn(2, 25, 8, dtype=torch.float64)
    for c in (0.5, 4.0):
        torch.testing.assert_close(attn(c * y), c * attn(y), rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("attention_type", TYPES)
def test_quadrature_invariance_under_row_repetition(attention_type):
    """Repeating every point r times leaves each point's output unchanged (the 1/n weight)."""
    model = _model(attention_type).double()
    coords, features = _data(n=24)
    out = model(coords, features)
    rep = model(coords.repeat_interleave(3, dim=1), features.repeat_interleave(3, dim=1))
    torch.testing.assert_close(rep[:, ::3], out, rtol=1e-9, atol=1e-10)


def test_no_softmax_some_weights_negative():
    attn = GalerkinAttention(8, 2, coord_dim=2)
    # coordinates in [-1, 1]: coords in [0, 1] alone would give a positive coords·coords term
    weights = attn.attention_matrix(torch.randn(1, 30, 8), 2 * torch.rand(1, 30, 2) - 1)
    assert (weights < 0).any() and (weights > 0).any()


@pytest.mark.parametrize("attention_type", TYPES)
def test_permutation_equivariance(attention_type):
    model = _model(attention_type).double()
    coords, features = _data()
    perm = torch.randperm(40)
    permuted = model(coords[:, perm], features[:, perm])
    torch.testing.assert_close(permuted, model(coords, features)[:, perm], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attention_type", TYPES)
@pytest.mark.parametrize("width_parametrization,base_width", WIDTH_PARAMS)
def test_padded_batch_equals_each_sample_alone(attention_type, width_parametrization, base_width):
    model = _model(attention_type, width_parametrization, base_width).double()
    sizes = (17, 30, 9)
    samples = [_data(1, n) for n in sizes]
    coords, mask = pad_batch([c[0] for c, _ in samples])  # padded entries are NaN
    features, _ = pad_batch([f[0] for _, f in samples])
    out = model(coords, features, mask)
    assert torch.isfinite(out).all() and (out[~mask] == 0).all()
    for i, (c, f) in enumerate(samples):
        torch.testing.assert_close(out[i, : sizes[i]], model(c, f)[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attention_type", TYPES)
def test_linear_path_allocates_no_n_by_n_tensor(attention_type):
    n = 1024
    model = _model(attention_type, layers=1)
    coords, features = torch.rand(1, n, 2), torch.randn(1, n, 1)
    assert large_square_tensors(lambda: model(coords, features).sum().backward(), n) == []
    # the detector does see the quadratic reference
    reference = _model(attention_type, layers=1, attention_impl="quadratic")
    assert large_square_tensors(lambda: reference(coords, features).sum().backward(), n)


def test_mup_scales_the_head_contraction_by_sqrt_base_over_head_dim():
    """muP multiplies z by √(d0_h/d_h) (= attention_scale ratio); at the base width nothing changes."""
    torch.manual_seed(3)
    standard = GalerkinAttention(32, 2, coord_dim=0).double()
    mup = GalerkinAttention(32, 2, coord_dim=0, spec=WidthSpec("mup", 32, 8)).double()
    mup.load_state_dict(standard.state_dict())
    x = torch.randn(2, 10, 32, dtype=torch.float64)
    torch.testing.assert_close(mup(x), standard(x) * (4 / 16) ** 0.5)  # d0_h = 4, d_h = 16, out bias 0
    at_base = GalerkinAttention(32, 2, coord_dim=0, spec=WidthSpec("mup", 32, 32)).double()
    at_base.load_state_dict(standard.state_dict())
    torch.testing.assert_close(at_base(x), standard(x))


@pytest.mark.parametrize("attention_type", TYPES)
@pytest.mark.parametrize("width_parametrization,base_width", WIDTH_PARAMS)
def test_learns_a_smooth_map(attention_type, width_parametrization, base_width):
    coords, a, u = smooth_regression(4, 48)
    model = _model(attention_type, width_parametrization, base_width)
    first, last = adam_loss_drop(model, lambda: model(coords, a), u, steps=30)
    assert last < 0.5 * first


def test_config_round_trip_and_errors():
    model = _model("fourier", "mup", 8, attention_impl="quadratic")
    clone = GalerkinTransformer(**json.loads(json.dumps(model.config)))
    clone.load_state_dict(model.state_dict())
    coords, features = _data(dtype=torch.float32)
    torch.testing.assert_close(clone(coords, features), model(coords, features))
    for kwargs, match in (
        (dict(attention_type="softmax"), "attention_type 'softmax' is unknown"),
        (dict(width=10, heads=4), "width 10 is not divisible by heads 4"),
        (dict(width_parametrization="mup"), "base_width None"),
        (dict(width_parametrization="mup", base_width=6, heads=4), "base_width 6 is not divisible by heads 4"),
        (dict(attention_impl="fast"), "attention_impl"),
    ):
        with pytest.raises(OperatorConfigError, match=match) as err:
            GalerkinTransformer(2, 1, 1, **kwargs)
        assert "\n" not in str(err.value)
    with pytest.raises(OperatorConfigError, match="coords have shape"):
        model(torch.rand(2, 5, 3), torch.rand(2, 5, 1))
    with pytest.raises(OperatorConfigError, match="mask"):
        model(torch.rand(2, 5, 2), torch.rand(2, 5, 1), torch.zeros(2, 5, dtype=torch.bool))
