"""The model-size ladder without Ray: the study field, the promotion rule, the μP step between rungs, the plan, the report."""

from __future__ import annotations

import math

import optuna
import pytest

from mutransfer._study import load_study
from mutransfer._study.ladder import LadderSize, rung_study, step_study, target_size
from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.context import ranked
from mutransfer._sweep.ladder import LadderResults, RungResult, keep_count, rung_lines, rung_metrics
from mutransfer.errors import UserInputError
from tests.sweep_helpers import K_ONLY_STUDY


def _study(**overrides):
    return load_study(K_ONLY_STUDY, overrides)[0]


def test_ladder_flag_sets_the_proxy_to_its_first_size_and_says_so():
    study, applied = load_study(K_ONLY_STUDY, {"ladder": [4, 8, 16]})
    assert study.proxy_K == 4 and study.ladder == [4, 8, 16] and study.ladder_keep == 0.5
    assert study.ladder_sizes() == [LadderSize(4, 32), LadderSize(8, 32), LadderSize(16, 32)]
    assert "--proxy-K 4 overrides proxy_K (study file: 6)" in [o.describe() for o in applied]
    # the study keeps its ladder through its YAML (the copy a study directory holds)
    from mutransfer._study import study_from_yaml_text

    assert study_from_yaml_text(study.to_yaml(), "copy").ladder_sizes() == study.ladder_sizes()


def test_no_ladder_by_default():
    assert _study().ladder is None and _study().ladder_sizes() == []


@pytest.mark.parametrize(
    "ladder, fragment",
    [
        ([4, 8, 30], "ladder[2]: K=30 width 32 is larger than the target (K=24 width 32)"),
        ([4, 4], "ladder[1]: K=4 width 32 must be larger than ladder[0]"),
        ([4, 8, 6], "ladder[2]: K=6 width 32 must be larger than ladder[1]"),
        ([4, "a"], "ladder[1]: must be a positive integer or a mapping with K and/or width"),
        ([4], "must be a list of at least 2 model sizes"),
        ([4, {"K": 8, "depth": 3}], "ladder[1]: must be a positive integer or a mapping"),
        ([4, {"K": 8, "width": 64}], "ladder[1]: K=8 width 64 is larger than the target"),
    ],
)
def test_a_ladder_that_does_not_climb_to_the_target_is_refused(ladder, fragment):
    with pytest.raises(UserInputError) as err:
        _study(ladder=ladder)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_ladder_must_start_at_the_proxy():
    with pytest.raises(UserInputError, match=r"ladder\[0\]: K=4 width 32 must be the proxy \(K=6 width 32\)"):
        _study(ladder=[4, 8], proxy_K=6)
    assert _study(ladder=[6, 12], proxy_K=6).ladder_sizes()[0] == LadderSize(6, 32)


def test_both_axes_and_the_width_axis():
    study = _study(ladder=[{"K": 4, "width": 32}, {"K": 8, "width": 48}], target_width=64)
    assert study.ladder_sizes() == [LadderSize(4, 32), LadderSize(8, 48)] and study.proxy_K == 4
    assert target_size(study) == LadderSize(24, 64)


def test_ladder_flag_parses_a_list_and_refuses_a_bad_entry(capsys):
    from mutransfer.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["sweep", "--ladder", "4", "8", "16"]).ladder == [4, 8, 16]
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["sweep", "--ladder", "4", "x"])
    assert exit_.value.code == 2 and "--ladder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["sweep", "--ladder-keep", "1.5"])


@pytest.mark.parametrize(
    "n, keep, available, expected",
    [
        (8, 0.5, 8, 4),
        (4, 0.5, 4, 2),
        (3, 0.5, 3, 2),
        (2, 0.5, 2, 1),
        (1, 0.5, 1, 1),
        (8, 0.25, 8, 2),
        (8, 1.0, 5, 5),
        (8, 0.5, 0, 0),
    ],
)
def test_keep_count(n, keep, available, expected):
    assert keep_count(n, keep, available) == expected


def _trial(key, status, error):
    return TrialRecord(
        trial_id=key,
        index=int(key[1:]) + 1,
        status=status,
        config={"lr": 1e-3},
        hp={"lr": 1e-3, "init_scale": 1.0},
        val_error=error,
        epochs=4,
    )


def test_promotion_ranks_full_budget_trials_first():
    trials = [
        _trial("t0000", "pruned", 0.01),
        _trial("t0001", "completed", 0.05),
        _trial("t0002", "failed", None),
        _trial("t0003", "completed", 0.02),
        _trial("t0004", "diverged", 0.5),
    ]
    assert [t.trial_id for t in ranked(trials)] == ["t0003", "t0001", "t0000", "t0004"]


