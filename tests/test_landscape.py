"""Landscapes: optimum and drift analysis, and a tiny grid end to end on real Ray and MLflow."""

import json
import subprocess
import sys

import numpy as np
import pytest

from mutransfer.landscape.analysis import curve_optimum, drift, summarize

TINY_STUDY = """
name: tiny
problem: {name: burgers, generated_resolution: 128, resolution: 64, n_train: 40, n_test: 10}
operator: {width: 8, layers: 2, projection_channels: 16}
proxy_K: 4
target_K: 8
search_space: {lr: {type: loguniform, low: 1.0e-3, high: 1.0e-2}}
training: {batch_size: 10}
budget: {epochs: 2}
"""


def test_parabolic_refinement_finds_the_vertex_between_grid_points():
    lrs = np.geomspace(1e-4, 1e-1, 7)
    true = 3.3e-3
    errors = np.exp((np.log10(lrs) - np.log10(true)) ** 2)  # log-error is a parabola in log10(lr)
    assert curve_optimum(list(lrs), list(errors), ["completed"] * 7, "lr") == pytest.approx(true, rel=1e-9)


def test_edge_minimum_and_diverged_points():
    lrs = [1e-3, 1e-2, 1e-1]
    assert curve_optimum(lrs, [1.0, 2.0, 3.0], ["completed"] * 3, "lr") == 1e-3
    # a diverged point is never the optimum, even with a small recorded error
    assert curve_optimum(lrs, [1.0, 2.0, 0.1], ["completed", "completed", "diverged"], "lr") == 1e-3
    assert curve_optimum(lrs, [10.0] * 3, ["diverged"] * 3, "lr") is None


def test_drift_is_the_shift_of_the_optimum_across_k_per_seed():
    lrs = list(np.geomspace(1e-4, 1e-1, 7))
    records = []
    optima = {("standard", 4): [1e-3, 2e-3], ("standard", 16): [1e-2, 1e-2], ("mup", 4): [3e-3, 3e-3], ("mup", 16): [3e-3, 3e-3]}
    for (parametrization, k), per_seed in optima.items():
        for seed, opt in enumerate(per_seed):
            for lr in lrs:
                err = float(np.exp((np.log10(lr) - np.log10(opt)) ** 2))
                records.append(dict(parametrization=parametrization, scale=k, value=lr, seed=seed, test_error=err, status="completed"))
    drifts = {d.parametrization: d for d in drift(summarize(records, "lr"), "lr")}
    assert drifts["mup"].mean == pytest.approx(0.0, abs=1e-9) and drifts["mup"].std == pytest.approx(0.0, abs=1e-9)
    expected = [np.log10(1e-2 / 1e-3), np.log10(1e-2 / 2e-3)]
    assert drifts["standard"].per_seed == pytest.approx(expected)
    assert drifts["standard"].mean == pytest.approx(np.mean(expected))
    assert drifts["standard"].std == pytest.approx(np.std(expected, ddof=1))
    assert drifts["standard"].scale_from == 4 and drifts["standard"].scale_to == 16


def test_tiny_landscape_end_to_end(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    study = tmp_path / "tiny.yaml"
    study.write_text(TINY_STUDY)
    db = tmp_path / "mlflow.db"
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mutransfer.cli.main", "landscape", "--study", str(study), "--modes", "4", "8",
           "--lrs", "1e-2", "1e-1", "30", "--seeds", "1", "--tracking-uri", f"sqlite:///{db}", "--out", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**__import__("os").environ, "MUTRANSFER_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(proc.stdout)
    assert len(payload["records"]) == 2 * 2 * 3
    assert {(c["parametrization"], c["scale"]) for c in payload["curves"]} == {("standard", 4), ("standard", 8), ("mup", 4), ("mup", 8)}
    assert {d["parametrization"] for d in payload["drift"]} == {"standard", "mup"}
    # lr = 30 diverges, and is recorded (and plotted) as diverged rather than crashing the landscape
    diverged = [r for r in payload["records"] if r["value"] == 30]
    assert diverged and all(r["status"] == "diverged" for r in diverged)
    assert all(c["diverged"][-1] == 1 for c in payload["curves"])
    assert (out / "landscape.png").stat().st_size > 20_000
    assert json.loads((out / "landscape.json").read_text())["hyperparameter"] == "lr"

    client = mlflow.tracking.MlflowClient(f"sqlite:///{db}")
    runs = client.search_runs([client.get_experiment_by_name("mutransfer").experiment_id])
    parents = [r for r in runs if r.data.tags.get("mutransfer.kind") == "landscape"]
    points = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(points) == 12
    assert all(r.info.status == "FINISHED" for r in runs)
    assert sum(r.data.tags["mutransfer.status"] == "diverged" for r in points) == 4
    assert "landscape.png" in [a.path for a in client.list_artifacts(parents[0].info.run_id)]


@pytest.mark.parametrize("extra, fragment", [
    (["--modes", "4", "--lrs", "1e-3", "1e-2", "1e-1"], "at least two values of K"),
    (["--modes", "4", "40", "--lrs", "1e-3", "1e-2", "1e-1"], "modes 40 too large"),
    (["--modes", "4", "8", "--lrs", "1e-3", "1e-2"], "at least three values"),
    (["--modes", "1", "8", "--lrs", "1e-3", "1e-2", "1e-1"], "K = 1"),
])
def test_bad_landscape_input_fails_before_compute(tmp_path, extra, fragment):
    study = tmp_path / "tiny.yaml"
    study.write_text(TINY_STUDY)
    proc = subprocess.run([sys.executable, "-m", "mutransfer.cli.main", "landscape", "--study", str(study), *extra],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and fragment in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
