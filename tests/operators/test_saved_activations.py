"""The activations a user's model keeps for backward, measured on the meta device (operators.saved_activations), and
the factory family's memory plan that holds them (operators.factory.FactoryPlan)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mutransfer._training.memory import check_fits
from mutransfer.errors import UserInputError
from operators.factory import FactoryPlan
from operators.saved_activations import saved_activations


def _user_fno(width: int = 16) -> nn.Module:
    """The user's 1-D spectral operator of the factory tests (tests/sweep/test_user_operator.py), channel-last (B, N, 2)
    in, (B, N, 1) out, built on the current default device."""
    from tests.sweep.test_user_operator import USER_MODULE

    module: dict[str, object] = {}
    exec(USER_MODULE, module)  # the module's text, as a user's file would hold it
    build = module["build"]
    assert callable(build)
    return build(K=8, width=width, in_channels=2, out_channels=1)


def _real_saved_bytes(model: nn.Module, x: torch.Tensor) -> int:
    """The same count on real tensors: each storage autograd saves once (by address), parameters excluded, the
    output included."""
    owned = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}
    refs = []

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in owned:
            kept[s.data_ptr()] = max(kept.get(s.data_ptr(), 0), s.nbytes())
            refs.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x.requires_grad_())
    kept[out.untyped_storage().data_ptr()] = out.untyped_storage().nbytes()
    return sum(kept.values())


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_the_meta_measurement_equals_what_autograd_keeps_on_real_tensors(batch):
    torch.manual_seed(0)
    real = _user_fno()
    with torch.device("meta"):
        meta = _user_fno()
    saved = saved_activations(meta, (64, 2))
    assert saved is not None and saved.per_sample > 0
    assert saved.at(batch) == _real_saved_bytes(real, torch.randn(batch, 64, 2))
    # a wider model keeps more per sample
    with torch.device("meta"):
        wider = saved_activations(_user_fno(width=32), (64, 2))
    assert wider is not None and wider.per_sample > saved.per_sample


def test_a_forward_that_cannot_run_on_the_meta_device_is_unknown():
    class Reads(nn.Module):  # a data-dependent branch: .item() has no value on the meta device
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 1)

        def forward(self, x):
            return self.lin(x) * 2 if x.sum().item() > 0 else self.lin(x)

    with torch.device("meta"):
        model = Reads()
    assert saved_activations(model, (8, 2)) is None
    plan = FactoryPlan(10, "Reads", params_bytes=40, saved=None, batch=4)
    assert plan.activations_bytes is None and plan.total_bytes == 4 * 40  # parameters only, as before


def test_a_step_that_fits_by_its_parameters_but_not_its_activations_is_refused_with_the_batch_that_fits():
    with torch.device("meta"):
        model = _user_fno()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    saved = saved_activations(model, (64, 2))
    assert saved is not None
    plan = FactoryPlan(sum(p.numel() for p in model.parameters()), "UserFNO K=8 width 16", "fp32", params, saved, 64)
    assert plan.activations_bytes == saved.at(64) and plan.total_bytes == 4 * params + saved.at(64)
    limit = 4 * params + saved.at(16)  # the parameters fit, 64 samples' activations do not, 16 samples' do
    assert FactoryPlan(plan.total_params, plan.label, "fp32", params).fits(limit)  # what parameters alone said
    with pytest.raises(UserInputError, match=r"a batch size of at most 16\b") as refused:
        check_fits(plan, "cpu", limit=limit)
    # bf16 is not offered: its plan would count the parameters only and "fit" without knowing its activations
    assert "bf16" not in str(refused.value)
    assert plan.replan(batch=16).fits(limit)
    # under mixed precision the fp32 measurement is not the step's: unknown, parameters only
    assert plan.replan(batch=64, precision="bf16").activations_bytes is None
    # what a replan does not name stays
    assert plan.replan(precision="bf16").batch == 64 and plan.replan(batch=16).precision == "fp32"


def test_the_measurement_does_not_depend_on_the_callers_grad_mode_or_default_device():
    with torch.device("meta"):
        model = _user_fno()
    saved = saved_activations(model, (64, 2))
    with torch.no_grad():
        assert saved_activations(model, (64, 2)) == saved

    class MakesATensor(nn.Module):  # a tensor made in forward without a device lands on the meta device too
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 3)

        def forward(self, x):
            return torch.nn.functional.gelu(self.lin(x)) + torch.zeros(3)

    with torch.device("meta"):
        made = MakesATensor()
    found = saved_activations(made, (8, 2))
    assert found is not None and found.per_sample == 4 * (8 * 2 + 8 * 3 + 8 * 3)  # input, gelu's input, output


def test_neuraloperators_fno_is_measured_as_autograd_keeps_it_on_real_tensors():
    """The model of docs/byo.md (neuraloperator's FNO through mutransfer.neuralop), channel-last (B, 32, 32, 1)."""
    pytest.importorskip("neuralop")
    from mutransfer.neuralop import fno2d

    torch.manual_seed(0)
    real = fno2d(K=4, width=8, in_channels=1, out_channels=1)
    with torch.device("meta"):
        meta = fno2d(K=4, width=8, in_channels=1, out_channels=1)
    saved = saved_activations(meta, (32, 32, 1))
    assert saved is not None
    for batch in (1, 3):
        assert saved.at(batch) == _real_saved_bytes(real, torch.randn(batch, 32, 32, 1))
