"""The cost line said before training (mutransfer._sweep.cost_estimate) and `mutransfer plan --study`."""

from __future__ import annotations

import pytest

from mutransfer._study import load_study
from mutransfer._study.models import build_model
from mutransfer._sweep import cost_estimate
from mutransfer._sweep.cost import counted_step_flops
from mutransfer._sweep.cost_estimate import CHEAP_ENOUGH, ProxyCost, estimate_proxy_cost
from mutransfer.cli.main import main
from tests.sweep_helpers import K_ONLY_STUDY


def test_the_expected_study_ratio_is_the_proxys_share_plus_one_target_training_over_the_search():
    """N·E·p + E_t·t against N·E·t: 8 trials x 20 epochs at p/t = 0.5 with a 20-epoch target: 0.5 + 20/160."""
    cost = ProxyCost(50.0, 100.0, trials=8, proxy_epochs=20, target_epochs=20)
    assert cost.flop_ratio == 0.5 and cost.study_ratio(cost.flop_ratio) == pytest.approx(0.625)
    assert cost.time_ratio is None and "0.62x of tuning the target directly" in cost.line()


def test_the_analytic_flops_follow_a_counted_forward_and_backward():
    """The quick study's proxy (K 6) and target (K 24): the planner's FLOPs per epoch against torch's counter on
    one sample (matmuls and FFTs it counts), both models; the ratio of the two counts within 15 %."""
    study, _ = load_study(K_ONLY_STUDY)
    cost = estimate_proxy_cost(study, (128, 1), measure=False)
    counted = [
        counted_step_flops(build_model(study, modes=k, input_channels=1, output_channels=1), (128, 1)) for k in (6, 24)
    ]
    assert cost.flop_ratio == pytest.approx(counted[0] / counted[1], rel=0.15)
    assert cost.proxy_epoch_flops < cost.target_epoch_flops


def test_a_dear_proxy_gets_advice_that_really_cheapens_it_and_a_cheap_one_gets_none():
    """K alone (6 -> 24 at width 32): the proxy costs 0.83x the target per epoch, above 0.3x: the line names a
    narrower proxy, whose cost it quotes (checked: a proxy built that way costs what the advice says). A proxy
    of width 8 for a width-32 target is below 0.3x: no advice."""
    study, _ = load_study(K_ONLY_STUDY)
    dear = estimate_proxy_cost(study, (128, 1), measure=False)
    assert dear.flop_ratio > CHEAP_ENOUGH and "cannot pay for itself" in dear.line()
    assert any("operator.width 16, target_width 32" in a for a in dear.advice)
    narrow, _ = load_study(K_ONLY_STUDY, {"proxy_width": 16, "target_width": 32})
    quoted = float(next(a for a in dear.advice if "operator.width 16" in a).rsplit(": ", 1)[1].rstrip("x"))
    assert estimate_proxy_cost(narrow, (128, 1), measure=False).flop_ratio == pytest.approx(quoted, abs=0.005)
    cheap, _ = load_study(K_ONLY_STUDY, {"proxy_width": 8, "target_width": 32})
    cheap_cost = estimate_proxy_cost(cheap, (128, 1), measure=False)
    assert cheap_cost.flop_ratio < CHEAP_ENOUGH and cheap_cost.advice == () and "cannot pay" not in cheap_cost.line()


def test_a_training_step_is_timed_only_for_small_models(monkeypatch):
    study, _ = load_study(K_ONLY_STUDY)
    timed = estimate_proxy_cost(study, (128, 1))
    assert timed.proxy_step_seconds > 0 and timed.target_step_seconds > 0 and "measured training step" in timed.line()
    monkeypatch.setattr(cost_estimate, "MEASURE_MAX_FLOPS", 0.0)
    untimed = estimate_proxy_cost(study, (128, 1))
    assert untimed.time_ratio is None and "measured" not in untimed.line()


def test_plan_prints_a_studys_cost_line(tmp_path, capsys):
    assert main(["plan", "--study"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("study quick: FNO-1D K=6 width 16 proxy, FNO-1D K=24 width 64 target") and out[
        1
    ].startswith("cost: the proxy costs")


def test_plan_without_a_model_or_a_study_is_one_line_exit_2(capsys):
    assert main(["plan", "--dim", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give --modes, --width, --layers" in err[0] and "--study FILE" in err[0]


def test_a_point_set_study_gets_its_cost_line_from_the_datas_shape():
    """An attention operator on an irregular mesh: FLOPs counted on one packed sample (P points x [coords |
    features | mask]) and a measured step with every point real; without the data's shape, the line says so."""
    from tests.repo_paths import ROOT

    study, _ = load_study(ROOT / "studies" / "ono_darcy_mesh.yaml")
    cost = estimate_proxy_cost(study, (64, 4))
    assert 0 < cost.flop_ratio < 1 and cost.time_ratio is not None and cost.time_ratio > 0
    assert "not known before the data are read" in estimate_proxy_cost(study, None, measure=False).line()


def test_the_searchs_epochs_under_asha_follow_the_plans_rule():
    """Two trials, a rung at epoch 1 of 2, halving: with a window of 1 the second trial is compared with the first
    and stops at the rung half the time (3.5 epochs expected); with a window of 2 it sees no one (4); without a
    rung every trial trains the budget. The study's ratio then uses those epochs: p/t + E_t/S."""
    import dataclasses

    from mutransfer._sweep._asha import expected_search_epochs

    def search(trials: int, epochs: int, grace: int):
        study, _ = load_study(K_ONLY_STUDY, {"num_trials": trials, "epochs": epochs})
        return dataclasses.replace(
            study, budget=dataclasses.replace(study.budget, grace_period=grace, reduction_factor=2)
        )

    assert expected_search_epochs(search(2, 2, 1), 1) == pytest.approx(3.5, abs=0.3)
    assert expected_search_epochs(search(2, 2, 1), 2) == 4.0
    assert expected_search_epochs(search(8, 4, 4), 1) == 32.0
    # eight 15-epoch trials, rungs 3, 6, 12, two at a time: about 78 of 120 epochs (three measured Darcy searches: 81, 51, 84)
    assert 70 < expected_search_epochs(search(8, 15, 3), 2) < 86
    cost = ProxyCost(50.0, 100.0, trials=8, proxy_epochs=20, target_epochs=20, search_epochs=80.0)
    assert cost.study_ratio(0.5) == pytest.approx(0.75) and "about 80 once ASHA stops trials early" in cost.line()
