"""Cost accounting: μTransfer (proxies + target) against tuning the target directly."""

import pytest

from mutransfer.study import load_study
from mutransfer.sweep.context import TrialRecord
from mutransfer.sweep.cost import epoch_flops, study_cost


def _trial(epochs: int, device_seconds: float) -> TrialRecord:
    return TrialRecord("t", 0, "completed", {}, {}, 0.1, epochs, device_seconds=device_seconds)
from operators.planning import step_flops


def test_epoch_flops_is_per_sample_step_flops_times_samples():
    study, _ = load_study(None)
    per_sample = step_flops(study.dim, study.target_K, study.operator.width, study.operator.layers,
                            (study.problem.resolution,), batch=1,
                            projection_channels=study.operator.projection_channels, padding=study.padding)["total"]
    assert epoch_flops(study, study.target_K) == pytest.approx(per_sample * study.problem.n_train)
    assert epoch_flops(study, study.proxy_K) < epoch_flops(study, study.target_K)


def test_ratio_counts_proxies_plus_target_against_a_direct_sweep():
    study, _ = load_study(None)
    trials = [
        _trial(20, 10.0),  # completed
        _trial(4, 2.0),  # pruned by ASHA after the grace period
        _trial(8, 4.0),
    ]
    target = {"epochs": 20, "device_seconds": 30.0}
    cost = study_cost(study, trials, target)
    fp, ft = epoch_flops(study, study.proxy_K), epoch_flops(study, study.target_K)
    assert cost["proxy_flops"] == pytest.approx(32 * fp)
    assert cost["direct_sweep_flops"] == pytest.approx(32 * ft)
    assert cost["target_flops"] == pytest.approx(20 * ft)
    assert cost["mutransfer_vs_direct_flops"] == pytest.approx((32 * fp + 20 * ft) / (32 * ft))
    # direct sweep estimated at the target's measured 1.5 device-s per epoch
    assert cost["direct_sweep_device_seconds_estimate"] == pytest.approx(32 * 1.5)
    assert cost["mutransfer_vs_direct_device_seconds"] == pytest.approx((16.0 + 30.0) / 48.0)


def test_no_target_leaves_ratios_unset():
    study, _ = load_study(None)
    cost = study_cost(study, [_trial(3, 1.0)], None)
    assert cost["target_flops"] is None and cost["mutransfer_vs_direct_flops"] is None
