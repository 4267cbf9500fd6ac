"""The paper's Navier-Stokes study (K 3 -> 24) ships as a study file, with a 1-GPU and a CPU smoke version.

The smoke version differs from the paper's only in sizes (checked here), and runs end to end
through the real CLI and MLflow, its trainings in process (slow).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from pathlib import Path

import pytest
import yaml

from mutransfer._study import load_study
from operators.planning import parse_bytes
from tests.repo_paths import ROOT

PAPER = ROOT / "studies" / "navier_stokes_paper.yaml"
ONE_GPU = ROOT / "studies" / "navier_stokes_paper_1gpu.yaml"
SMOKE = ROOT / "studies" / "navier_stokes_paper_smoke.yaml"

#: fields a reduced version may change: how big and how long, never what is trained or how
SIZE_FIELDS = {
    "name",
    "problem.generated_resolution",
    "problem.resolution",
    "problem.time_resolution",
    "problem.n_train",
    "problem.n_test",
    "operator.width",
    "operator.projection_channels",
    "proxy_K",
    "target_K",
    "training.milestones",
    "search.num_trials",
    "search.max_concurrent",
    "budget.epochs",
    "budget.grace_period",
    "budget.max_failures",
    "resources.cpus_per_trial",
    "resources.gpus_per_trial",
    "target.epochs",
    "target.num_workers",
    "target.use_gpu",
    "target.cpus_per_worker",
}


def _flatten(mapping: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and key != "search_space":
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _differences(a: Path, b: Path) -> set[str]:
    fa, fb = _flatten(yaml.safe_load(a.read_text())), _flatten(yaml.safe_load(b.read_text()))
    return {k for k in set(fa) | set(fb) if fa.get(k, "<missing>") != fb.get(k, "<missing>")}


@pytest.mark.parametrize("reduced", [ONE_GPU, SMOKE], ids=["1gpu", "smoke"])
def test_reduced_versions_change_only_sizes(reduced):
    changed = _differences(PAPER, reduced)
    assert changed <= SIZE_FIELDS, f"{reduced.name} changes more than sizes: {sorted(changed - SIZE_FIELDS)}"
    assert "proxy_K" in changed or "target_K" in changed or "operator.width" in changed


def test_the_size_check_can_fail(tmp_path):
    """A smoke file that changed the recipe (clipping off) is caught."""
    mapping = yaml.safe_load(SMOKE.read_text())
    mapping["training"]["clip_value"] = None
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(mapping, sort_keys=False))
    assert "training.clip_value" in _differences(PAPER, bad) - SIZE_FIELDS


def test_paper_study_has_the_papers_numbers():
    study, _ = load_study(PAPER)
    assert (study.problem.name, study.operator.type, study.dim) == ("navier_stokes", "fno", 3)
    assert (study.proxy_K, study.target_K, study.operator.width, study.operator.layers) == (3, 24, 64, 4)
    assert study.parametrization == "mup" and study.training.clip_value == 0.01
    assert study.training.betas == [0.9, 0.999] and study.training.batch_size == 2
    assert (study.problem.n_train, study.problem.n_test) == (800, 200)
    assert (study.problem.resolution, study.problem.time_resolution) == (64, 64)
    # 50,000 iterations, LR halved at 20k and 40k: epochs x (n_train / batch) iterations
    per_epoch = study.problem.n_train // study.training.batch_size
    assert study.target.epochs * per_epoch == 50_000
    assert [m * per_epoch for m in study.training.milestones] == [20_000, 40_000]
    from mutransfer._problems import get_problem

    assert get_problem("navier_stokes").generator_options[0] == "preset"  # default preset "mutransfer": Re 500


def test_paper_target_is_the_906M_model_and_fits_an_80GiB_gpu_per_worker():
    from mutransfer._study.memory import _plan

    study, _ = load_study(PAPER)
    per_worker = study.training.batch_size // study.target.num_workers
    fp32 = _plan(study, study.target_K, study.operator.width, per_worker)
    assert fp32.spectral_params == 905_969_664 and fp32.grid == (64, 64, 64) and fp32.padding == 4
    assert fp32.fits(parse_bytes("80GiB")) and not fp32.fits(parse_bytes("24GiB"))
    bf16 = fp32.replan(precision="bf16")
    assert bf16.activations_bytes < fp32.activations_bytes


@pytest.mark.slow
def test_smoke_study_runs_end_to_end(tmp_path):
    """The smoke version through `mutransfer sweep`: proxies, muP transfer K 2 -> 4, target, MLflow, checkpoints per epoch."""
    from mutransfer.cli.main import main
    from tests.sweep_helpers import mlflow_runs

    old_cwd, old_cache = os.getcwd(), os.environ.get("MUTRANSFER_CACHE")
    os.environ["MUTRANSFER_CACHE"] = str(tmp_path / "cache")
    os.chdir(tmp_path)
    try:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            rc = main(["sweep", "--study", str(SMOKE), "--json", "--executor", "inprocess"])
    finally:
        os.chdir(old_cwd)
        if old_cache is None:
            os.environ.pop("MUTRANSFER_CACHE", None)
        else:
            os.environ["MUTRANSFER_CACHE"] = old_cache
    assert rc == 0
    report = json.loads(buffer.getvalue())
    assert report["target"]["status"] == "completed" and math.isfinite(report["target"]["test_error"])
    factor = math.sqrt(math.log(2) / math.log(4))
    assert report["target"]["spectral_lr0"] == pytest.approx(report["best_proxy"]["spectral_lr"] * factor, rel=1e-9)
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    kinds = [r.data.tags.get("mutransfer.kind") for r in runs]
    assert kinds.count("proxy_trial") == 2 and kinds.count("target") == 1
    target = next(r for r in runs if r.data.tags["mutransfer.kind"] == "target")
    assert float(target.data.params["hp.clip_value"]) == 0.01
    # target.checkpoint_every: 1 -> a resumable checkpoint after epoch 1, and the final one with the model
    target_dir = tmp_path / "mutransfer-runs" / "navier-stokes-smoke" / "target"
    assert (target_dir / "epoch_00001" / "checkpoint.pt").is_file()
    assert {p.name for p in (target_dir / "final").iterdir()} >= {"model.pt", "checkpoint.pt", "summary.json"}
