"""Landscapes: optimum and drift analysis, and a tiny grid end to end on real Ray and MLflow."""

import json
import subprocess
import sys

import numpy as np
import pytest

from mutransfer._landscape.analysis import analyze, describe_difference, describe_drift, fit_optimum
from mutransfer._landscape.plot import plot_landscape
from mutransfer._landscape.runner import format_table

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


LRS = list(np.geomspace(1e-5, 1e-1, 13))  # 1/3 decade apart
KS = [4, 8, 16, 32]


def _curve(centre: float, rng=None, noise: float = 0.0) -> list[float]:
    """Test errors whose log is a parabola in log10(lr) with its vertex at ``centre`` (times optional noise)."""
    errors = np.exp((np.log10(LRS) - centre) ** 2 / 0.5) * 0.01
    if noise:
        errors = errors * np.exp(rng.normal(0.0, noise, len(LRS)))
    return list(errors)


def _landscape(centre_of, parametrizations=("standard",), seeds=5, noise=0.0, rng_seed=0) -> list[dict]:
    """Records of a synthetic landscape; ``centre_of(parametrization, K, seed)`` is the log10(lr) of the optimum."""
    rng = np.random.default_rng(rng_seed)
    records = []
    for p in parametrizations:
        for k in KS:
            for seed in range(seeds):
                for lr, err in zip(LRS, _curve(centre_of(p, k, seed), rng, noise)):
                    records.append(
                        dict(
                            parametrization=p,
                            scale=k,
                            value=float(lr),
                            seed=seed,
                            test_error=float(err),
                            status="completed",
                        )
                    )
    return records


def test_fit_optimum_recovers_a_vertex_between_grid_points():
    lrs = 10.0 ** np.arange(-5.0, -0.9, 0.5)  # half a decade apart
    for true in (-3.0 + 0.1, -3.0 - 0.1, -2.25):
        errors = np.exp((np.log10(lrs) - true) ** 2)  # log-error is a parabola in log10(lr)
        shuffled = np.random.default_rng(0).permutation(len(lrs))  # input order does not matter
        opt = fit_optimum(lrs[shuffled], errors[shuffled], ["completed"] * len(lrs), "lr")
        assert opt.coordinate == pytest.approx(true, abs=1e-9) and opt.value == pytest.approx(10.0**true, rel=1e-8)
        assert opt.usable and not opt.at_edge
        assert abs(opt.coordinate - np.round(opt.coordinate * 2) / 2) > 0.05  # not snapped to the grid


def test_fit_optimum_edge_diverged_neighbour_and_flat_fallbacks():
    lrs = [1e-3, 1e-2, 1e-1]
    edge = fit_optimum(lrs, [1.0, 2.0, 3.0], ["completed"] * 3, "lr")
    assert edge.at_edge and not edge.usable and edge.value == pytest.approx(1e-3)
    assert fit_optimum(lrs, [3.0, 2.0, 1.0], ["completed"] * 3, "lr").at_edge
    # a diverged point is never the optimum, even with a small recorded error; a diverged neighbour -> grid point
    lrs4 = [1e-4, 1e-3, 1e-2, 1e-1]
    opt = fit_optimum(lrs4, [2.0, 1.5, 1.0, 0.1], ["completed"] * 3 + ["diverged"], "lr")
    assert opt.usable and opt.value == pytest.approx(1e-2) and opt.coordinate == pytest.approx(-2.0)
    # a tie between the best point and its right neighbour: the vertex lies half-way between them
    tie = fit_optimum(lrs4, [2.0, 1.0, 1.0, 1.0], ["completed"] * 4, "lr")
    assert tie.usable and tie.coordinate == pytest.approx(-2.5)
    none = fit_optimum(lrs, [10.0] * 3, ["diverged"] * 3, "lr")
    assert none.value is None and none.coordinate is None and not none.usable


