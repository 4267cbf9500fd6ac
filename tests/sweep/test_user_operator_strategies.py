"""A user's own operator through the sweep's strategies and the commands around a study (issue 34, item 5).

``tests/sweep/test_user_operator.py`` tunes a factory ``operator.type: "mymodel:build"`` (a ``mymodel.py`` beside the
study file, not installed) through a plain sweep. Here the same factory goes through what a plain sweep leaves out:
``sweep --verify`` (the target and the proxy retrained on an LR grid), ``sweep --baseline direct`` (the same search at
the target's size), ``sweep --ladder`` (rungs of growing K), ``sweep --warm-start`` (a second study seeded from the
first one's best trial), ``predict`` (the saved target rebuilt from the factory) and ``landscape`` (a grid of trainings
as Ray tasks). Each asserts that the user's class was trained where the report says so: the report's model labels,
the factory's own build log (``BUILD_LOG``: one line per model it built, with its K, width and device) and errors
that only the same model, seed and LR reproduce (a verification point against the target, a warm trial against its
source trial).

Everything but the landscape runs in this process with ``--executor inprocess`` (no Ray); the landscape always runs
on Ray, its workers importing the module themselves. One study (``byo``, with ``--verify`` and ``--baseline direct``)
is shared: predict and the warm start read it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.sweep.test_user_operator import _check_lrs, _study
from tests.sweep_helpers import IN_PROCESS

pytestmark = pytest.mark.slow

TARGET_SIZE = (12, 16)  # _study's target: K = 12, width 16 (its proxy: K = 6, width 8)


def _cli(*args, log: Path) -> tuple[int, str, str]:
    """``mutransfer ARGS`` in this process: (exit code, stdout, stderr), the factory's builds logged to ``log``."""
    from mutransfer.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    before = os.environ.get("BUILD_LOG")
    os.environ["BUILD_LOG"] = str(log)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([str(a) for a in args])
    finally:
        if before is None:
            os.environ.pop("BUILD_LOG", None)
        else:
            os.environ["BUILD_LOG"] = before
    return rc, out.getvalue(), err.getvalue()


def _builds(log: Path, device: str = "cpu") -> list[tuple[int, int, int]]:
    """The models the factory built on ``device`` (not the meta-device probes): (pid, K, width) each."""
    rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [(int(pid), int(k), int(width)) for pid, k, width, dev in rows if dev == device]


