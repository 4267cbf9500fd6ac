"""`sweep --verify` and `sweep --baseline direct`: the analysis on synthetic landscapes, and both end to end.

The pure tests build target landscapes whose optimum is known (test error a parabola
in log10(lr) around a chosen optimum) and check that the verification finds it —
including cases where the transfer was wrong (the optimum 0.4 decades away, or
outside the grid), so the verdict can fail. The end-to-end tests run a tiny study
on a real local Ray and a real MLflow sqlite store, FNO (K transfer) and the
Galerkin Transformer (width transfer).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mutransfer._sweep.verify import analyse, lr_grid
from tests.journal_helpers import held_by_key
from tests.sweep_helpers import IN_PROCESS, galerkin_mesh_study, mlflow_runs, write_tiny_data, write_tiny_study


def _landscape(transferred: float, optimum: float, seeds: int = 4, points: int = 5, noise: float = 0.0, rng=None):
    """Records: error = 0.01 * exp(2 * (log10 lr - log10 optimum)^2) per seed, with optional multiplicative noise."""
    rng = rng or np.random.default_rng(0)
    records = []
    for seed in range(seeds):
        jitter = rng.normal(0, noise) if noise else 0.0  # each seed's optimum moves a little
        for lr in lr_grid(transferred, points):
            x = math.log10(lr) - math.log10(optimum) - jitter
            records.append(
                {"lr": lr, "seed": seed, "status": "completed", "val_error": 0.01 * math.exp(2 * x * x), "epochs": 3}
            )
    return records


def test_lr_grid_is_at_most_a_quarter_decade_apart_and_holds_the_transferred_lr():
    for points in (3, 4, 5, 9):
        grid = lr_grid(2e-3, points)
        assert len(grid) == points and any(g == pytest.approx(2e-3) for g in grid)
        assert np.allclose(np.diff(np.log10(grid)), 0.25)
    with pytest.raises(ValueError):
        lr_grid(1e-3, 2)


def test_transfer_that_held_has_zero_regret_and_no_distance():
    v = analyse(_landscape(1e-3, 1e-3), 1e-3)
    assert v.distance_decades["mean"] == pytest.approx(0.0, abs=1e-9)
    assert v.regret["mean"] == pytest.approx(0.0, abs=1e-12)
    assert v.optimum_lr == pytest.approx(1e-3) and not v.at_edge
    assert "transfer held" in v.verdict


def test_a_wrong_transfer_is_measured_with_its_distance_and_regret():
    """The target's optimum 0.4 decades above the transferred LR (between grid points): found, with regret > 0."""
    rng = np.random.default_rng(1)
    v = analyse(_landscape(1e-3, 1e-3 * 10**0.4, seeds=5, points=7, noise=0.03, rng=rng), 1e-3)
    d = v.distance_decades
    assert d["n"] == 5 and d["ci"][0] > 0.25 and d["ci"][0] <= 0.4 <= d["ci"][1] + 0.05
    assert v.regret["mean"] > 0.1  # error at the transferred LR at least 10 % above the optimum's
    assert "above the transferred LR" in v.verdict
    assert v.error_at_transferred > v.error_at_optimum


def test_an_optimum_outside_the_grid_is_flagged_not_measured():
    v = analyse(_landscape(1e-3, 1e-1), 1e-3)
    assert v.distance_decades is None and v.optimum_lr is None and v.at_edge
    assert all(s["edge"] == "above" for s in v.seed_optima)
    assert "above the grid for every seed" in v.verdict and "not measured" in v.summary_line()


def test_diverged_points_do_not_count_as_optima():
    records = _landscape(1e-3, 1e-3, seeds=2)
    for r in records:
        if r["lr"] > 1.5e-3:
            r.update(status="diverged", val_error=float("nan"))
    v = analyse(records, 1e-3)
    assert all(s["optimum_lr"] is not None and s["optimum_lr"] <= 1.5e-3 for s in v.seed_optima)


def test_divergence_at_the_transferred_lr_is_reported_not_dropped():
    records = _landscape(1e-3, 1e-3, seeds=2)
    for r in records:
        if r["lr"] == pytest.approx(1e-3) and r["seed"] == 1:
            r.update(status="diverged", val_error=float("nan"))
    v = analyse(records, 1e-3)
    assert v.diverged_at_transferred == [1] and v.regret["n"] == 1
    assert "DIVERGED at the transferred LR for seed(s) 1" in v.summary_line()
    for r in records:
        if r["lr"] == pytest.approx(1e-3):
            r.update(status="diverged", val_error=float("nan"))
    v = analyse(records, 1e-3)
    assert v.regret is None and v.diverged_at_transferred == [0, 1] and "DIVERGED" in v.summary_line()