def _fno_model_lr(study, size: LadderSize, lr: float) -> float:
    from mutransfer._study.models import build_model, effective_spectral_lr

    model = build_model(
        rung_study(study, size), modes=size.K, width=size.width, init_scale=1.0, input_channels=2, output_channels=1
    )
    return effective_spectral_lr(model, lr)


def test_a_rung_step_is_the_transfer_function_and_the_models_apply_it():
    """The μP step 4 → 8 → 16: the record's factor is operators.transfer's, and the built models' effective
    spectral LR at the same master LR changes by exactly that factor (chained steps = the direct step)."""
    from mutransfer._sweep.rescale import transfer as sweep_transfer
    from operators.transfer import transfer

    study = _study(ladder=[4, 8, 16])
    sizes = study.ladder_sizes()
    best = {"hp": {"lr": 2e-3, "init_scale": 1.0, "batch_size": 10}}
    factors = []
    for a, b in zip(sizes, sizes[1:]):
        record, hp = sweep_transfer(step_study(study, a, b), best)
        assert hp["lr"] == 2e-3  # the master LR carries over; the model applies c(K)
        direct = transfer(step_study(study, a, b).transfer_scaling(), 2e-3, init_scale=1.0)
        assert record["lr_factor"] == pytest.approx(direct.lr_factor, rel=1e-12)
        assert record["lr_factor"] == pytest.approx(math.sqrt(math.log(a.K) / math.log(b.K)), rel=1e-12)
        measured = _fno_model_lr(study, b, 2e-3) / _fno_model_lr(study, a, 2e-3)
        assert measured == pytest.approx(record["lr_factor"], rel=1e-9)
        factors.append(record["lr_factor"])
    whole, _ = sweep_transfer(step_study(study, sizes[0], sizes[-1]), best)
    assert math.prod(factors) == pytest.approx(whole["lr_factor"], rel=1e-12)


def test_a_standard_parametrization_step_changes_nothing_and_the_model_agrees():
    """The failing side of the check above: under the standard parametrization the rule's factor is 1, and so is
    the models' ratio, which μP's √(log K) factor would not match."""
    import dataclasses

    from mutransfer._sweep.rescale import transfer as sweep_transfer

    study = dataclasses.replace(_study(ladder=[4, 8]), parametrization="standard")
    a, b = study.ladder_sizes()
    record, _ = sweep_transfer(step_study(study, a, b), {"hp": {"lr": 2e-3, "init_scale": 1.0}})
    measured = _fno_model_lr(study, b, 2e-3) / _fno_model_lr(study, a, 2e-3)
    assert record["lr_factor"] == 1.0 and measured == pytest.approx(1.0)
    assert measured != pytest.approx(math.sqrt(math.log(4) / math.log(8)), rel=1e-3)


def test_preset_plan_hands_out_its_configurations_without_asha(tmp_path):
    from mutransfer._sweep.plan import DONE, SearchPlan

    study = _study(ladder=[4, 8])
    preset = [{"lr": 1e-3, "batch_size": 10}, {"lr": 3e-3, "batch_size": 20}]
    plan = SearchPlan(study, tmp_path / "trials", 1, preset=preset)
    assert plan.total == 2 and isinstance(plan.pruner, optuna.pruners.NopPruner)
    assert plan.next_trial() == ("t0000", preset[0])
    assert plan.next_trial() == ("t0001", preset[1])  # no waiting for t0000's result
    assert plan.next_trial() == DONE
    assert not plan.should_stop("t0000", 1, 1e9)
    plan.record("t0000", {"epoch": 20, "val_error": 0.1}, failed=False)
    again = SearchPlan(study, tmp_path / "trials", 1, preset=preset)  # a resumed rung
    assert again.next_trial() == ("t0001", preset[1]) and again.next_trial() == DONE
    assert set(again.outcomes) == {0}


def _rung(r, K, trials, promoted, parents=None):
    return RungResult(
        r,
        K,
        32,
        trials,
        promoted,
        parents or {},
        lr_factor=None if r == 0 else 0.9,
        cost={"device_seconds": 10.0 * (r + 1), "flops": 1e9},
    )


def test_report_lines_and_metrics_name_every_rung():
    rungs = [
        _rung(0, 4, [_trial("t0000", "completed", 0.02), _trial("t0001", "completed", 0.03)], ["t0000"]),
        _rung(1, 8, [_trial("t0000", "completed", 0.015)], ["t0000"], {"t0000": "t0000"}),
    ]
    ladder = LadderResults(rungs, 0.5)
    summaries = ladder.summaries()
    assert [s["trials"] for s in summaries] == [2, 1] and summaries[1]["table"][0]["from"] == "t0000"
    assert RungResult.from_dict(rungs[1].as_dict()) == rungs[1]
    text = "\n".join(rung_lines(summaries))
    assert "K=4 width 32" in text and "K=8 width 32" in text and "promoted from rung 0's t0000" in text
    metrics = dict(rung_metrics(summaries))
    assert (
        metrics["rung1_best_error"] == 0.015 and metrics["rung0_kept"] == 1 and metrics["rung1_device_seconds"] == 20.0
    )
    assert ladder.extra_cost() == [rungs[1].cost]