def test_known_drift_is_recovered_and_resolved():
    slope, offsets = -0.3, [-0.04, -0.02, 0.0, 0.02, 0.04]  # per-seed slopes average exactly to ``slope``
    records = _landscape(lambda p, k, s: -2.0 + (slope + offsets[s]) * np.log(k / 4), noise=0.02)
    curves, drifts, difference = analyze(records, "lr")
    (d,) = drifts
    assert difference is None  # only one parametrization
    assert d.slope.n == 5 and d.seeds == [0, 1, 2, 3, 4] and d.scales == KS and not d.excluded
    assert d.slope.lo <= slope <= d.slope.hi and d.slope.hi < -0.2  # contains the truth, excludes 0 by a margin
    assert d.per_seed == pytest.approx([slope + o for o in offsets], abs=0.03)
    assert d.resolved and "not resolved" not in describe_drift(d)
    assert d.decades.mean == pytest.approx(d.slope.mean * np.log(32 / 4))
    assert d.decades.mean == pytest.approx(slope * np.log(8), abs=0.05)
    # the star at each scale is the mean of the per-seed optima, and it moves with K
    stars = [c.star.mean for c in sorted(curves, key=lambda c: c.scale)]
    assert stars == pytest.approx([-2.0 + slope * np.log(k / 4) for k in KS], abs=0.03)


def test_no_drift_with_noise_is_not_resolved():
    jitter = np.random.default_rng(3).normal(0.0, 0.15, (len(KS), 5))  # optimum jumps around, no trend
    records = _landscape(lambda p, k, s: -2.5 + jitter[KS.index(k), s], noise=0.05)
    (d,) = analyze(records, "lr")[1]
    assert d.slope.n == 5 and d.slope.covers_zero and not d.resolved
    assert "not resolved at this scale" in describe_drift(d)


def test_edge_optimum_and_all_diverged_seed_are_excluded():
    # seed 0: optimum beyond the grid's top edge at K=32; seed 1: every run diverged at K=8 and K=16
    records = _landscape(lambda p, k, s: 0.0 if (s == 0 and k == 32) else -2.0 - 0.2 * np.log(k / 4))
    for r in records:
        if r["seed"] == 1 and r["scale"] in (8, 16):
            r["status"], r["test_error"] = "diverged", float("nan")
    # seed 2: every run diverged at every K -> no slope at all
    for r in records:
        if r["seed"] == 2:
            r["status"] = "diverged"
    curves, (d,), _ = analyze(records, "lr")
    assert (0, 32) in d.excluded and d.excluded == [(0, 32)]
    assert {(1, 8), (1, 16)} <= set(d.diverged) and {(2, k) for k in KS} <= set(d.diverged)
    assert d.seeds == [0, 1, 3, 4] and d.slope.n == 4  # seed 0 fitted over 3 K, seed 1 over 2 K, seed 2 dropped
    assert d.per_seed == pytest.approx([-0.2] * 4, abs=1e-6)  # the edge point did not pull seed 0's slope up
    at_32 = next(c for c in curves if c.scale == 32)
    assert at_32.edge == 1 and at_32.star.n == 3  # 5 seeds: one at the edge, one diverged everywhere (seed 2)
    assert at_32.star.mean == pytest.approx(-2.0 - 0.2 * np.log(8), abs=1e-6)


def test_sp_minus_mup_difference_is_detected():
    offsets = [-0.03, -0.01, 0.0, 0.01, 0.03]
    records = _landscape(
        lambda p, k, s: -2.0 + ((-0.3 if p == "standard" else 0.0) + offsets[s]) * np.log(k / 4),
        parametrizations=("standard", "mup"),
        noise=0.02,
    )
    _, drifts, difference = analyze(records, "lr")
    by = {d.parametrization: d for d in drifts}
    assert by["standard"].resolved and not by["mup"].resolved and by["mup"].slope.covers_zero
    assert difference.slope.mean == pytest.approx(-0.3, abs=0.03)
    assert difference.slope.lo <= -0.3 <= difference.slope.hi and difference.slope.hi < 0 and difference.resolved
    assert "SP - muP" in describe_difference(difference) and "not resolved" not in describe_difference(difference)
    # the same landscape with muP drifting like SP: the difference is not resolved
    same = _landscape(
        lambda p, k, s: -2.0 + (-0.3 + offsets[s] * (1 if p == "mup" else -1)) * np.log(k / 4),
        parametrizations=("standard", "mup"),
        noise=0.02,
    )
    diff = analyze(same, "lr")[2]
    assert diff.slope.covers_zero and "not resolved at this scale" in describe_difference(diff)