def test_verdicts_that_cannot_claim_too_much():
    """All diverged, optima on both sides of the grid, one seed, and a CI that covers 0 but is wide."""
    records = _landscape(1e-3, 1e-3, seeds=2)
    for r in records:
        r.update(status="diverged", val_error=float("nan"))
    v = analyse(records, 1e-3)
    assert v.distance_decades is None and "every training diverged" in v.verdict and "diverged" in v.summary_line()

    below, above = _landscape(1e-3, 1e-5, seeds=1), _landscape(1e-3, 1e-1, seeds=1)
    for r in above:
        r["seed"] = 1
    v = analyse(below + above, 1e-3)
    assert "below for some seeds, above for others" in v.verdict

    v = analyse(_landscape(1e-3, 1e-3 * 10**0.1, seeds=1), 1e-3)
    assert v.distance_decades["n"] == 1 and v.verdict.startswith("one seed: no spread measured")

    rng = np.random.default_rng(3)
    v = analyse(_landscape(1e-3, 1e-3, seeds=3, points=9, noise=0.25, rng=rng), 1e-3)
    d = v.distance_decades
    if d["ci"][0] <= 0 <= d["ci"][1] and (d["ci"][0] < -0.125 or d["ci"][1] > 0.125):
        assert v.verdict.startswith("not resolved at this scale")
    assert not (v.verdict.startswith("transfer held") and (d["ci"][0] < -0.125 or d["ci"][1] > 0.125))


# --------------------------------------------------------------------------- the proxy on the same grid


def _jittered(centre: float, optimum: float, seeds: int, noise: float, seed: int, points: int = 7):
    return _landscape(centre, optimum, seeds=seeds, points=points, noise=noise, rng=np.random.default_rng(seed))


def test_a_search_that_missed_the_proxy_optimum_is_blamed_not_the_transfer():
    """Proxy and target share their optimum (1e-2) but the search's winner sat half a decade below it."""
    winner = 10**-2.5
    target = _jittered(winner, 1e-2, 4, 0.03, 1)
    proxy = _jittered(winner, 1e-2, 4, 0.03, 2)
    v = analyse(target, winner, proxy_records=proxy, search_lr=winner)
    assert v.proxy_optimum == pytest.approx(1e-2, rel=0.15)
    gap, error = v.search_gap, v.transfer_error
    assert gap["value"] == pytest.approx(-0.5, abs=0.06) and gap["resolved"] and gap["ci"][1] < 0
    assert not error["resolved"] and error["ci"][0] <= 0 <= error["ci"][1]
    assert v.verdict.startswith("the search missed the proxy's optimum by ") and "(the winner below it" in v.verdict
    assert "widen search_space.lr or run more trials" in v.verdict and "transfer rule" not in v.verdict
    assert "above the transferred LR" in v.target_verdict  # the target alone could not tell the two apart
    assert "the search missed" in v.transfer_line() and v.proxy_grid == v.grid


def test_a_transfer_that_moved_the_optimum_is_blamed_not_the_search():
    """The search found the proxy's optimum (1e-3), but the target's sits 0.4 decades above it."""
    target = _jittered(1e-3, 1e-3 * 10**0.4, 4, 0.03, 3)
    proxy = _jittered(1e-3, 1e-3, 4, 0.03, 4)
    v = analyse(target, 1e-3, proxy_records=proxy, search_lr=1e-3)
    error, gap = v.transfer_error, v.search_gap
    assert error["value"] == pytest.approx(0.4, abs=0.06) and error["resolved"] and error["ci"][0] > 0
    assert not gap["resolved"]
    assert v.verdict.startswith("the optimum moved by +0.") and "the transfer rule did not hold here" in v.verdict
    assert "the search missed" not in v.verdict


