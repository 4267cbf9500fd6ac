"""ONO: batch-shared whitening, running statistics, linear cost, padding (notes/ono.md §8)."""

import json

import pytest
import torch

from operators import ONO, OperatorConfigError, OrthogonalAttention
from operators.ono import safe_cholesky
from tests.operator_helpers import adam_loss_drop, large_square_tensors, pad_batch, smooth_regression

BLOCKS = ["galerkin", "linear"]
WIDTH_PARAMS = [("standard", None), ("mup", 8)]


def _model(nn_block="galerkin", width_parametrization="standard", base_width=None, **kw):
    kw = dict(dict(width=16, layers=2, heads=2, eigenfunctions=4), **kw)
    return ONO(2, 1, 1, nn_block=nn_block, width_parametrization=width_parametrization, base_width=base_width, **kw)


def _data(b=3, n=30, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, n, 2, generator=g, dtype=dtype), torch.randn(b, n, 1, generator=g, dtype=dtype)


def _ragged_batch(sizes, seed=2):
    samples = [_data(1, n, seed=seed + i) for i, n in enumerate(sizes)]
    coords, mask = pad_batch([c[0] for c, _ in samples])  # padded entries are NaN
    features, _ = pad_batch([f[0] for _, f in samples])
    return samples, coords, features, mask


def test_training_whitening_is_shared_by_the_batch():
    """(1/#points) Σ_b ψ_bᵀψ_b = I in training mode, one L for the batch, per-sample Grams are not I."""
    attn = OrthogonalAttention(12, 5).double().train()
    x = torch.randn(4, 50, 12, dtype=torch.float64) + torch.linspace(-1, 1, 4, dtype=torch.float64)[:, None, None]
    mask = torch.ones(4, 50, dtype=torch.bool)
    mask[2, 35:] = False
    x[2, 35:] = 1e3  # padding must not enter the statistics
    psi = attn.eigenfunctions_of(x, mask)
    total = mask.sum()
    second_moment = torch.einsum("bnk,bnl->kl", psi, psi) / total
    torch.testing.assert_close(second_moment, torch.eye(5, dtype=torch.float64), rtol=0, atol=1e-10)
    grams = [psi[b, mask[b]].T @ psi[b, mask[b]] / mask[b].sum() for b in range(4)]
    assert all((g - torch.eye(5, dtype=torch.float64)).abs().max() > 1e-2 for g in grams)
    # a single lower-triangular L: ψ_b Lᵀ = ĝ_b for every sample
    g = attn.proj(x) * mask[..., None]
    factor = torch.linalg.cholesky(torch.einsum("bnk,bnl->kl", g, g) / total)
    torch.testing.assert_close(psi @ factor.T, g, rtol=1e-10, atol=1e-10)
    assert (psi[~mask] == 0).all()