def test_table_json_and_figure_use_the_one_estimator(tmp_path):
    offsets = [-0.06, -0.03, 0.0, 0.03, 0.06]  # the same spread of slopes under both: no difference
    records = _landscape(
        lambda p, k, s: 0.0 if (s == 0 and k == 32) else -2.0 + (-0.2 + offsets[s]) * np.log(k / 4),
        parametrizations=("standard", "mup"),
        noise=0.01,
    )
    curves, drifts, difference = analyze(records, "lr")
    payload = json.loads(
        json.dumps(
            {
                "study": "synthetic",
                "epochs": 1,
                "hyperparameter": "lr",
                "axis": "K",
                "curves": [c.as_dict() for c in curves],
                "drift": [d.as_dict() for d in drifts],
                "drift_difference": difference.as_dict(),
            }
        )
    )
    text = format_table(payload)
    assert "1/5 seeds" in text and "(edge)" in text
    assert "standard: drift of log10(lr*) per ln K: -0.20 [" in text and "decades over K 4->32" in text
    assert "SP - muP drift" in text and "not resolved at this scale" in text  # both drift alike
    star = payload["curves"][0]["star"]
    assert set(star) >= {"mean", "ci", "n"} and "optimum" not in payload["curves"][0]
    plot_landscape(curves, drifts, "lr", tmp_path / "l.png", difference=difference)
    assert (tmp_path / "l.png").stat().st_size > 20_000


@pytest.mark.slow  # starts Ray
def test_tiny_landscape_end_to_end(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    study = tmp_path / "tiny.yaml"
    study.write_text(TINY_STUDY)
    db = tmp_path / "mlflow.db"
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "mutransfer.cli.main",
        "landscape",
        "--study",
        str(study),
        "--modes",
        "4",
        "8",
        "--lrs",
        "1e-2",
        "1e-1",
        "30",
        "--seeds",
        "1",
        "--tracking-uri",
        f"sqlite:///{db}",
        "--out",
        str(out),
        "--json",
    ]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**__import__("os").environ, "MUTRANSFER_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(proc.stdout)
    assert len(payload["records"]) == 2 * 2 * 3
    assert {(c["parametrization"], c["scale"]) for c in payload["curves"]} == {
        ("standard", 4),
        ("standard", 8),
        ("mup", 4),
        ("mup", 8),
    }
    assert {d["parametrization"] for d in payload["drift"]} == {"standard", "mup"}
    assert all(d["span"] == [4, 8] and "drift of log10(lr*) per ln K" in d["text"] for d in payload["drift"])
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


BAD_LANDSCAPES = [
    (["--modes", "4", "--lrs", "1e-3", "1e-2", "1e-1"], "at least two values of K"),
    (["--modes", "4", "40", "--lrs", "1e-3", "1e-2", "1e-1"], "modes 40 too large"),
    (["--modes", "4", "8", "--lrs", "1e-3", "1e-2"], "at least three values"),
    (["--modes", "1", "8", "--lrs", "1e-3", "1e-2", "1e-1"], "K = 1"),
]


@pytest.fixture(scope="module")
def bad_landscapes(tmp_path_factory):
    """Each of :data:`BAD_LANDSCAPES` run in a folder of its own, in one interpreter (tests/cli_batch.py)."""
    from tests.cli_batch import run_cli_batch

    cases = []
    for extra, _ in BAD_LANDSCAPES:
        folder = tmp_path_factory.mktemp("bad")
        (folder / "tiny.yaml").write_text(TINY_STUDY)
        cases.append((folder, ["landscape", "--study", folder / "tiny.yaml", *extra]))
    return [(folder, outcome) for (folder, _), outcome in zip(cases, run_cli_batch(cases), strict=True)]


@pytest.mark.parametrize("case", range(len(BAD_LANDSCAPES)))
def test_bad_landscape_input_fails_before_compute(bad_landscapes, case):
    folder, proc = bad_landscapes[case]
    fragment = BAD_LANDSCAPES[case][1]
    assert proc.returncode == 2 and fragment in proc.stderr and "Traceback" not in proc.stderr
    assert not (folder / "mlflow.db").exists()