def test_transfer_held_when_neither_effect_is_resolved_and_both_intervals_are_narrow():
    v = analyse(_jittered(1e-3, 1e-3, 5, 0.02, 5), 1e-3, proxy_records=_jittered(1e-3, 1e-3, 5, 0.02, 6))
    assert not v.transfer_error["resolved"] and not v.search_gap["resolved"]
    assert v.verdict.startswith("transfer held")
    # 3 seeds, more jitter: neither resolved, but the intervals reach past half a grid step: nothing is shown
    v = analyse(_jittered(1e-3, 1e-3, 3, 0.05, 5), 1e-3, proxy_records=_jittered(1e-3, 1e-3, 3, 0.05, 6))
    assert not v.transfer_error["resolved"] and not v.search_gap["resolved"]
    assert max(abs(b) for b in v.transfer_error["ci"] + v.search_gap["ci"]) > 0.125
    assert v.verdict.startswith("not resolved at this scale") and "transfer held" not in v.verdict


def test_one_seed_resolves_nothing_and_has_no_interval():
    v = analyse(
        _landscape(1e-3, 1e-3 * 10**0.4, seeds=1, points=7),
        1e-3,
        proxy_records=_landscape(1e-3, 1e-3, seeds=1, points=7),
    )
    for effect in (v.transfer_error, v.search_gap):
        assert effect["ci"] == [None, None] and effect["n"] == 1 and not effect["resolved"]
    assert v.transfer_error["value"] == pytest.approx(0.4, abs=0.02)
    assert v.verdict.startswith("not resolved (one seed: no interval")
    assert "[no CI: 1 seed]" in v.transfer_line()


def test_a_proxy_optimum_beyond_the_grid_blames_the_search():
    v = analyse(_landscape(1e-5, 1e-2, seeds=2), 1e-5, proxy_records=_landscape(1e-5, 1e-2, seeds=2))
    assert v.proxy_optimum is None and v.search_gap is None and v.transfer_error is None
    assert v.verdict.startswith("the search missed the proxy's optimum by more than 0.50 decades")
    assert "above the grid" in v.verdict and "widen search_space.lr" in v.verdict


def _edge_seed(seed: int, edge: str | None, lr: float | None = 1e-2) -> dict:
    """One proxy seed's optimum as :func:`seed_optima` writes it, built by hand (``edge`` None: diverged)."""
    return {"seed": seed, "optimum_lr": lr if edge else None, "at_edge": bool(edge), "edge": edge, "coordinate": None}


def _claims_a_cause(verdict: str) -> bool:
    from mutransfer._sweep.verify_transfer import HELD, SEARCH_ADVICE, SEARCH_FAILED, TRANSFER_FAILED

    return any(claim in verdict for claim in (SEARCH_FAILED, SEARCH_ADVICE, TRANSFER_FAILED, HELD))


def test_one_proxy_seed_at_the_grid_edge_is_not_resolved_and_names_no_cause():
    """One seed's best point at the edge is an observation, not a finding: no interval, so no cause is named —
    neither from the pure verdict nor from records built by hand (1 seed, error falling across the whole grid)."""
    from mutransfer._sweep.verify_transfer import compare, diagnose

    for proxy, reason in (
        ([_edge_seed(0, "above")], "one seed: no interval; use --verify-seeds 2 or more"),
        # three seeds run, one usable: more seeds alone is not the advice
        ([_edge_seed(0, "above"), _edge_seed(1, None), _edge_seed(2, None)], "one usable seed of 3: no interval; "),
    ):
        verdict = diagnose(None, None, proxy, True, "target verdict", 0.25, 0.125)
        assert verdict.startswith(f"not resolved ({reason}"), verdict
        assert not _claims_a_cause(verdict) and "above the grid" in verdict  # the seed's optimum: only observed

    grid = lr_grid(1e-3, 3)
    proxy_records = [
        {"lr": lr, "seed": 0, "status": "completed", "val_error": 0.1 / (i + 1), "epochs": 2}
        for i, lr in enumerate(grid)
    ]
    target = [{"seed": 0, "optimum_lr": 1e-3, "at_edge": False, "edge": None, "coordinate": -3.0}]
    v = compare(target, proxy_records, 1e-3, 1e-3, "transfer held")
    assert v["search_gap"] is None and v["transfer_error"] is None
    assert v["proxy_seed_optima"][0]["edge"] == "above"
    assert v["verdict"].startswith("not resolved (one seed") and not _claims_a_cause(v["verdict"])


