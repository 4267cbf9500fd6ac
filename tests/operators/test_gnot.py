"""GNOT: normalized attention, several input functions, geometric gating (notes Part C, 8-14)."""

import json

import pytest
import torch

from operators import GNOT, OperatorConfigError, WidthSpec
from operators.gnot import GatedMixture
from operators.pointset import normalized_attention, normalized_attention_weights
from tests.operator_helpers import adam_loss_drop, large_square_tensors, pad_batch, smooth_regression

WIDTH_PARAMS = [("standard", None), ("mup", 8)]


def _model(width_parametrization="standard", base_width=None, **kw):
    kw = dict(dict(width=16, layers=2, heads=2, experts=3), **kw)
    return GNOT(2, [1, 0], 2, theta_dim=3, width_parametrization=width_parametrization, base_width=base_width, **kw)


def _inputs(b=2, nq=20, n1=25, n2=11, dtype=torch.float64, seed=1):
    """Query points, a domain function (coords, a) with n1 points, a boundary shape with n2 points, θ."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=g, dtype=dtype)  # noqa: E731
    query = r(b, nq, 2)
    inputs = [(r(b, n1, 2), torch.randn(b, n1, 1, generator=g, dtype=dtype), None), (r(b, n2, 2), None, None)]
    return query, inputs, r(b, 3)


def _call(model, query, inputs, theta, mask=None):
    return model(query, None, mask, inputs=inputs, theta=theta)


def test_feature_softmax_queries_and_keys_are_distributions():
    block = _model().double().blocks[0]
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    q = block.cross.feature_softmax_query(x)
    assert q.shape == (2, 2, 9, 8) and (q > 0).all()
    torch.testing.assert_close(q.sum(-1), torch.ones(2, 2, 9, dtype=torch.float64))


def test_attention_weights_are_convex_and_constants_pass_through():
    q = torch.randn(2, 3, 7, 5, dtype=torch.float64).softmax(-1)
    k = torch.randn(2, 3, 11, 5, dtype=torch.float64).softmax(-1)
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[1, 6:] = False
    w = normalized_attention_weights(q, k, mask)
    assert (w[:, :, :, :6] > 0).all() and (w[1, :, :, 6:] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 7, dtype=torch.float64))
    v = torch.full((2, 3, 11, 4), 2.5, dtype=torch.float64)
    v[1, :, 6:] = 1e6  # padded values never count
    torch.testing.assert_close(normalized_attention(q, k, v, mask), torch.full((2, 3, 7, 4), 2.5, dtype=torch.float64))
    v = torch.randn(2, 3, 11, 4, dtype=torch.float64)
    torch.testing.assert_close(normalized_attention(q, k, v, mask), w @ (v * mask[:, None, :, None]))


@pytest.mark.parametrize("theta_mode", ["token", "query"])
@pytest.mark.parametrize("width_parametrization,base_width", WIDTH_PARAMS)
def test_linear_path_equals_quadratic_reference(theta_mode, width_parametrization, base_width):
    model = _model(width_parametrization, base_width, theta_mode=theta_mode).double()
    reference = GNOT(**dict(model.config, attention_impl="quadratic")).double()
    reference.load_state_dict(model.state_dict())
    query, inputs, theta = _inputs()
    torch.testing.assert_close(
        _call(model, query, inputs, theta), _call(reference, query, inputs, theta), rtol=1e-10, atol=1e-10
    )


def test_one_query_projection_and_separate_key_value_projections_per_input():
    model = _model()
    cross = model.blocks[0].cross
    assert len(cross.keys) == len(cross.values) == 3  # two input functions + the θ token
    assert len(model.blocks[0].norm_inputs) == 3 and len(model.input_encoders) == 2
    assert len({id(k.weight) for k in cross.keys}) == 3


def test_point_permutations_and_duplications():
    """Invariant to permuting or duplicating an input function's points, equivariant in the query points."""
    model = _model().double()
    query, inputs, theta = _inputs()
    out = _call(model, query, inputs, theta)
    (c1, f1, _), (c2, _, _) = inputs
    p1, p2, pq = torch.randperm(c1.shape[1]), torch.randperm(c2.shape[1]), torch.randperm(query.shape[1])
    permuted = [(c1[:, p1], f1[:, p1], None), (c2[:, p2], None, None)]
    torch.testing.assert_close(_call(model, query[:, pq], permuted, theta), out[:, pq], rtol=1e-10, atol=1e-10)
    # each input is normalised on its own: doubling one input's points changes nothing
    doubled = [(torch.cat([c1, c1], 1), torch.cat([f1, f1], 1), None), (c2, None, None)]
    torch.testing.assert_close(_call(model, query, doubled, theta), out, rtol=1e-10, atol=1e-10)
    # ... whereas one attention over all keys pooled together would shift weight towards it
    pooled = GNOT(2, [1], 2, width=16, layers=2, heads=2).double()
    pooled_inputs = [(torch.cat([c1, c2], 1), torch.cat([f1, torch.zeros_like(c2[..., :1])], 1), None)]
    pooled_doubled = [(torch.cat([c1, c1, c2], 1), torch.cat([f1, f1, torch.zeros_like(c2[..., :1])], 1), None)]
    assert not torch.allclose(_call(pooled, query, pooled_inputs, None), _call(pooled, query, pooled_doubled, None))


