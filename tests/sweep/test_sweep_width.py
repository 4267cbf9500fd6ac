"""Width transfer end to end on real Ray and MLflow: a Galerkin sweep on an irregular mesh, and a width landscape (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.sweep_helpers import galerkin_mesh_study, mlflow_runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mesh_file(tmp_path_factory):
    from mutransfer.data._pointclouds import generate_darcy_mesh, write_point_dataset

    path = tmp_path_factory.mktemp("mesh") / "mesh.h5"
    write_point_dataset(path, generate_darcy_mesh(40, 17, seed=0, progress=False, points_min=60, points_max=100))
    return path


def test_galerkin_width_sweep_on_an_irregular_mesh(mesh_file, tmp_path):
    """Proxies at width 8, the best configuration trained at width 32 under width-muP; all recorded in MLflow."""
    from mutransfer._sweep import SweepOptions, run_sweep

    path = galerkin_mesh_study(
        tmp_path, "galerkin-mesh", mesh_file, n_train=32, n_test=8, target_width=32, batch_size=8, epochs=2
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = run_sweep(
        SweepOptions(
            study_path=str(path),
            runs_dir=str(tmp_path / "runs"),
            overrides={"tracking_uri": uri},
            quiet=True,
            executor="inprocess",
        )
    )

    assert report["operator"] == "galerkin" and report["scaling"] == "width 8 -> 32 (width-mup)"
    rows = {q["name"]: q for q in report["transfer"]["quantities"]}
    assert rows["hidden_lr"]["factor"] == pytest.approx(8 / 32)
    target = report["target"]
    assert target["status"] == "completed" and target["test_error"] < 10
    saved = torch.load(Path(target["checkpoint_dir"]) / "model.pt", weights_only=True)
    assert saved["model_config"]["operator_config"]["width"] == 32
    assert saved["model_config"]["operator_config"]["base_width"] == 8
    assert (
        report["compute"]["flops_method"] == "counted"
        and report["compute"]["target_flops"] > report["compute"]["proxy_flops"] > 0
    )

    runs = mlflow_runs(uri)
    parent = [r for r in runs if r.data.tags.get("mutransfer.kind") == "study"][0]
    assert parent.data.params["operator"] == "galerkin" and parent.data.params["target_width"] == "32"
    trials = [r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    assert len(trials) == 2 and all(r.data.params["width"] == "8" for r in trials)


def test_width_landscape_end_to_end(tmp_path):
    """--widths: SP vs width-muP curves per width, optimum table and drift, one MLflow child run per point."""
    study = tmp_path / "tiny.yaml"
    study.write_text(
        "name: tiny-width\n"
        "problem: {name: burgers, generated_resolution: 128, resolution: 32, n_train: 24, n_test: 8}\n"
        "operator: {type: galerkin, width: 4, layers: 1, heads: 2}\n"
        "target_width: 16\n"
        "search_space: {lr: {type: loguniform, low: 1.0e-3, high: 1.0e-2}}\n"
        "training: {batch_size: 8}\n"
        "budget: {epochs: 1}\n"
    )
    db, out = tmp_path / "mlflow.db", tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "mutransfer.cli.main",
        "landscape",
        "--study",
        str(study),
        "--widths",
        "4",
        "16",
        "--lrs",
        "1e-3",
        "1e-2",
        "1e-1",
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
        env={**os.environ, "MUTRANSFER_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(proc.stdout)
    assert payload["axis"] == "width" and payload["base_width"] == 4 and payload["operator"] == "galerkin"
    assert {(c["parametrization"], c["scale"]) for c in payload["curves"]} == {
        ("standard", 4),
        ("standard", 16),
        ("mup", 4),
        ("mup", 16),
    }
    assert {tuple(d["span"]) for d in payload["drift"]} == {(4, 16)}
    # at the base width, muP is the standard model: the two curves coincide exactly
    at_base = {(r["parametrization"], r["value"]): r["test_error"] for r in payload["records"] if r["scale"] == 4}
    for lr in (1e-3, 1e-2, 1e-1):
        assert at_base[("mup", lr)] == pytest.approx(at_base[("standard", lr)], rel=1e-5)
    assert (out / "landscape.png").stat().st_size > 20_000
    runs = mlflow_runs(f"sqlite:///{db}")
    points = [r for r in runs if r.data.tags.get("mutransfer.kind") == "landscape_point"]
    assert len(points) == 12 and {r.data.params["width"] for r in points} == {"4", "16"}


def test_attention_target_trains_with_two_ddp_workers(ray_local, mesh_file, tmp_path):
    """Ray Train DDP (2 gloo workers) on packed point sets: every parameter gets a gradient, the model saves and rebuilds.
    ONO's and GNOT's gradients under DDP, without Ray: tests/sweep/test_sweep_ddp.py (Ray's part is the same)."""
    operator = "galerkin"
    from mutransfer._study import parse_study
    from mutransfer._study.models import merge_hyperparameters
    from mutransfer._sweep.target_run import run_target
    from mutransfer.data._pointclouds import load_point_split
    from operators.adapters import PackedPointSet

    study = parse_study(
        {
            "name": f"{operator}-ddp",
            "problem": {"name": "darcy_mesh", "data": str(mesh_file), "n_train": 32, "n_test": 8},
            "operator": {"type": operator, "width": 8, "layers": 1, "heads": 2},
            "target_width": 16,
            "search_space": {"lr": {"type": "loguniform", "low": 1e-3, "high": 1e-2}},
            "target": {"epochs": 2, "num_workers": 2, "cpus_per_worker": 1},
        },
        "ddp",
    )
    data = load_point_split(mesh_file, n_train=32, n_test=8)
    hp = merge_hyperparameters(study, {"lr": 3e-3, "batch_size": 8})
    outcome = run_target(study, hp, data, tmp_path, use_gpu=False, max_failures=0)
    assert outcome.status == "completed" and outcome.num_workers == 2 and outcome.test_error < 10
    saved = torch.load(Path(outcome.checkpoint_dir) / "model.pt", weights_only=True)
    model = PackedPointSet(**saved["model_config"])
    model.load_state_dict(saved["model"])
    assert model.operator.config["width"] == 16 and model.operator.config["base_width"] == 8