def test_two_proxy_seeds_at_the_same_edge_or_a_resolved_gap_blame_the_search():
    from mutransfer._diagnostics.statistics import Estimate
    from mutransfer._sweep.verify_transfer import SEARCH_ADVICE, SEARCH_FAILED, TRANSFER_FAILED, diagnose

    verdict = diagnose(
        None, None, [_edge_seed(0, "below"), _edge_seed(1, "below")], True, "target verdict", 0.25, 0.125
    )
    assert verdict.startswith(f"{SEARCH_FAILED} by more than 0.25 decades") and "below the grid" in verdict
    assert SEARCH_ADVICE in verdict and TRANSFER_FAILED not in verdict

    gap = Estimate(-0.5, -0.6, -0.4, 3)  # resolved: the interval excludes 0
    for error in (None, Estimate(0.05, -0.1, 0.2, 3)):
        verdict = diagnose(error, gap, [], True, "target verdict", 0.25, 0.125)
        assert verdict.startswith(f"{SEARCH_FAILED} by 0.50 decades") and TRANSFER_FAILED not in verdict


def test_no_verdict_names_a_cause_from_an_unresolved_or_one_seed_effect():
    """Every branch of ``diagnose``: an effect without an interval (n = 1) or whose interval covers 0 is never the
    cause; only a resolved one is. "Transfer held" needs both intervals within half a grid step, not just covering 0."""
    from mutransfer._diagnostics.statistics import Estimate
    from mutransfer._sweep.verify_transfer import SEARCH_FAILED, TRANSFER_FAILED, diagnose

    inf = math.inf
    one_seed, unresolved, resolved = (
        Estimate(0.6, -inf, inf, 1),
        Estimate(0.6, -0.1, 1.3, 2),
        Estimate(0.6, 0.4, 0.8, 3),
    )
    for gap in (None, one_seed, unresolved, resolved):
        for error in (None, one_seed, unresolved, resolved):
            for measured in (True, False):
                verdict = diagnose(error, gap, [_edge_seed(0, "above")], measured, "target verdict", 0.25, 0.125)
                assert (SEARCH_FAILED in verdict) == (gap is resolved), (gap, error, verdict)
                assert (TRANSFER_FAILED in verdict) == (error is resolved and gap is not None), (gap, error, verdict)
                if gap is not None and not (gap.resolved or (error is not None and error.resolved)):
                    assert verdict.startswith(("not resolved", "transfer held")), verdict
                assert not verdict.startswith("transfer held")  # no interval, or one wider than half a step
    narrow = Estimate(0.02, -0.05, 0.09, 5)  # unresolved, and within half a grid step (0.125 decades)
    assert diagnose(narrow, narrow, [], True, "target verdict", 0.25, 0.125).startswith("transfer held")
    wide = diagnose(unresolved, narrow, [], True, "target verdict", 0.25, 0.125)
    assert wide.startswith("not resolved at this scale") and not _claims_a_cause(wide)


def test_the_proxy_grid_maps_onto_the_target_grid_by_master_lr():
    """A proxy whose master LR differs from the transferred one by a factor: its grid and optimum are mapped back."""
    from mutransfer._sweep.verify_transfer import proxy_grid

    grid = lr_grid(1e-3, 5)
    mapped = proxy_grid(grid, 1e-3, 2e-3)
    assert mapped == pytest.approx([2 * g for g in grid])
    proxy = _landscape(2e-3, 2e-3, seeds=2)  # the proxy's optimum at its winner, on its own axis
    v = analyse(_landscape(1e-3, 1e-3, seeds=2), 1e-3, proxy_records=proxy, search_lr=2e-3)
    assert v.proxy_optimum == pytest.approx(1e-3) and v.transfer_error["value"] == pytest.approx(0.0, abs=1e-9)
    assert v.search_gap["value"] == pytest.approx(0.0, abs=1e-9)