def test_attention_operators_climb_in_width_and_refuse_K():
    """An attention operator's ladder is in widths (--ladder sets the proxy width); K has no meaning there."""
    study, applied = load_study("studies/galerkin_darcy_width.yaml", {"ladder": [16, 32, 64]})
    assert study.ladder_sizes() == [LadderSize(None, 16), LadderSize(None, 32), LadderSize(None, 64)]
    assert not any(o.path == "operator.width" for o in applied)  # 16 is already the proxy width
    a, b = study.ladder_sizes()[:2]
    step = step_study(study, a, b).transfer_scaling()
    assert (step.proxy_width, step.target_width) == (16, 32)
    assert rung_study(study, b).target_width == 32 and rung_study(study, b).operator.width == 16  # base width kept
    with pytest.raises(UserInputError, match=r"ladder\[1\]\.K: galerkin has no Fourier modes"):
        load_study("studies/galerkin_darcy_width.yaml", {"ladder": [16, {"K": 8, "width": 32}]})
    with pytest.raises(UserInputError, match="larger than the target"):
        load_study("studies/galerkin_darcy_width.yaml", {"ladder": [16, 128]})


def test_top_k_takes_its_candidates_from_the_last_rung_and_transfers_from_its_size():
    from mutransfer._sweep.context import ProxyResults
    from mutransfer._sweep.session import Made
    from mutransfer._sweep.topk import candidates, carry

    study = _study(ladder=[4, 8, 16], top_k=2)
    proxies = [_trial("t0000", "completed", 0.001), _trial("t0001", "completed", 0.002)]
    last = [_trial("t0000", "completed", 0.03), _trial("t0001", "completed", 0.01), _trial("t0002", "pruned", 0.02)]
    ladder = LadderResults([_rung(0, 4, proxies, ["t0000"]), _rung(2, 16, last, ["t0001", "t0000"])], 0.5)
    made = Made(made_proxies=ProxyResults(proxies, proxies[0], 1), final_search=ladder.final_search(study))
    search = made.final(study)
    assert [t.val_error for t in candidates(search, 2)] == [0.01, 0.03]  # the last rung's, not the proxies' best
    record = carry(search, made.made_transfer, _trial("t0001", "completed", 0.01)).record
    assert (record["proxy_modes"], record["target_modes"]) == (16, 24)
    assert record["lr_factor"] == pytest.approx(math.sqrt(math.log(16) / math.log(24)))
    assert "rung 2's best 2 (t0001, t0000; --top-k)" in "\n".join(rung_lines(ladder.summaries()))


def test_top_k_beyond_the_last_rung_and_widths_the_heads_do_not_divide_are_refused():
    from mutransfer._study.ladder import planned_rung_trials

    study = _study(ladder=[4, 8, 16], ladder_keep=0.25, top_k=1)
    assert planned_rung_trials(study) == [8, 2, 1]
    with pytest.raises(
        UserInputError, match=r"search.top_k: 3 is more than the 1 trial\(s\) the ladder's last rung will hold"
    ):
        _study(ladder=[4, 8, 16], ladder_keep=0.25, top_k=3)
    assert _study(ladder=[4, 8, 16], top_k=2).search.top_k == 2  # 8 -> 4 -> 2
    with pytest.raises(UserInputError, match=r"ladder\[1\]: width 18 is not divisible by operator.heads 4"):
        load_study("studies/galerkin_darcy_width.yaml", {"ladder": [16, 18, 64]})


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--ladder", "4", "30"], "ladder[1]: K=30 width 16 is larger than the target (K=24 width 64)"),
        (
            ["--ladder", "4", "8", "16", "--ladder-keep", "0.25", "--top-k", "3"],
            "search.top_k: 3 is more than the 1 trial(s)",
        ),
        (["--ladder", "4", "x"], "argument --ladder: 'x' is not an integer"),
        (["--ladder-keep", "1.5"], "--ladder-keep"),
    ],
)
def test_the_cli_refuses_a_bad_ladder_with_one_line_and_exit_2_before_anything_exists(
    tmp_path, monkeypatch, capsys, argv, fragment
):
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    try:
        code = main(["sweep", *argv])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and fragment in err[0]
    assert list(tmp_path.iterdir()) == []  # no study folder, no store
