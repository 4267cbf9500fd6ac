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

import numpy as np
import pytest

from mutransfer.sweep.verify import analyse, lr_grid
from tests.sweep_helpers import galerkin_mesh_study, mlflow_runs, write_tiny_data, write_tiny_study


def _landscape(transferred: float, optimum: float, seeds: int = 4, points: int = 5, noise: float = 0.0, rng=None):
    """Records: error = 0.01 * exp(2 * (log10 lr - log10 optimum)^2) per seed, with optional multiplicative noise."""
    rng = rng or np.random.default_rng(0)
    records = []
    for seed in range(seeds):
        jitter = rng.normal(0, noise) if noise else 0.0  # each seed's optimum moves a little
        for lr in lr_grid(transferred, points):
            x = math.log10(lr) - math.log10(optimum) - jitter
            records.append(
                {"lr": lr, "seed": seed, "status": "completed", "test_error": 0.01 * math.exp(2 * x * x), "epochs": 3}
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
            r.update(status="diverged", test_error=float("nan"))
    v = analyse(records, 1e-3)
    assert all(s["optimum_lr"] is not None and s["optimum_lr"] <= 1.5e-3 for s in v.seed_optima)


def test_divergence_at_the_transferred_lr_is_reported_not_dropped():
    records = _landscape(1e-3, 1e-3, seeds=2)
    for r in records:
        if r["lr"] == pytest.approx(1e-3) and r["seed"] == 1:
            r.update(status="diverged", test_error=float("nan"))
    v = analyse(records, 1e-3)
    assert v.diverged_at_transferred == [1] and v.regret["n"] == 1
    assert "DIVERGED at the transferred LR for seed(s) 1" in v.summary_line()
    for r in records:
        if r["lr"] == pytest.approx(1e-3):
            r.update(status="diverged", test_error=float("nan"))
    v = analyse(records, 1e-3)
    assert v.regret is None and v.diverged_at_transferred == [0, 1] and "DIVERGED" in v.summary_line()


def test_verdicts_that_cannot_claim_too_much():
    """All diverged, optima on both sides of the grid, one seed, and a CI that covers 0 but is wide."""
    records = _landscape(1e-3, 1e-3, seeds=2)
    for r in records:
        r.update(status="diverged", test_error=float("nan"))
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


def test_the_target_outcome_round_trips_through_state():
    """A finished target is read back on --resume (its cost and error are not re-measured)."""
    from mutransfer.sweep.target import TargetOutcome
    from mutransfer.training.records import EpochRecord

    history = [EpochRecord(epoch=1, iteration=10, test_error=0.1, train_loss=0.2, lr=1e-3, seconds=1.5)]
    outcome = TargetOutcome(
        "completed", 0.05, 1, history, trainer_seconds=1.5, wall_seconds=9.0, device_seconds=18.0, spectral_lr0=2e-3
    )
    again = TargetOutcome.from_dict(json.loads(json.dumps(outcome.as_dict())))
    assert again == outcome


def test_baseline_cost_helpers_split_training_from_overhead():
    from mutransfer.sweep.baseline import add_costs, ratios

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


def test_verify_and_direct_baseline_on_a_tiny_fno_study(ray_local, tiny_data, tmp_path, capsys):
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
        ]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    v, d = report["verification"], report["direct_baseline"]

    # verification: 3 LRs x 2 seeds around the transferred LR, each a target-size training
    assert v["transferred_lr"] == pytest.approx(report["target_hyperparameters"]["lr"])
    assert len(v["grid"]) == 3 and v["seeds"] == [0, 1] and len(v["records"]) == 6
    assert np.allclose(np.diff(np.log10(v["grid"])), 0.25)
    c = v["cost"]
    assert c["trainings"] == 6 and c["trainer_device_seconds"] > 0
    assert c["device_seconds"] == pytest.approx(c["trainer_device_seconds"] + c["overhead_device_seconds"])
    assert v["cost"]["flops"] == pytest.approx(6 * 2 * report["compute"]["target_flops"] / 2)
    if v["distance_decades"] is not None:
        assert v["optimum_lr"] == pytest.approx(v["transferred_lr"] * 10 ** v["distance_decades"]["mean"])
    # the seed-0 training at the transferred LR is the target's own configuration: the same error
    same = [r for r in v["records"] if r["seed"] == 0 and r["lr"] == pytest.approx(v["transferred_lr"])]
    # (1 thread in both: resources.cpus_per_trial = target.cpus_per_worker = 1, so the same summation order)
    assert same and same[0]["test_error"] == pytest.approx(report["target"]["test_error"], rel=1e-4)

    # direct baseline: the same search (2 trials, 2 epochs) on the K = 24 model
    assert d["search"] == {"algorithm": "tpe", "trials": 2, "budget_epochs": 2, "seed": 0}
    assert d["final_training"] is None  # budget.epochs == target.epochs: the best trial is a trained target
    searched = report["best_proxy"]["config"]
    assert d["same_configuration"] == all(d["best_config"][k] == pytest.approx(v) for k, v in searched.items())
    assert d["test_error"] == pytest.approx(d["best_trial_test_error"])
    assert d["mutransfer_vs_direct"]["error"] == pytest.approx(report["target"]["test_error"] / d["test_error"])
    # measured, not estimated: the direct trials' own epochs (ASHA stops them where their errors say) x the
    # target's FLOPs per epoch
    target_epoch_flops = report["compute"]["target_flops"] / report["target"]["epochs"]
    assert d["cost"]["flops"] == pytest.approx(d["cost"]["search"]["epochs"] * target_epoch_flops, rel=1e-9)
    for side in (d["cost"], d["mutransfer"]):
        assert side["device_seconds"] == pytest.approx(side["trainer_device_seconds"] + side["overhead_device_seconds"])

    runs = mlflow_runs(uri)
    parent = next(r for r in runs if r.data.tags.get("mutransfer.kind") == "study")
    direct = next(r for r in runs if r.data.tags.get("mutransfer.kind") == "direct_baseline")
    assert direct.data.tags["mlflow.parentRunId"] == parent.info.run_id and direct.info.status == "FINISHED"
    direct_trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == direct.info.run_id]
    assert len(direct_trials) == 2 and {r.data.params["K"] for r in direct_trials} == {"24"}
    assert len([r for r in runs if r.data.tags.get("mutransfer.kind") == "verify_point"]) == 6
    assert parent.data.metrics["direct_test_error"] == pytest.approx(d["test_error"])
    assert "verify_error_at_transferred" in parent.data.metrics

    from mutransfer.sweep.report import format_report

    text = format_report(report)
    assert "verification (2 seed(s), 3 LRs" in text and "direct baseline: test error" in text
    gain = report["proxy_to_target"]
    assert gain["gain"] == pytest.approx(report["best_proxy"]["test_error"] / report["target"]["test_error"])
    centre = [r["test_error"] for r in v["records"] if r["lr"] == pytest.approx(v["transferred_lr"])]
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
                "32",
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
        main(["sweep", "--study", str(path2), "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", uri, "--json"])
        == 0
    )
    capsys.readouterr()
    assert main(["sweep", "--study", str(path2), "--runs-dir", str(tmp_path / "runs"), "--resume", "--verify"]) == 2
    assert "--verify: study 'no-verify' is already complete" in capsys.readouterr().err


def test_verify_and_direct_baseline_on_a_galerkin_width_study(ray_local, tmp_path):
    from mutransfer.data.pointclouds import generate_darcy_mesh, write_point_dataset
    from mutransfer.sweep import SweepOptions, run_sweep

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
        )
    )
    v, d = report["verification"], report["direct_baseline"]
    assert len(v["records"]) == 3 and v["seeds"] == [0] and v["cost"]["flops"] > 0
    # trials ran 1 epoch, the target 2: the direct winner is retrained for 2 epochs and that error counts
    assert d["final_training"]["epochs"] == 2 and d["test_error"] == d["final_training"]["test_error"]
    assert d["cost"]["device_seconds"] > d["cost"]["search"]["device_seconds"]
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
