"""Cost accounting: μTransfer (proxies + target) against tuning the target directly."""

import pytest

from mutransfer._study import load_study
from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.cost import epoch_flops, study_cost
from operators.planning import step_flops
from tests.sweep_helpers import K_ONLY_STUDY


def _trial(epochs: int, device_seconds: float, trainer_seconds: float = 0.0) -> TrialRecord:
    return TrialRecord(
        "t", 0, "completed", {}, {}, 0.1, epochs, device_seconds=device_seconds, trainer_seconds=trainer_seconds
    )


def test_epoch_flops_is_per_sample_step_flops_times_samples():
    study, _ = load_study(K_ONLY_STUDY)
    per_sample = step_flops(
        study.dim,
        study.target_K,
        study.operator.width,
        study.operator.layers,
        (study.problem.resolution,),
        batch=1,
        projection_channels=study.operator.projection_channels,
        padding=study.padding,
    )["total"]
    assert epoch_flops(study, study.target_K) == pytest.approx(
        per_sample * study.problem.n_fit
    )  # the samples trained on: n_train - n_val
    assert epoch_flops(study, study.proxy_K) < epoch_flops(study, study.target_K)


def test_ratio_counts_proxies_plus_target_against_a_direct_sweep():
    study, _ = load_study(K_ONLY_STUDY)
    trials = [
        _trial(20, 10.0, 8.0),  # completed
        _trial(4, 2.0, 1.0),  # pruned by ASHA after the grace period
        _trial(8, 4.0, 3.0),
    ]
    # the target held 2 CPUs for 15 s of Ray Train wall time, of which its trainer ran 6 s
    target = {
        "epochs": 20,
        "device_seconds": 30.0,
        "trainer_seconds": 6.0,
        "num_workers": 1,
        "use_gpu": False,
        "cpus_per_worker": 2,
    }
    cost = study_cost(study, trials, target)
    fp, ft = epoch_flops(study, study.proxy_K), epoch_flops(study, study.target_K)
    assert cost["proxy_flops"] == pytest.approx(32 * fp)
    assert cost["direct_sweep_flops"] == pytest.approx(32 * ft)
    assert cost["target_flops"] == pytest.approx(20 * ft)
    assert cost["mutransfer_vs_direct_flops"] == pytest.approx((32 * fp + 20 * ft) / (32 * ft))
    # direct sweep estimated from the target's training time only: 6 s x 2 CPUs / 20 epochs = 0.6 device-s per
    # epoch; its Ray Train start-up (30 - 12 device-s) is not billed to every epoch
    assert cost["direct_sweep_training_seconds_estimate"] == pytest.approx(32 * 0.6)
    proxy_training = (8.0 + 1.0 + 3.0) * study.resources.cpus_per_trial
    assert cost["mutransfer_vs_direct_training_seconds"] == pytest.approx((proxy_training + 12.0) / (32 * 0.6))


def test_no_target_leaves_ratios_unset():
    study, _ = load_study(K_ONLY_STUDY)
    cost = study_cost(study, [_trial(3, 1.0)], None)
    assert cost["target_flops"] is None and cost["mutransfer_vs_direct_flops"] is None


def test_a_searchs_cost_counts_the_proxy_on_its_own_grid():
    """The default study's proxy trains on 32 of the 128 points: its trials cost that grid's FLOPs per epoch on
    muTransfer's side of --baseline direct, as in the report's compute section (the comparison once counted the
    proxy on the target's grid, overstating muTransfer's FLOPs)."""
    from mutransfer._sweep.baseline import trials_cost
    from mutransfer._sweep.cost import model_epoch_flops
    from tests.repo_paths import ROOT

    study, _ = load_study(ROOT / "studies" / "quick.yaml")
    assert study.proxy_resolution == 32 and study.problem.resolution == 128
    trials = [_trial(20, 10.0, 8.0), _trial(4, 2.0, 1.0)]
    on_its_grid = epoch_flops(study, study.proxy_K, study.operator.width, None, 32)
    on_the_targets = epoch_flops(study, study.proxy_K, study.operator.width)
    assert on_its_grid < 0.5 * on_the_targets
    assert model_epoch_flops(study, at_target=False) == pytest.approx(on_its_grid)
    assert trials_cost(study, trials, at_target=False, input_shape=None)["flops"] == pytest.approx(24 * on_its_grid)
    assert study_cost(study, trials, None)["proxy_flops"] == pytest.approx(24 * on_its_grid)
    target = epoch_flops(study, study.target_K, study.target_width)
    assert trials_cost(study, trials, at_target=True, input_shape=None)["flops"] == pytest.approx(24 * target)