def test_a_verification_from_before_the_proxy_still_renders():
    """state.json from an older version: no proxy keys; the old fields render as they did, no proxy metrics."""
    from mutransfer._sweep.strategies.verify import Verify, verification_lines
    from mutransfer._sweep.verify import Verification

    old = analyse(_landscape(1e-3, 1e-3, seeds=2), 1e-3).as_dict()
    for key in (
        "search_lr",
        "lr_factor",
        "proxy_grid",
        "proxy_epochs",
        "proxy_optimum",
        "proxy_seed_optima",
        "transfer_error",
        "search_gap",
        "target_verdict",
        "proxy_records",
    ):
        old.pop(key)
    old["cost"] = {
        "trainings": 10,
        "device_seconds": 2.0,
        "trainer_device_seconds": 1.5,
        "overhead_device_seconds": 0.5,
        "flops": None,
        "wall_seconds": 1.0,
    }
    v = Verification.from_dict(json.loads(json.dumps(old)))
    assert v.transfer_line() is None and "transfer held" in v.summary_line()
    lines = verification_lines(old)
    assert any("10 target trainings" in line for line in lines) and not any("proxy" in line for line in lines)
    assert Verify().metrics(old, 0) == []
    new = analyse(_landscape(1e-3, 1e-3, seeds=2), 1e-3, proxy_records=_landscape(1e-3, 1e-3, seeds=2)).as_dict()
    names = {m[0] for m in Verify().metrics(new, 0)}
    assert {"verify_proxy_optimum_lr", "verify_transfer_error_decades", "verify_search_gap_decades"} <= names


def test_the_target_outcome_round_trips_through_state():
    """A finished target is read back on --resume (its cost and error are not re-measured)."""
    from mutransfer._sweep.target import TargetOutcome
    from mutransfer._training.records import EpochRecord

    history = [EpochRecord(epoch=1, iteration=10, test_error=0.1, train_loss=0.2, lr=1e-3, seconds=1.5)]
    outcome = TargetOutcome(
        "completed", 0.05, 1, history, trainer_seconds=1.5, wall_seconds=9.0, device_seconds=18.0, spectral_lr0=2e-3
    )
    again = TargetOutcome.from_dict(json.loads(json.dumps(outcome.as_dict())))
    assert again == outcome


def test_baseline_cost_helpers_split_training_from_overhead():
    from mutransfer._sweep.baseline import add_costs, ratios

    a = {"device_seconds": 10.0, "trainer_device_seconds": 6.0, "overhead_device_seconds": 4.0, "flops": 5.0}
    b = {"device_seconds": 30.0, "trainer_device_seconds": 24.0, "overhead_device_seconds": 6.0, "flops": None}
    total = add_costs(a, b)
    assert total["device_seconds"] == 40.0 and total["trainer_device_seconds"] == 30.0 and total["flops"] is None
    r = ratios(a, b, 0.02, 0.01)
    assert r == {"error": 2.0, "device_seconds": pytest.approx(1 / 3), "trainer_device_seconds": 0.25, "flops": None}


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_tiny_data(tmp_path_factory.mktemp("data") / "burgers_tiny.h5")


