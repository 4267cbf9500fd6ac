"""`proxy_resolution`: a proxy that trains on a coarser grid than the target (issue "Proxies that pay", item 1).

Light tests (no Ray): the study field and its checks, the coarsened selection split against the loader's own
striding, the transfer rule, and the memory and FLOP counts at the proxy's grid.
"""

from __future__ import annotations

import pytest
import torch

from mutransfer._study import load_study
from mutransfer._study.memory import plan_step
from mutransfer._study.models import proxy_split
from mutransfer._sweep.cost import epoch_flops
from mutransfer._sweep.cost_estimate import estimate_proxy_cost
from mutransfer.data._hdf5_io import write_dataset
from mutransfer.data._loading import load_split
from mutransfer.data._validation import carve_validation, coarsen
from mutransfer.errors import UserInputError
from operators import OperatorConfigError
from operators.transfer import Scaling, resolution_transfer_factor, transfer
from tests.sweep_helpers import K_ONLY_STUDY


def test_a_coarser_proxy_grid_is_declared_once_and_reported_everywhere():
    study, applied = load_study(K_ONLY_STUDY, {"proxy_resolution": 64})
    assert applied[0].flag == "--proxy-resolution" and study.scales_resolution
    assert study.proxy_grid_shape == (64,) and study.grid_shape == (128,)
    assert study.scale_text() == "K 6 -> 24, grid 64 -> 128"
    assert study.scaling()["proxy_resolution"] == 64 and study.scaling()["target_resolution"] == 128
    s = study.transfer_scaling()
    assert (s.proxy_resolution, s.target_resolution) == (64, 128)
    plain, _ = load_study(K_ONLY_STUDY)
    assert not plain.scales_resolution and plain.scaling()["proxy_resolution"] is None
    assert plain.transfer_scaling().scales_resolution is False


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"proxy_resolution": 60}, "proxy_resolution: 60 is not a coarser grid problem.resolution 128 strides to"),
        ({"proxy_resolution": 128}, "proxy_resolution: 128 is not a coarser grid"),
        (
            {"proxy_resolution": 8},
            "proxy_K: modes 6 too large for grid size 8 on the last axis: need K <= N/2+1; use "
            "K <= 5 or a finer grid (training grid 8 = proxy_resolution 8 + padding 0)",
        ),
        ({"proxy_resolution": 32, "ladder": [6, 12, 24]}, "a ladder's rungs train at the target's grid"),
    ],
)
def test_a_proxy_grid_that_cannot_be_is_refused_in_one_line(overrides, fragment):
    with pytest.raises(UserInputError) as info:
        load_study(K_ONLY_STUDY, overrides)
    message = str(info.value)
    assert "\n" not in message and fragment in message
    assert "(set by --proxy-resolution)" in message or "proxy_K" in fragment


def _burgers_file(tmp_path):
    from mutransfer.data._burgers import generate_burgers

    return write_dataset(tmp_path / "b.h5", generate_burgers(12, 128, seed=0, progress=False))


def _darcy_file(tmp_path):
    from mutransfer.data._darcy import generate_darcy

    return write_dataset(tmp_path / "d.h5", generate_darcy(10, 33, seed=0, progress=False))


@pytest.mark.parametrize(
    "make, problem, full, coarse, periodic",
    [(_burgers_file, "burgers", 128, 32, True), (_darcy_file, "darcy", 33, 17, False)],
)
def test_the_coarse_selection_split_is_the_data_the_loader_gives_at_the_coarse_grid(
    tmp_path, make, problem, full, coarse, periodic
):
    """Striding the loaded split (periodic: 0, s, …, N − s; node grid: 0, s, …, N − 1) gives exactly the samples the
    loader gives when asked for the coarse resolution; the validation rows stay validation rows, no test row."""
    path = make(tmp_path)
    fine = load_split(path, n_train=8, n_test=2, resolution=full, problem=problem)
    direct = load_split(path, n_train=8, n_test=2, resolution=coarse, problem=problem)
    _, selection = carve_validation(fine, 2)
    _, direct_selection = carve_validation(direct, 2)
    dim = len(fine.grid_shape)
    small = coarsen(selection, coarse, periodic=periodic, space_axes=dim)
    assert small.grid_shape == (coarse,) * dim and small.split == "validation"
    for name in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(small, name), getattr(direct_selection, name)), name
    assert small.train_x.untyped_storage().data_ptr() == fine.train_x.untyped_storage().data_ptr(), "copied"