def test_running_second_moment_updates_like_batchnorm():
    attn = OrthogonalAttention(8, 3, momentum=0.25).double().train()
    assert torch.equal(attn.running_second_moment, torch.eye(3, dtype=torch.float64))
    mask = torch.ones(2, 20, dtype=torch.bool)
    batches = [torch.randn(2, 20, 8, dtype=torch.float64) for _ in range(3)]
    moments = []
    for x in batches:
        attn.eigenfunctions_of(x, mask)
        g = attn.proj(x)
        moments.append(torch.einsum("bnk,bnl->kl", g, g).detach() / 40)
    expected = moments[0]  # the first batch initialises the buffer
    for c in moments[1:]:
        expected = 0.75 * expected + 0.25 * c
    torch.testing.assert_close(attn.running_second_moment, expected, rtol=1e-12, atol=1e-12)
    assert int(attn.num_batches_tracked) == 3
    # evaluation: the buffer is what is whitened with, and it does not move
    attn.eval()
    x = torch.randn(1, 20, 8, dtype=torch.float64)
    psi = attn.eigenfunctions_of(x, torch.ones(1, 20, dtype=torch.bool))
    factor = torch.linalg.cholesky(expected)
    torch.testing.assert_close(psi @ factor.T, attn.proj(x), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(attn.running_second_moment, expected, rtol=0, atol=0)
    assert int(attn.num_batches_tracked) == 3


def test_running_estimate_is_saved_in_the_state_dict():
    model = _model()
    coords, features = _data(dtype=torch.float32)
    model.train()
    model(coords, features)
    keys = [k for k in model.state_dict() if k.endswith("running_second_moment")]
    assert len(keys) == 2
    clone = ONO(**json.loads(json.dumps(model.config)))
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(clone(coords, features), model(coords, features), rtol=0, atol=0)


@pytest.mark.parametrize("nn_block", BLOCKS)
def test_evaluation_is_deterministic_and_independent_of_batch_composition(nn_block):
    model = _model(nn_block).double()
    model.train()
    model(*_data(seed=5))  # sets the running statistics
    model.eval()
    samples, coords, features, mask = _ragged_batch((12, 30, 21))
    out = model(coords, features, mask)
    torch.testing.assert_close(model(coords, features, mask), out, rtol=0, atol=0)
    for i, (c, f) in enumerate(samples):
        torch.testing.assert_close(out[i, : c.shape[1]], model(c, f)[0], rtol=1e-10, atol=1e-10)
    assert torch.isfinite(out).all() and (out[~mask] == 0).all()
    # other companions in the batch change nothing
    other = model(
        torch.cat([coords[:1], torch.rand(2, 30, 2, dtype=torch.float64)]),
        torch.cat([features[:1], torch.randn(2, 30, 1, dtype=torch.float64)]),
        torch.cat([mask[:1], torch.ones(2, 30, dtype=torch.bool)]),
    )
    torch.testing.assert_close(other[0], out[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("nn_block", BLOCKS)
def test_training_mode_padding_changes_nothing(nn_block):
    """Extra padded points (NaN) change neither the outputs at real points nor the running statistics."""
    samples, coords, features, mask = _ragged_batch((12, 30, 21))
    wide_coords = torch.cat([coords, torch.full((3, 7, 2), float("nan"), dtype=torch.float64)], dim=1)
    wide_features = torch.cat([features, torch.full((3, 7, 1), float("nan"), dtype=torch.float64)], dim=1)
    wide_mask = torch.cat([mask, torch.zeros(3, 7, dtype=torch.bool)], dim=1)
    a, b = _model(nn_block).double().train(), _model(nn_block).double().train()
    b.load_state_dict(a.state_dict())
    out_a, out_b = a(coords, features, mask), b(wide_coords, wide_features, wide_mask)
    torch.testing.assert_close(out_b[:, :30], out_a, rtol=1e-10, atol=1e-10)
    for block_a, block_b in zip(a.orthogonal_attentions(), b.orthogonal_attentions()):
        torch.testing.assert_close(block_b.running_second_moment, block_a.running_second_moment, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nn_block", BLOCKS)
@pytest.mark.parametrize("width_parametrization,base_width", WIDTH_PARAMS)
def test_linear_path_equals_explicit_kernel(nn_block, width_parametrization, base_width):
    """ψ diag(μ) [ψᵀ (h W_V)] / n equals the explicit (ψ diag(μ) ψᵀ / n) h W_V, in both modes."""
    model = _model(nn_block, width_parametrization, base_width).double()
    reference = ONO(**dict(model.config, attention_impl="quadratic")).double()
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        for attn in model.orthogonal_attentions() + reference.orthogonal_attentions():
            attn.mu.fill_(0.3)
    _, coords, features, mask = _ragged_batch((20, 14))
    for mode in ("train", "eval"):
        model.train(mode == "train"), reference.train(mode == "train")
        torch.testing.assert_close(
            model(coords, features, mask), reference(coords, features, mask), rtol=1e-10, atol=1e-10
        )


@pytest.mark.parametrize("nn_block", BLOCKS)
def test_permutation_equivariance(nn_block):
    model = _model(nn_block).double()
    coords, features = _data()
    perm = torch.randperm(30)
    for mode in (True, False):
        model.train(mode)
        permuted = model(coords[:, perm], features[:, perm])
        torch.testing.assert_close(permuted, model(coords, features)[:, perm], rtol=1e-9, atol=1e-10)


def test_quadrature_mean_makes_the_output_mesh_independent():
    """Repeating every point r times: unchanged with the 1/n quadrature, changed with the papers' plain sum."""
    coords, features = _data(n=16)
    rep = (coords.repeat_interleave(3, dim=1), features.repeat_interleave(3, dim=1))
    for quadrature, invariant in (("mean", True), ("sum", False)):
        model = _model(quadrature=quadrature).double().eval()
        out, out_rep = model(coords, features), model(*rep)[:, ::3]
        assert torch.allclose(out_rep, out, rtol=1e-9, atol=1e-10) == invariant


@pytest.mark.parametrize("orthogonalization", ["none", "layernorm"])
def test_ablation_variants_run(orthogonalization):
    model = _model(orthogonalization=orthogonalization)
    coords, features = _data(dtype=torch.float32)
    model(coords, features).sum().backward()
    assert all(int(a.num_batches_tracked) == 0 for a in model.orthogonal_attentions())


def test_cholesky_adds_jitter_only_when_needed():
    a = torch.randn(6, 3, dtype=torch.float64)
    singular = a @ a.T  # rank 3
    factor = safe_cholesky(singular)
    assert torch.isfinite(factor).all()
    torch.testing.assert_close(factor @ factor.T, singular, rtol=0, atol=1e-3)
    pd = singular + torch.eye(6, dtype=torch.float64)
    torch.testing.assert_close(safe_cholesky(pd), torch.linalg.cholesky(pd), rtol=0, atol=0)


def test_cholesky_of_a_jittered_matrix_has_finite_gradients_and_no_jitter_gives_nan():
    """Branch-free for vmap: the jitter is chosen without gradients and the chosen matrix factored once more, so a
    singular second moment's gradient stays finite (factoring every try in the graph gave NaN); a matrix with NaN
    entries has no factor: NaN, and the training diverges."""
    g = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)  # rank 2: the 4 x 4 moment needs jitter
    factor = safe_cholesky(g.T @ g / 2)
    assert torch.isfinite(factor).all()
    factor.sum().backward()
    assert g.grad is not None and torch.isfinite(g.grad).all()
    bad = torch.full((3, 3), float("nan"), dtype=torch.float64)
    assert torch.isnan(safe_cholesky(bad)).all()


@pytest.mark.parametrize("nn_block", BLOCKS)
def test_linear_path_allocates_no_n_by_n_tensor(nn_block):
    n = 1024
    model = _model(nn_block, layers=1).train()
    coords, features = torch.rand(2, n, 2), torch.randn(2, n, 1)
    assert large_square_tensors(lambda: model(coords, features).sum().backward(), n) == []
    reference = _model(nn_block, layers=1, attention_impl="quadratic").train()
    assert large_square_tensors(lambda: reference(coords, features).sum().backward(), n)


@pytest.mark.parametrize("nn_block", BLOCKS)
@pytest.mark.parametrize("width_parametrization,base_width", WIDTH_PARAMS)
def test_learns_a_smooth_map(nn_block, width_parametrization, base_width):
    coords, a, u = smooth_regression(4, 48)
    model = _model(nn_block, width_parametrization, base_width).train()
    first, last = adam_loss_drop(model, lambda: model(coords, a), u, steps=30)
    assert last < 0.5 * first


def test_configuration_errors_are_one_line():
    for kwargs, match in (
        (dict(nn_block="nystrom"), "nn_block 'nystrom' is unknown"),
        (dict(orthogonalization="qr"), "orthogonalization"),
        (dict(quadrature="trapezoid"), "quadrature"),
        (dict(eigenfunctions=0), "eigenfunctions 0"),
        (dict(momentum=0.0), "momentum"),
    ):
        with pytest.raises(OperatorConfigError, match=match) as err:
            ONO(2, 1, 1, width=16, heads=2, **kwargs)
        assert "\n" not in str(err.value)