@pytest.mark.parametrize("width_parametrization,base_width", WIDTH_PARAMS)
def test_padded_batch_equals_each_sample_alone(width_parametrization, base_width):
    model = _model(width_parametrization, base_width).double()
    sizes = [(20, 25, 11), (7, 13, 16), (14, 30, 5)]  # (queries, input 1, input 2) per sample
    samples = [_inputs(1, *s, seed=10 + i) for i, s in enumerate(sizes)]
    query, qmask = pad_batch([q[0] for q, _, _ in samples])
    c1, m1 = pad_batch([i[0][0][0] for _, i, _ in samples])
    f1, _ = pad_batch([i[0][1][0] for _, i, _ in samples])
    c2, m2 = pad_batch([i[1][0][0] for _, i, _ in samples])
    theta = torch.cat([t for _, _, t in samples])
    out = _call(model, query, [(c1, f1, m1), (c2, None, m2)], theta, qmask)
    assert torch.isfinite(out).all() and (out[~qmask] == 0).all()
    for i, (q, inputs, t) in enumerate(samples):
        torch.testing.assert_close(out[i, : q.shape[1]], _call(model, q, inputs, t)[0], rtol=1e-10, atol=1e-10)


def test_query_point_set_is_the_default_input_function():
    model = GNOT(2, 1, 1, width=16, layers=1, heads=2).double()
    coords, features = torch.rand(2, 12, 2, dtype=torch.float64), torch.randn(2, 12, 1, dtype=torch.float64)
    torch.testing.assert_close(model(coords, features), model(coords, None, inputs=[(coords, features, None)]))


def test_gate_sees_only_the_query_coordinates():
    model = _model().double()
    seen = []
    hook = model.blocks[0].gate.register_forward_hook(lambda mod, args, out: seen.append((args[0], out.softmax(-1))))
    query, inputs, theta = _inputs()
    _call(model, query, inputs, theta)
    _, other_inputs, other_theta = _inputs(seed=7)
    _call(model, query, other_inputs, other_theta)  # other functions, same query coordinates
    _call(model, query + 0.1, inputs, theta)
    hook.remove()
    assert seen[0][0].shape[-1] == 2 and torch.equal(seen[0][0], query)
    torch.testing.assert_close(seen[1][1], seen[0][1], rtol=0, atol=0)
    assert not torch.allclose(seen[2][1], seen[0][1])
    torch.testing.assert_close(seen[0][1].sum(-1), torch.ones(2, 20, dtype=torch.float64))


def test_one_expert_mixture_is_a_plain_ffn():
    mixture = GatedMixture(8, 1, 2, WidthSpec("standard", 8, None)).double()
    expert = mixture.experts[0]
    plain = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)).double()
    with torch.no_grad():
        plain[0].weight.copy_(expert.fc1.weight), plain[0].bias.copy_(expert.fc1.bias)
        plain[2].weight.copy_(expert.fc2.weight), plain[2].bias.copy_(expert.fc2.bias)
    z = torch.randn(2, 9, 8, dtype=torch.float64)
    gate = torch.randn(2, 9, 1, dtype=torch.float64).softmax(-1)  # K = 1: exactly 1
    torch.testing.assert_close(mixture(z, gate), plain(z), rtol=0, atol=0)
    # in a model with K = 1 the gate gets no gradient
    model = _model(experts=1).double()
    query, inputs, theta = _inputs()
    _call(model, query, inputs, theta).sum().backward()
    assert all(p.grad is None or (p.grad == 0).all() for p in model.blocks[0].gate.parameters())


def test_linear_path_allocates_no_n_by_m_tensor():
    n = 1024
    model = GNOT(2, [1], 1, width=16, layers=1, heads=2)
    query, c1, f1 = torch.rand(1, n, 2), torch.rand(1, 2 * n, 2), torch.randn(1, 2 * n, 1)
    step = lambda m: m(query, None, inputs=[(c1, f1, None)]).sum().backward()  # noqa: E731
    assert large_square_tensors(lambda: step(model), n) == []
    reference = GNOT(**dict(model.config, attention_impl="quadratic"))
    assert large_square_tensors(lambda: step(reference), n)


@pytest.mark.parametrize("width_parametrization,base_width", WIDTH_PARAMS)
def test_learns_a_smooth_map(width_parametrization, base_width):
    coords, a, u = smooth_regression(4, 48)
    model = GNOT(
        2,
        1,
        1,
        width=16,
        layers=2,
        heads=2,
        experts=2,
        width_parametrization=width_parametrization,
        base_width=base_width,
    )
    first, last = adam_loss_drop(model, lambda: model(coords, a), u, steps=30)
    assert last < 0.5 * first


def test_config_round_trip_and_errors():
    model = _model("mup", 8, theta_mode="query", input_reduction="sum", self_attention_query_residual=True)
    clone = GNOT(**json.loads(json.dumps(model.config)))
    clone.load_state_dict(model.state_dict())
    query, inputs, theta = _inputs(dtype=torch.float32)
    torch.testing.assert_close(_call(clone, query, inputs, theta), _call(model, query, inputs, theta))
    with pytest.raises(OperatorConfigError, match="theta None"):
        _call(model, query, inputs, None)
    with pytest.raises(OperatorConfigError, match="got 1 input functions"):
        _call(model, query, inputs[:1], theta)
    with pytest.raises(OperatorConfigError, match="inputs None"):
        model(query, None, theta=theta)
    with pytest.raises(OperatorConfigError, match="input function 0 features missing"):
        _call(model, query, [(inputs[0][0], None, None), inputs[1]], theta)
    for kwargs, match in (
        (dict(theta_mode="concat"), "theta_mode"),
        (dict(in_channels=[]), "in_channels"),
        (dict(experts=0), "experts 0"),
    ):
        with pytest.raises(OperatorConfigError, match=match) as err:
            GNOT(**dict(dict(coord_dim=2, in_channels=1, out_channels=1), **kwargs))
        assert "\n" not in str(err.value)