def test_a_streamed_study_cannot_coarsen_its_proxy_grid(tmp_path):
    path = _burgers_file(tmp_path)
    split = load_split(path, n_train=8, n_test=2, resolution=128, problem="burgers", stream=True)
    assert split.streaming
    _, selection = carve_validation(split, 2)
    with pytest.raises(UserInputError, match="^proxy_resolution: .* set problem.stream: false"):
        coarsen(selection, 64, periodic=True, space_axes=1)


def test_proxy_split_coarsens_only_when_the_study_asks(tmp_path):
    path = _burgers_file(tmp_path)
    _, selection = carve_validation(load_split(path, n_train=8, n_test=2, resolution=128, problem="burgers"), 2)
    plain, _ = load_study(K_ONLY_STUDY)
    assert proxy_split(plain, selection) is selection
    study, _ = load_study(K_ONLY_STUDY, {"proxy_resolution": 64})
    assert proxy_split(study, selection).grid_shape == (64,)


def test_the_grid_rule_carries_every_hyperparameter_over_and_says_so():
    assert resolution_transfer_factor(64, 128) == 1.0
    with pytest.raises(OperatorConfigError, match="proxy resolution 1"):
        resolution_transfer_factor(1, 128)
    rec = transfer(Scaling(1, 6, 24, proxy_resolution=64, target_resolution=128), 1e-3, unchanged={"batch_size": 20})
    rows = {q.name: q for q in rec.quantities}
    assert rows["grid_points_per_axis"].proxy == 64 and rows["grid_points_per_axis"].target == 128
    assert rows["batch_size"].factor == 1 and rows["master_lr"].target == 1e-3
    assert any("the proxy trained on 64 points per axis" in n for n in rec.notes)
    same = transfer(Scaling(1, 6, 24), 1e-3)
    assert "grid_points_per_axis" not in {q.name for q in same.quantities}


def test_memory_and_flops_of_the_proxy_are_counted_at_its_grid():
    """The proxy's memory plan is at 64 points; its FLOPs per epoch at 64 are about half those at 128 (every term
    of an FNO step is linear in the points but the FFT's N log N and the fixed K-mode contraction)."""
    study, _ = load_study(K_ONLY_STUDY, {"proxy_resolution": 64})
    plain, _ = load_study(K_ONLY_STUDY)
    assert plan_step(study, target=False, device="cpu").grid == (64,)
    assert plan_step(study, target=True, device="cpu").grid == (128,)
    ratio = epoch_flops(study, 6, 32, None, 64) / epoch_flops(study, 6, 32, None, 128)
    assert 0.4 < ratio < 0.6
    assert estimate_proxy_cost(study, (128, 1), measure=False).flop_ratio == pytest.approx(
        estimate_proxy_cost(plain, (128, 1), measure=False).flop_ratio * ratio
    )


def test_the_cost_line_names_a_coarser_grid_when_the_proxy_is_dear():
    plain, _ = load_study(K_ONLY_STUDY)
    advice = estimate_proxy_cost(plain, (128, 1), measure=False).advice
    assert any("a coarser proxy grid (proxy_resolution 64)" in a for a in advice)


def test_the_same_k_on_both_sides_is_a_study_when_the_grid_scales():
    study, _ = load_study(K_ONLY_STUDY, {"proxy_K": 12, "target_K": 12, "proxy_resolution": 32})
    assert study.scale_text() == "K 12 -> 12, grid 32 -> 128"
    with pytest.raises(UserInputError, match="equal K is fine when the width or the grid scales"):
        load_study(K_ONLY_STUDY, {"proxy_K": 12, "target_K": 12})


def test_a_streamed_study_with_a_proxy_grid_is_refused_when_read(tmp_path):
    """problem.stream: true and proxy_resolution: refused by the reader, before any data is opened."""
    import yaml

    from tests.sweep_helpers import k_only_study_text

    m = yaml.safe_load(k_only_study_text())
    m["problem"]["stream"] = True
    m["proxy_resolution"] = 32
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(m))
    with pytest.raises(UserInputError, match="proxy_resolution: a coarser proxy grid needs the data in memory"):
        load_study(path)
