"""Width coordinate check: ONO's eigenfunctions ψ update flat in width under muP, and the check can fail.

The broken variant is ONO's proj under the readout rule (LR η, ĝ = (m0/m)·W x + b,
the code before the fix): ψ's one-step Adam update grows with the width.
"""

import pytest
import torch

from mutransfer._diagnostics.width_check import (
    Probe,
    eigenfunction_probes,
    grid_point_batch,
    width_coord_check,
)
from mutransfer.errors import UserInputError
from operators import ONO
from operators.width_mup import MuLinear

WIDTHS, BASE, K = [16, 32, 64, 128], 16, 4
SETTINGS = dict(seeds=5, steps=1, lr=1e-4, tolerance=0.3)


def _ono(width_parametrization="mup", proj_role="hidden"):
    def build(m):
        base = BASE if width_parametrization == "mup" else None
        model = ONO(
            2,
            1,
            1,
            width=m,
            layers=2,
            heads=2,
            eigenfunctions=K,
            width_parametrization=width_parametrization,
            base_width=base,
        )
        if proj_role != "hidden":
            for attention in model.orthogonal_attentions():
                attention.proj = MuLinear(m, K, proj_role, model.width_spec)
        return model

    return build


def _psi_check(build, **overrides):
    torch.set_num_threads(1)
    return width_coord_check(
        build, WIDTHS, grid_point_batch(4, 12), probes=eigenfunction_probes(build(BASE)), **(SETTINGS | overrides)
    )


@pytest.fixture(scope="module")
def previous_num_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_proj_is_hidden_under_mup():
    model = _ono()(64)
    for attention in model.orthogonal_attentions():
        assert attention.proj.role == "hidden" and attention.proj.multiplier == 1.0


def test_ono_eigenfunction_update_is_flat_under_mup(previous_num_threads):
    # 16 seeds: psi_0's per-seed slopes spread by ~0.3, so over 5 seeds the t CI is +0.04 [-0.35, +0.43], wider
    # than +-0.3 (the old percentile bootstrap gave [-0.20, +0.28], under-covering); over 16, +0.03 [-0.11, +0.18]
    result = _psi_check(_ono(), seeds=16)
    for name in ("psi_0", "psi_1"):
        curve = result.curve(name)
        assert curve.verdict == "flat", curve.describe()


@pytest.mark.parametrize("variant", [("mup", "output"), ("standard", "hidden")])
def test_the_check_fails_for_a_readout_proj_and_for_the_standard_parametrization(variant, previous_num_threads):
    result = _psi_check(_ono(*variant))
    for name in ("psi_0", "psi_1"):
        curve = result.curve(name)
        assert curve.verdict == "grows" and curve.estimate.mean > 0.4, curve.describe()


def test_module_probes_and_errors():
    build = _ono()
    result = width_coord_check(
        build, [16, 32], grid_point_batch(1, 4), probes=["blocks.1.out_ffn.fc2"], seeds=1, steps=1, lr=1e-3
    )
    assert [c.name for c in result.curves] == ["output", "blocks.1.out_ffn.fc2"]
    assert all(v > 0 for c in result.curves for v in c.values)
    assert result.as_dict()["curves"][1]["widths"] == [16, 32]
    for kwargs, match in (
        (dict(widths=[16]), "at least two widths"),
        (dict(widths=[16, 32], lr=0.0), "lr 0.0"),
        (dict(widths=[16, 32], probes=["output"]), "distinct and not 'output'"),
        (dict(widths=[16, 32], probes=[Probe("x", "blocks.7")]), "blocks.7"),
    ):
        with pytest.raises(UserInputError, match=match):
            width_coord_check(build, batch=grid_point_batch(1, 4), seeds=1, **kwargs)