def _count(log: Path, k: int, width: int) -> int:
    return sum((kk, ww) == (k, width) for _, kk, ww in _builds(log))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The user's project (``project/s.yaml`` beside ``project/mymodel.py``), run from another directory; one runs
    folder and one tracking store for every command of the module. The factory's family, module and path entry are
    removed afterwards (the sweep registers them in this process)."""
    from operators.family import unregister_family

    root = tmp_path_factory.mktemp("byo")
    study = _study(root)
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    path_before = list(sys.path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MUTRANSFER_CACHE", str(root / "cache"))
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("TQDM_DISABLE", "1")
        mp.chdir(elsewhere)
        yield SimpleNamespace(
            root=root,
            study=study,
            folder=study.parent,
            data=root / "burgers.h5",
            elsewhere=elsewhere,
            store=["--runs-dir", root / "runs", "--tracking-uri", f"sqlite:///{root / 'mlflow.db'}"],
            uri=f"sqlite:///{root / 'mlflow.db'}",
            runs=root / "runs",
        )
    unregister_family("mymodel:build")
    sys.modules.pop("mymodel", None)
    sys.path[:] = path_before


@pytest.fixture(scope="module")
def verified(project):
    """Study ``byo``: 2 proxies, the target, ``--verify`` on 3 LRs x 1 seed, ``--baseline direct``."""
    log = project.root / "builds-verified.log"
    rc, out, err = _cli(
        "sweep",
        "--study",
        project.study,
        *project.store,
        "--verify",
        "--verify-points",
        "3",
        "--verify-seeds",
        "1",
        "--baseline",
        "direct",
        "--json",
        *IN_PROCESS,
        log=log,
    )
    assert rc == 0, err[-3000:]
    return SimpleNamespace(report=json.loads(out), err=err, log=log)


def test_verify_retrains_the_users_target_and_proxy_on_the_lr_grid(verified):
    report = verified.report
    _check_lrs(report)  # proxies and target: UserFNO, the target's spectral LR by the muP rules
    v = report["verification"]
    assert v is not None and v["seeds"] == [0] and v["epochs"] == 2 and v["proxy_epochs"] == 2
    assert len(v["grid"]) == 3 and v["transferred_lr"] == pytest.approx(report["target_hyperparameters"]["lr"])
    assert v["grid"][1] == pytest.approx(v["transferred_lr"])  # 3 points: the transferred LR in the middle
    assert all(math.log10(b / a) == pytest.approx(0.25) for a, b in zip(v["grid"], v["grid"][1:]))
    for records in (v["records"], v["proxy_records"]):
        assert sorted(r["lr"] for r in records) == pytest.approx(v["grid"])  # one result per grid point
        assert all(r["status"] == "completed" and math.isfinite(r["val_error"]) for r in records)
    assert v["cost"]["trainings"] == 6 and v["cost"]["proxy"]["trainings"] == 3
    assert v["target_verdict"] and v["verdict"]
    # the point at the transferred LR is the target's own training (the user's K=12 width 16 model, same seed):
    # the same validation error; the proxy's point at the search winner's LR is the winning trial's training
    same = next(r for r in v["records"] if r["lr"] == pytest.approx(v["transferred_lr"]))
    assert same["val_error"] == pytest.approx(report["target"]["val_error"], rel=1e-4)
    best = next(t for t in report["trial_table"] if t["best"])
    assert best["status"] == "completed" and best["epochs"] == 2
    assert v["search_lr"] == pytest.approx(best["config"]["lr"])
    winner = next(r for r in v["proxy_records"] if r["lr"] == pytest.approx(v["search_lr"]))
    assert winner["val_error"] == pytest.approx(best["val_error"], rel=1e-4)


def test_baseline_direct_tunes_the_users_model_at_the_targets_size(verified):
    report, d = verified.report, verified.report["direct_baseline"]
    assert d is not None and d["search"] == {"algorithm": "tpe", "trials": 2, "budget_epochs": 2, "seed": 0}
    assert "lr" in d["best_config"] and math.isfinite(d["best_trial_val_error"])
    final = d["final_training"]
    assert final["status"] == "completed" and final["epochs"] == report["target"]["epochs"]
    assert d["test_error"] == final["test_error"] and math.isfinite(d["test_error"]) and d["test_error"] > 0
    ratios = d["mutransfer_vs_direct"]
    assert ratios["error"] == pytest.approx(report["target"]["test_error"] / d["test_error"])
    assert all(math.isfinite(ratios[k]) and ratios[k] > 0 for k in ("device_seconds", "flops"))
    # the direct trials' FLOPs are the user's target-size model's, per epoch
    per_epoch = report["compute"]["target_flops"] / report["target"]["epochs"]
    assert d["cost"]["flops"] == pytest.approx(d["cost"]["search"]["epochs"] * per_epoch)
    assert "direct search: 2 trials, UserFNO-1D K=12 width 16" in verified.err
    # the factory built a real K=12 width 16 model for the target, each of the 3 verification points, each of the 2
    # direct trials and the direct winner's final training: a built-in model in either phase would leave fewer
    assert _count(verified.log, *TARGET_SIZE) >= 1 + 3 + 2 + 1, _builds(verified.log)


def test_predict_runs_the_users_saved_target(verified, project, monkeypatch):
    """The study's target is rebuilt by calling the factory (imported from the working directory: the project's)."""
    monkeypatch.chdir(project.folder)
    config = json.loads((project.runs / "byo" / "model" / "config.json").read_text())
    assert config["model_class"] == "UserFNO" and config["model_config"]["factory"] == "mymodel:build"
    out = project.root / "predicted.h5"
    log = project.root / "builds-predict.log"
    rc, stdout, err = _cli(
        "predict", "byo", "--runs-dir", project.runs, "--data", project.data, "--out", out, "--json", log=log
    )
    assert rc == 0, err[-2000:]
    written = json.loads(stdout)
    assert written["samples"] == 48 and written["model"] == "byo" and out.is_file()
    assert _count(log, *TARGET_SIZE) >= 1, log.read_text() if log.exists() else "no build"
    rc, stdout, err = _cli("data", "inspect", out, "--json", log=log)
    assert rc == 0, err[-2000:]
    inspected = json.loads(stdout)
    assert inspected["attrs"]["schema"] == "mutransfer-pde" and inspected["attrs"]["prediction.study"] == "byo"
    assert inspected["datasets"]["output"]["shape"] == [48, 128]
    # the outputs are the model's: evaluated against its own predictions it is exact
    rc, stdout, err = _cli("evaluate", "byo", "--runs-dir", project.runs, "--data", out, "--json", log=log)
    assert rc == 0, err[-2000:]
    assert json.loads(stdout)["results"][0]["relative_l2"] == pytest.approx(0.0, abs=1e-6)


def test_ladder_trains_each_rung_and_the_target_with_the_users_model(project):
    log = project.root / "builds-ladder.log"
    rc, out, err = _cli(
        "sweep", "--study", project.study, "--name", "byo-ladder", "--ladder", 6, 9, *project.store, "--json",
        *IN_PROCESS, log=log,
    )  # fmt: skip
    assert rc == 0, err[-3000:]
    report = json.loads(out)
    assert report["proxy_model"] == "UserFNO-1D K=6 width 8" and report["target_model"] == "UserFNO-1D K=12 width 16"
    rungs = report["rungs"]
    assert [(r["rung"], r["K"], r["width"], r["trials"]) for r in rungs] == [(0, 6, 8, 2), (1, 9, 8, 1)]
    promoted = rungs[0]["promoted"]
    assert len(promoted) == 1 and rungs[1]["table"][0]["from"] == promoted[0]
    assert rungs[1]["table"][0]["status"] == "completed" and rungs[1]["table"][0]["epochs"] == 2
    assert rungs[1]["table"][0]["config"] == pytest.approx(rungs[0]["best_config"])  # master values carry over
    assert rungs[1]["lr_factor_from_previous"] == pytest.approx(math.sqrt(math.log(6) / math.log(9)))
    assert _count(log, 9, 8) >= 1, _builds(log)  # the rung: the user's class at K = 9
    # the target trained the last rung's best, transferred from K = 9 (the effective LR's factor from there); the
    # model applies the muP multipliers itself against its base (the proxy, K = 6 width 8)
    target = report["target"]
    assert target["status"] == "completed" and target["epochs"] == 2 and math.isfinite(target["test_error"])
    lr = report["target_hyperparameters"]["lr"]
    assert lr == pytest.approx(rungs[1]["best_config"]["lr"])
    assert report["transfer"]["proxy_modes"] == 9 and report["transfer"]["target_modes"] == 12
    assert report["transfer"]["lr_factor"] == pytest.approx(math.sqrt(math.log(9) / math.log(12)) * 8 / 16)
    want = lr * math.sqrt(math.log(6) / math.log(12)) * 8 / 16
    assert target["spectral_lr0"] == pytest.approx(want, rel=1e-9)
    assert _count(log, *TARGET_SIZE) >= 1, _builds(log)


def test_warm_start_seeds_a_study_of_the_users_model_with_the_first_ones_best(verified, project, monkeypatch):
    """From the project's folder (the source's study.yaml names the factory: read where the module is)."""
    monkeypatch.chdir(project.folder)
    source = sorted(
        (t for t in verified.report["trial_table"] if t["status"] == "completed"), key=lambda t: t["val_error"]
    )
    log = project.root / "builds-warm.log"
    rc, out, err = _cli(
        "sweep", "--study", project.study, "--name", "byo-warm", "--warm-start", "byo", "--warm-start-top", 1,
        *project.store, "--json", *IN_PROCESS, log=log,
    )  # fmt: skip
    assert rc == 0, err[-3000:]
    report = json.loads(out)
    _check_lrs(report)
    section = report["warm_start"]
    assert section["source"] == "byo" and section["trials"] == 1
    assert section["location"] == str(project.runs / "byo")
    row = section["from_source"][0]
    assert (row["trial_id"], row["source_trial"]) == ("t0000", source[0]["trial_id"])
    assert row["lr_factor"] == 1.0 and row["source_error"] == pytest.approx(source[0]["val_error"])
    seeded = next(t for t in report["trial_table"] if t["trial_id"] == "t0000")
    assert seeded["config"] == pytest.approx(source[0]["config"])
    # the seeded trial trained the same model (the user's K=6 width 8), seed and LR as its source: the same error
    assert seeded["status"] == "completed" and seeded["val_error"] == pytest.approx(row["source_error"], rel=1e-4)
    assert report["trials"]["total"] == 2 and _count(log, 6, 8) >= 2


def test_warm_start_from_another_directory_reads_the_source_study(verified, project):
    """The first study ran from ``elsewhere`` (its module beside the --study file); so does the warm start. Found by
    this test: the source folder's study.yaml was read under the folder rule (a factory only from the working
    directory), so the factory beside the --study file was refused, exit 2; the source may now import it from where
    this study's own factory was found (mutransfer._sweep.warm_start.load_source's ``factory_dir``)."""
    rc, out, err = _cli(
        "sweep", "--study", project.study, "--name", "byo-warm-elsewhere", "--warm-start", "byo",
        "--warm-start-top", 1, *project.store, "--json", *IN_PROCESS, log=project.root / "builds-warm2.log",
    )  # fmt: skip
    assert rc == 0, err[-2000:]
    assert json.loads(out)["warm_start"]["source"] == "byo"


def test_landscape_trains_the_users_model_on_ray_workers(project):
    """``landscape`` accepts a factory: every grid point is the user's class at its K, built in a Ray worker."""
    log = project.root / "builds-landscape.log"
    out_dir = project.root / "landscape"
    rc, _, err = _cli(
        "landscape", "--study", project.study, "--modes", 6, 12, "--parametrization", "mup",
        "--lrs", 1e-3, 3e-3, 1e-2, "--seeds", 1, "--epochs", 1, "--tracking-uri", project.uri,
        "--out", out_dir, "--json", "--no-progress", log=log,
    )  # fmt: skip
    assert rc == 0, err[-3000:]
    payload = json.loads((out_dir / "landscape.json").read_text())
    assert payload["operator"] == "mymodel:build" and payload["axis"] == "K"
    assert {(c["parametrization"], c["scale"]) for c in payload["curves"]} == {("mup", 6), ("mup", 12)}
    records = payload["records"]
    assert len(records) == 6 and all(r["status"] == "completed" and math.isfinite(r["test_error"]) for r in records)
    assert (out_dir / "landscape.png").stat().st_size > 0
    in_workers = [(k, width) for pid, k, width in _builds(log) if pid != os.getpid()]
    assert in_workers.count((12, 8)) >= 3 and in_workers.count((6, 8)) >= 3, _builds(log)