@pytest.mark.slow  # ~60-120 s: trains the target and the proxy grids, and the direct arm
def test_verify_and_direct_baseline_on_a_tiny_fno_study(tiny_data, tmp_path, capsys):
    """The verification's and the direct baseline's logic, in process (Ray's part of a sweep is tested elsewhere)."""
    from mutransfer.cli.main import main

    path = write_tiny_study(tmp_path, tiny_data, name="verify-fno", trials=2)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rc = main(
        [
            "sweep",
            "--study",
            str(path),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--tracking-uri",
            uri,
            "--verify",
            "--verify-points",
            "3",
            "--verify-seeds",
            "2",
            "--baseline",
            "direct",
            "--json",
            *IN_PROCESS,
        ]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    v, d = report["verification"], report["direct_baseline"]
    # their phases are in the study's wall time and not muTransfer's: no wall-time ratio is said
    assert "mutransfer_vs_direct_wall_seconds" not in report["compute"]

    # verification: 3 LRs x 2 seeds around the transferred LR, each a target-size training
    assert v["transferred_lr"] == pytest.approx(report["target_hyperparameters"]["lr"])
    assert len(v["grid"]) == 3 and v["seeds"] == [0, 1] and len(v["records"]) == 6
    assert np.allclose(np.diff(np.log10(v["grid"])), 0.25)
    c = v["cost"]
    assert c["trainings"] == 12 and c["trainer_device_seconds"] > 0  # 6 target + 6 proxy trainings
    assert c["device_seconds"] == pytest.approx(c["trainer_device_seconds"] + c["overhead_device_seconds"])
    p = c["proxy"]
    assert p["trainings"] == 6 and 0 < p["trainer_device_seconds"] < c["trainer_device_seconds"]
    assert 0 < p["flops"] < c["flops"] - p["flops"]  # the proxy (K = 6) is cheaper than the target (K = 24)
    assert c["flops"] - p["flops"] == pytest.approx(6 * 2 * report["compute"]["target_flops"] / 2)
    # the proxy on the same master LRs (the search winner's LR is the transferred one: μP carries it over)
    assert v["search_lr"] == pytest.approx(report["best_proxy"]["config"]["lr"])
    assert v["proxy_grid"] == pytest.approx(v["grid"]) and len(v["proxy_records"]) == 6
    assert v["lr_factor"] == pytest.approx(report["transfer"]["lr_factor"]) and v["proxy_epochs"] == 2
    assert v["target_verdict"] and v["verdict"] != v["target_verdict"]
    for key in ("transfer_error", "search_gap"):
        if v[key] is not None:
            assert set(v[key]) >= {"value", "ci", "n", "resolved"} and len(v[key]["ci"]) == 2
    if v["distance_decades"] is not None:
        assert v["optimum_lr"] == pytest.approx(v["transferred_lr"] * 10 ** v["distance_decades"]["mean"])
    # the seed-0 training at the transferred LR is the target's own configuration: the same error
    same = [r for r in v["records"] if r["seed"] == 0 and r["lr"] == pytest.approx(v["transferred_lr"])]
    # (1 thread in both: resources.cpus_per_trial = target.cpus_per_worker = 1, so the same summation order)
    # (both on the validation split: the verification selects, so it never sees the test split)
    assert same and same[0]["val_error"] == pytest.approx(report["target"]["val_error"], rel=1e-4)

    # direct baseline: the same search (2 trials, 2 epochs) on the K = 24 model
    assert d["search"] == {"algorithm": "tpe", "trials": 2, "budget_epochs": 2, "seed": 0}
    # the direct winner (chosen on validation data) is trained once more, fresh, like the target: its test error counts
    assert (
        d["final_training"]["epochs"] == report["target"]["epochs"]
        and d["test_error"] == d["final_training"]["test_error"]
    )
    searched = report["best_proxy"]["config"]
    assert d["same_configuration"] == all(d["best_config"][k] == pytest.approx(v) for k, v in searched.items())
    assert d["best_trial_val_error"] is not None
    assert d["mutransfer_vs_direct"]["error"] == pytest.approx(report["target"]["test_error"] / d["test_error"])
    # measured, not estimated: the direct trials' own epochs (ASHA stops them where their errors say) x the
    # target's FLOPs per epoch
    target_epoch_flops = report["compute"]["target_flops"] / report["target"]["epochs"]
    # the retraining is billed only where direct tuning needs it: its winner stopped early (budget = target epochs)
    best = held_by_key(Path(report["study_dir"]) / "direct")[d["best_trial_id"]]
    billed = d["final_training"]["billed"]
    assert billed == (best.status != "completed")
    if not billed:
        assert d["cost"]["device_seconds"] == pytest.approx(d["cost"]["search"]["device_seconds"])
    assert d["cost"]["flops"] == pytest.approx(
        (d["cost"]["search"]["epochs"] + billed * d["final_training"]["epochs"]) * target_epoch_flops, rel=1e-9
    )
    # muTransfer's side: its proxies' epochs at the proxy's FLOPs per epoch, and its target's
    assert d["mutransfer"]["flops"] == pytest.approx(
        report["compute"]["proxy_flops"] + report["compute"]["target_flops"], rel=1e-9
    )
    for side in (d["cost"], d["mutransfer"]):
        assert side["device_seconds"] == pytest.approx(side["trainer_device_seconds"] + side["overhead_device_seconds"])

    runs = mlflow_runs(uri)
    parent = next(r for r in runs if r.data.tags.get("mutransfer.kind") == "study")
    direct = next(r for r in runs if r.data.tags.get("mutransfer.kind") == "direct_baseline")
    assert direct.data.tags["mlflow.parentRunId"] == parent.info.run_id and direct.info.status == "FINISHED"
    direct_trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == direct.info.run_id]
    assert len(direct_trials) == 2 and {r.data.params["K"] for r in direct_trials} == {"24"}
    assert len([r for r in runs if r.data.tags.get("mutransfer.kind") == "verify_point"]) == 6
    proxy_points = [r for r in runs if r.data.tags.get("mutransfer.kind") == "verify_proxy_point"]
    assert len(proxy_points) == 6 and {r.data.params["K"] for r in proxy_points} == {"6"}
    assert parent.data.metrics["direct_test_error"] == pytest.approx(d["test_error"])
    assert "verify_error_at_transferred" in parent.data.metrics

    from mutransfer._sweep.report import format_report

    text = format_report(report)
    assert "verification (2 seed(s), 3 LRs" in text and "direct baseline: test error" in text
    gain = report["proxy_to_target"]
    assert gain["gain"] == pytest.approx(report["best_proxy"]["val_error"] / report["target"]["val_error"])
    centre = [r["val_error"] for r in v["records"] if r["lr"] == pytest.approx(v["transferred_lr"])]
    assert gain["target_seeds"] == 2 and gain["target_error_mean"] == pytest.approx(np.mean(centre))
    assert "the target at the transferred LR over 2 seeds" in text

    # `mutransfer train` with the target's configuration, data and seed gives the sweep target's test error
    import torch

    hp = report["target_hyperparameters"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the target's worker ran target.cpus_per_worker = 1 thread: same summation order
    try:
        rc = main(
            [
                "train",
                "--problem",
                "burgers",
                "--data",
                str(tiny_data),
                "--resolution",
                "64",
                "--n-train",
                "26",  # the study's n_train 32 less its validation split (32 // 5): the samples it trained on
                "--n-test",
                "16",
                "--modes",
                "24",
                "--width",
                "16",
                "--layers",
                "2",
                "--projection-channels",
                "32",
                "--parametrization",
                "mup",
                "--lr",
                repr(hp["lr"]),
                "--batch-size",
                str(hp["batch_size"]),
                "--epochs",
                "2",
                "--schedule",
                "cosine",
                "--seed",
                "0",
                "--no-progress",
                "--json",
                "--checkpoint-dir",
                str(tmp_path / "train-ckpt"),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    trained = json.loads(capsys.readouterr().out)
    assert trained["result"]["test_error"] == pytest.approx(report["target"]["test_error"], rel=1e-4)

    # a completed study cannot grow a verification afterwards: one clear line, exit 2
    path2 = write_tiny_study(tmp_path, tiny_data, name="no-verify", trials=2)
    assert (
        main(
            ["sweep", "--study", str(path2), "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", uri, "--json"]
            + list(IN_PROCESS)
        )
        == 0
    )
    capsys.readouterr()
    assert main(["sweep", "--study", str(path2), "--runs-dir", str(tmp_path / "runs"), "--resume", "--verify"]) == 2
    assert "--verify: study 'no-verify' is already complete" in capsys.readouterr().err


@pytest.mark.slow
def test_verify_names_a_search_whose_range_excludes_the_optimum(tiny_data, tmp_path, capsys):
    """search_space.lr restricted to [1e-5, 1.2e-5], far below the optimum: the proxy's own optimum lies above the
    verification's grid, and the verdict blames the search (not the transfer)."""
    from mutransfer.cli.main import main

    path = write_tiny_study(
        tmp_path,
        tiny_data,
        name="verify-missed",
        trials=2,
        search_space={"lr": {"type": "loguniform", "low": 1e-5, "high": 1.2e-5}},
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    flags = ["--runs-dir", str(tmp_path / "runs"), "--tracking-uri", uri, "--verify", "--verify-points", "3"]
    assert main(["sweep", "--study", str(path), *flags, "--verify-seeds", "2", "--json", *IN_PROCESS]) == 0
    report = json.loads(capsys.readouterr().out)
    v = report["verification"]
    assert 1e-5 <= v["search_lr"] <= 1.2e-5 and len(v["proxy_records"]) == 6
    assert all(s["edge"] == "above" for s in v["proxy_seed_optima"])
    assert v["verdict"].startswith("the search missed the proxy's optimum") and "widen search_space.lr" in v["verdict"]
    assert "transfer rule" not in v["verdict"]

    from mutransfer._sweep.report import format_report

    assert "the search missed the proxy's optimum" in format_report(report)
    parent = next(r for r in mlflow_runs(uri) if r.data.tags.get("mutransfer.kind") == "study")
    assert parent.data.tags["mutransfer.verification"].startswith("the search missed")


@pytest.mark.slow  # ~45-95 s
def test_verify_and_direct_baseline_on_a_galerkin_width_study(tmp_path):
    from mutransfer._sweep import SweepOptions, run_sweep
    from mutransfer.data._pointclouds import generate_darcy_mesh, write_point_dataset

    mesh = tmp_path / "mesh.h5"
    write_point_dataset(mesh, generate_darcy_mesh(16, 9, seed=0, progress=False, points_min=30, points_max=50))
    path = galerkin_mesh_study(
        tmp_path, "verify-galerkin", mesh, n_train=12, n_test=4, target_width=16, batch_size=4, epochs=1
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = run_sweep(
        SweepOptions(
            study_path=str(path),
            runs_dir=str(tmp_path / "runs"),
            overrides={"tracking_uri": uri},
            quiet=True,
            verify=True,
            verify_points=3,
            verify_seeds=1,
            baseline="direct",
            executor="inprocess",
        )
    )
    v, d = report["verification"], report["direct_baseline"]
    assert len(v["records"]) == 3 and v["seeds"] == [0] and v["cost"]["flops"] > 0
    # trials ran 1 epoch, the target 2: the direct winner is retrained for 2 epochs and that error counts
    assert d["final_training"]["epochs"] == 2 and d["test_error"] == d["final_training"]["test_error"]
    assert d["final_training"]["billed"] and d["cost"]["device_seconds"] > d["cost"]["search"]["device_seconds"]
    widths = {
        r.data.params.get("width") for r in mlflow_runs(uri) if r.data.tags.get("mutransfer.kind") == "proxy_trial"
    }
    assert widths == {"8", "16"}  # the proxies at 8, the direct search at the target's 16


def test_bad_verification_options_fail_before_compute(capsys, tmp_path, monkeypatch):
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--verify", "--verify-points", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--verify-points 2" in err[0] and "at least 3" in err[0]
    # a study that keeps K has nothing for the coordinate check to compare: refused before compute
    assert main(["sweep", "--coord-check", "--target-K", "6", "--target-width", "64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--coord-check" in err[0] and "proxy_K = target_K" in err[0]
    assert not (tmp_path / "mutransfer-runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_resolved_search_gap_within_half_a_grid_step_does_not_blame_the_search():
    """Seeds that agree closely can resolve a gap the grid cannot tell apart (+0.04 decades on a 0.25-decade grid):
    that is below the grid's resolution, so the search is not blamed — beyond half a step it is."""
    from mutransfer._diagnostics.statistics import Estimate
    from mutransfer._sweep.verify_transfer import SEARCH_FAILED, TRANSFER_FAILED, diagnose

    small, large = Estimate(0.04, 0.02, 0.06, 5), Estimate(0.5, 0.4, 0.6, 5)
    held = Estimate(0.01, -0.05, 0.07, 5)
    moved = Estimate(-0.7, -1.0, -0.4, 5)
    assert SEARCH_FAILED not in diagnose(held, small, [], True, "t", 0.5, 0.125)
    assert "transfer held" in diagnose(held, small, [], True, "t", 0.5, 0.125)
    verdict = diagnose(moved, small, [], True, "t", 0.5, 0.125)
    assert TRANSFER_FAILED in verdict and SEARCH_FAILED not in verdict and "within half a grid step" in verdict
    assert SEARCH_FAILED in diagnose(held, large, [], True, "t", 0.5, 0.125)


def test_three_seeds_with_one_usable_target_optimum_advise_a_wider_grid_not_only_more_seeds():
    """The path the neuraloperator runs took (docs/results.md): 3 seeds, the proxy's optima all inside its grid, the
    target's inside for one seed and above the grid for two: no interval for the transfer error, and the verdict says
    one usable seed of 3 (not "use --verify-seeds 2 or more", which they had) and names a wider grid."""
    from mutransfer._sweep.verify_transfer import compare

    grid = lr_grid(1e-3, 5)
    proxy_records = [
        {"lr": lr, "seed": seed, "status": "completed", "val_error": 0.1 + 0.01 * (i - 2) ** 2 + 0.001 * seed * i,
         "epochs": 2}
        for seed in range(3)
        for i, lr in enumerate(grid)
    ]  # fmt: skip
    target = [{"seed": 0, "optimum_lr": 1e-3, "at_edge": False, "edge": None, "coordinate": -3.0}] + [
        {"seed": s, "optimum_lr": grid[-1], "at_edge": True, "edge": "above", "coordinate": None} for s in (1, 2)
    ]
    verdict = compare(target, proxy_records, 1e-3, 1e-3, "target verdict")["verdict"]
    assert verdict.startswith("not resolved (one usable seed of 3: no interval;"), verdict
    assert "--verify-points" in verdict and "use --verify-seeds 2 or more" not in verdict
