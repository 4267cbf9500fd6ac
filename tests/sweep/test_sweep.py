"""`mutransfer sweep` end to end on a real local Ray and a real MLflow sqlite store (slow).

Ray is started once for the module (num_cpus=2) and shut down after; the sweep
reuses it (it only starts Ray when none is running).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.sweep_helpers import mlflow_runs, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_tiny_data(tmp_path_factory.mktemp("data") / "burgers_tiny.h5")


# --------------------------------------------------------------------------- the quick study


@pytest.fixture(scope="module")
def quick_run(ray_local, tmp_path_factory):
    """The built-in quick study, shrunk by CLI overrides, run through the real CLI entry point."""
    from mutransfer.cli.main import main

    work = tmp_path_factory.mktemp("quick")
    old_cwd, old_cache = os.getcwd(), os.environ.get("MUTRANSFER_CACHE")
    os.environ["MUTRANSFER_CACHE"] = str(work / "cache")  # default data generated here on first use
    os.chdir(work)
    out = work / "report.json"
    try:
        import contextlib
        import io

        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            rc = main(
                [
                    "sweep",
                    "--proxy-K",
                    "6",
                    "--target-K",
                    "24",
                    "--num-trials",
                    "4",
                    "--epochs",
                    "2",
                    "--target-epochs",
                    "2",
                    "--json",
                ]
            )
        out.write_text(buffer.getvalue())
    finally:
        os.chdir(old_cwd)
        if old_cache is None:
            os.environ.pop("MUTRANSFER_CACHE", None)
        else:
            os.environ["MUTRANSFER_CACHE"] = old_cache
    assert rc == 0
    return work, json.loads(out.read_text())


def test_quick_study_end_to_end(quick_run):
    work, report = quick_run
    uri = f"sqlite:///{work / 'mlflow.db'}"
    runs = mlflow_runs(uri)
    kinds = [r.data.tags.get("mutransfer.kind") for r in runs]
    assert kinds.count("study") == 1 and kinds.count("proxy_trial") == 4 and kinds.count("target") == 1
    assert not [r for r in runs if r.info.status == "RUNNING"], "a run was left RUNNING"
    parent = next(r for r in runs if r.data.tags["mutransfer.kind"] == "study")
    trials = [r for r in runs if r.data.tags["mutransfer.kind"] == "proxy_trial"]
    target = next(r for r in runs if r.data.tags["mutransfer.kind"] == "target")
    assert {r.data.tags["mlflow.parentRunId"] for r in trials + [target]} == {parent.info.run_id}
    assert len({r.data.tags["mutransfer.trial_id"] for r in trials}) == 4
    assert parent.info.status == "FINISHED" and parent.data.tags["mutransfer.status"] == "done"
    assert {r.data.tags["mutransfer.status"] for r in trials} <= {"completed", "pruned", "diverged"}
    for r in trials:  # per-epoch metrics, logged in one batch
        assert r.data.metrics["epochs"] >= 1 and "final_val_error" in r.data.metrics

    # muP transfer (the default study scales K 6 -> 24 and the width 16 -> 64): the target's effective spectral LR =
    # the best proxy's x sqrt(log Kp / log Kt) x m0/m; the master LR carries over
    best = next(r for r in trials if r.data.tags["mutransfer.trial_id"] == report["best_proxy"]["trial_id"])
    factor = math.sqrt(math.log(6) / math.log(24)) * 16 / 64
    assert float(target.data.params["spectral_lr"]) == pytest.approx(
        float(best.data.params["spectral_lr"]) * factor, rel=1e-9
    )
    assert float(target.data.params["hp.lr"]) == pytest.approx(float(best.data.params["hp.lr"]), rel=1e-12)
    assert float(parent.data.params["transfer.lr_factor"]) == pytest.approx(factor)
    assert report["target"]["spectral_lr0"] == pytest.approx(report["best_proxy"]["spectral_lr"] * factor, rel=1e-9)

    # the target evaluated on the test split; its checkpoint and the parent's report are artifacts
    assert report["target"]["status"] == "completed" and math.isfinite(report["target"]["test_error"])
    assert target.data.metrics["final_test_error"] == pytest.approx(report["target"]["test_error"])
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    ckpt = {a.path for a in client.list_artifacts(target.info.run_id, "checkpoint")}
    assert {"checkpoint/model.pt", "checkpoint/checkpoint.pt", "checkpoint/summary.json"} <= ckpt
    reports = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.json", "report/report.txt", "report/proxy_trials.png"} <= reports
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "study")} >= {
        "study/study.yaml",
        "study/source.yaml",
    }

    # compute accounting and the study directory
    c = report["compute"]
    assert c["proxy_device_seconds"] > 0 and c["target_device_seconds"] > 0 and 0 <= c["overhead_share"] < 1
    # each fixed overhead measured on its own: the driver saw every trial start (its span, on the driver's clock,
    # holds the trainer's time), Ray Train's start-up and the setup took time, and the parts fit in the wall
    o = c["overheads"]
    for run in trials:
        m = run.data.metrics
        assert m["span_seconds"] > 0 and m["span_seconds"] >= 0.5 * m["trainer_seconds"], m
    assert o["setup_seconds"] > 0 and o["target_startup_seconds"] > 0 and o["trial_startup_mean_seconds"] > 0
    assert 0 < o["fixed_seconds"] < c["sweep_wall_seconds"] and 0 < o["fixed_share"] < 1
    parts = ("setup_seconds", "trial_startup_seconds", "proxy_scheduling_seconds", "target_startup_seconds")
    assert o["fixed_seconds"] == pytest.approx(sum(o[k] for k in parts))  # the parts make the whole
    assert o["fixed_share"] == pytest.approx(o["fixed_seconds"] / c["sweep_wall_seconds"])
    # FLOP accounting: proxies (K=6) cost less per epoch than the target (K=24); ratio vs direct tuning logged
    assert 0 < c["proxy_flops"] < c["direct_sweep_flops"] and c["target_flops"] > 0
    assert parent.data.metrics["mutransfer_vs_direct_flops"] == pytest.approx(c["mutransfer_vs_direct_flops"])
    assert report["trials"]["total"] == 4 and report["overrides"]
    state = json.loads((work / "mutransfer-runs" / "quick" / "state.json").read_text())
    assert state["phase"] == "done" and state["parent_run_id"] == parent.info.run_id

    # the summary ends with a verdict in words and the next commands, the report's real path among them
    from mutransfer._sweep.report import format_report

    tail = format_report(report).split("\nverdict:\n", 1)[1]
    page = work / "mutransfer-runs" / "quick" / "report.html"
    assert page.exists() and f"the study page, {page}" in tail
    assert "reached a" in tail or "no better than its proxy" in tail
    assert "--verify --name quick-2" in tail


def test_quick_run_executed_each_trial_once(quick_run):
    from mutransfer._sweep.trial import read_executions

    work, report = quick_run
    for t in report["trial_table"]:
        runs = read_executions(work / "mutransfer-runs" / "quick" / "trials" / t["trial_id"])
        assert [e["kind"] for e in runs] == ["train"]


def test_resume_of_a_finished_study_reports_it_again_without_new_runs(quick_run, capsys):
    from mutransfer.cli.main import main

    work, report = quick_run
    before = len(mlflow_runs(f"sqlite:///{work / 'mlflow.db'}"))
    old = os.getcwd()
    os.chdir(work)
    try:
        assert main(["sweep", "--resume", "--json"]) == 0
    finally:
        os.chdir(old)
    again = json.loads(capsys.readouterr().out)
    assert again["already_complete"] and again["best_proxy"] == report["best_proxy"]
    assert len(mlflow_runs(f"sqlite:///{work / 'mlflow.db'}")) == before


def test_the_same_command_again_reports_a_finished_study_and_a_changed_one_is_refused(quick_run, capsys):
    """The README's order: Set up runs the quick study, the Quickstart runs the same command again: its report
    again, exit 0, nothing new run. The same name with other settings is still refused (one line, exit 2)."""
    from mutransfer.cli.main import main

    work, report = quick_run
    before = len(mlflow_runs(f"sqlite:///{work / 'mlflow.db'}"))
    same = ["sweep", "--proxy-K", "6", "--target-K", "24", "--num-trials", "4", "--epochs", "2", "--target-epochs", "2"]
    old = os.getcwd()
    os.chdir(work)
    try:
        assert main([*same, "--json"]) == 0
        again = json.loads(capsys.readouterr().out)
        assert main([*same[:-1], "3"]) == 2  # --target-epochs 3: another study under the same name
        err = capsys.readouterr().err
    finally:
        os.chdir(old)
    assert again["already_complete"] and again["best_proxy"] == report["best_proxy"]
    assert "ran to the end here with other settings (target.epochs)" in err and "--name NEW" in err
    assert len(err.strip().splitlines()) == 1
    assert len(mlflow_runs(f"sqlite:///{work / 'mlflow.db'}")) == before


def test_studies_lists_the_quick_study(quick_run, capsys):
    from mutransfer.cli.main import main

    work, report = quick_run
    assert main(["studies", "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1
    row = rows[0]
    assert (row["study"], row["status"], row["proxy_K"], row["target_K"]) == ("quick", "done", 6, 24)
    assert row["best_proxy_error"] == pytest.approx(report["best_proxy"]["val_error"])
    assert row["target_error"] == pytest.approx(report["target"]["test_error"])
    assert main(["studies", "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("study") and table[2].startswith("quick")


def test_the_sweep_tags_its_experiment_for_the_ui(quick_run):
    """The sweep itself (not only `mutransfer ui`) writes the experiment kind and the study's runs view."""
    from mlflow.tracking import MlflowClient

    work, report = quick_run
    tags = MlflowClient(f"sqlite:///{work / 'mlflow.db'}").get_experiment(report["mlflow"]["experiment_id"]).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(tags["mlflow.sharedViewState.quick"])
    assert view["selectedColumns"][:2] == ["params.`hp.lr`", "params.`hp.batch_size`"]  # first: seen unscrolled
    assert view["searchFilter"] == "tags.`mutransfer.study` = 'quick' AND tags.`mutransfer.kind` != 'study'"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_the_store_on_localhost(quick_run):
    work, report = quick_run
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mutransfer.cli.main", "ui", "--port", str(port)],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true"),
        start_new_session=True,
    )
    try:
        link = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/#/experiments/{report['mlflow']['experiment_id']}/runs" in link
        deadline, healthy = time.time() + 120, False
        while time.time() < deadline and not healthy:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    healthy = r.status == 200
            except OSError:
                time.sleep(0.5)
        assert healthy, "MLflow UI did not become healthy"
        body = json.dumps({"experiment_ids": [report["mlflow"]["experiment_id"]], "max_results": 100}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert len(json.loads(r.read())["runs"]) == 6
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


# --------------------------------------------------------------------------- fault tolerance


def test_failing_trial_is_retried_then_recorded_failed(ray_local, tiny_data, tmp_path, monkeypatch):
    """MUTRANSFER_FAIL_TRIALS=2 with max_failures 1: trial 1 fails, is retried, fails again -> FAILED; the sweep goes on."""
    from mutransfer._sweep import SweepOptions, run_sweep

    study = write_tiny_study(tmp_path, tiny_data, name="faulty", trials=3, max_concurrent=1, max_failures=1)
    monkeypatch.setenv("MUTRANSFER_FAIL_TRIALS", "2")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = run_sweep(
        SweepOptions(
            study_path=str(study), runs_dir=str(tmp_path / "runs"), overrides={"tracking_uri": uri}, quiet=True
        )
    )
    assert report["trials"]["total"] == 3 and report["trials"]["failed"] == 1
    assert report["target"]["status"] == "completed"

    faults = sorted((tmp_path / "runs" / "faulty" / "faults").iterdir())
    failed_ids = {p.read_text() for p in faults}
    assert len(faults) == 2 and len(failed_ids) == 1, "both injected faults hit the same trial: a real retry"
    (failed_id,) = failed_ids

    runs = mlflow_runs(uri)
    trials = {
        r.data.tags["mutransfer.trial_id"]: r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"
    }
    assert len(trials) == 3
    failed = trials[failed_id]
    assert failed.info.status == "FAILED" and failed.data.tags["mutransfer.status"] == "failed"
    assert failed.data.tags["mutransfer.retries"] == "1"
    assert (
        "InjectedFault" in failed.data.tags["mutransfer.error"]
        or "injected fault" in failed.data.tags["mutransfer.error"]
    )
    assert all(r.info.status == "FINISHED" for tid, r in trials.items() if tid != failed_id)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert report["best_proxy"]["trial_id"] != failed_id


def test_diverged_trial_reports_the_finite_sentinel(tiny_data, tmp_path):
    """An absurd learning rate diverges: the trial ends cleanly with test error DIVERGED_METRIC (in process: how a
    trial ends is the trial function's, the same on Ray)."""
    from mutransfer._sweep import SweepOptions, run_sweep
    from mutransfer._training import DIVERGED_METRIC

    study = write_tiny_study(
        tmp_path,
        tiny_data,
        name="diverging",
        trials=2,
        epochs=3,
        search={"algorithm": "grid"},
    )
    import yaml

    m = yaml.safe_load(study.read_text())
    m["search_space"] = {"lr": {"type": "choice", "values": [3e-3, 1e6]}}
    study.write_text(yaml.safe_dump(m))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = run_sweep(
        SweepOptions(
            study_path=str(study),
            runs_dir=str(tmp_path / "runs"),
            overrides={"tracking_uri": uri},
            quiet=True,
            executor="inprocess",
        )
    )
    by_lr = {t["config"]["lr"]: t for t in report["trial_table"]}
    assert by_lr[1e6]["status"] == "diverged" and by_lr[1e6]["val_error"] == DIVERGED_METRIC
    assert report["best_proxy"]["config"]["lr"] == 3e-3
    statuses = {
        r.data.tags.get("mutransfer.status")
        for r in mlflow_runs(uri)
        if r.data.tags.get("mutransfer.kind") == "proxy_trial"
    }
    assert "diverged" in statuses


# --------------------------------------------------------------------------- target with DDP


def test_target_trains_with_two_ddp_workers(ray_local, tiny_data, tmp_path):
    """Ray Train TorchTrainer with 2 gloo workers: complex spectral grads all-reduced by DDP, full-test evaluation."""
    from mutransfer._study import load_study
    from mutransfer._study.models import merge_hyperparameters
    from mutransfer._sweep.target_run import run_target
    from mutransfer.data._loading import load_split

    path = write_tiny_study(tmp_path, tiny_data, target_epochs=3, target={"num_workers": 2, "cpus_per_worker": 1})
    study, _ = load_study(path)
    data = load_split(tiny_data, n_train=32, n_test=16, resolution=64)
    hp = merge_hyperparameters(study, {"lr": 3e-3, "batch_size": 8})
    outcome = run_target(study, hp, data, tmp_path, use_gpu=False, max_failures=0)
    assert outcome.status == "completed" and outcome.epochs == 3 and math.isfinite(outcome.test_error)
    assert outcome.per_worker_batch == 4 and outcome.num_workers == 2
    assert outcome.device_seconds == pytest.approx(outcome.wall_seconds * 2)
    files = set(os.listdir(outcome.checkpoint_dir))
    assert {"model.pt", "checkpoint.pt", "summary.json"} <= files
    import torch

    saved = torch.load(Path(outcome.checkpoint_dir) / "model.pt", weights_only=True)
    assert saved["model_config"]["modes"] == study.target_K
    assert not any(k.startswith("module.") for k in saved["model"])  # the plain model, not the DDP wrapper


def test_coord_check_reports_a_wrong_parametrization_and_never_blocks(tiny_data, tmp_path, monkeypatch):
    """--coord-check: a spectral LR of c(K)·K makes every layer's update grow with K (flagged, said, in the report
    and on the parent run); SP's updates on this smooth data are flat (pass). Both studies train their target: the
    check reports and never blocks (it misclassifies known rules: docs/results.md, the rule panel). The check runs
    in the driver, where the wrong multiplier is patched in (SpectralConv looks it up at construction)."""
    import yaml

    import operators.spectral
    from mutransfer._sweep import SweepOptions, run_sweep

    right = operators.spectral.spectral_lr_multiplier
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs_dir = tmp_path / "runs"
    for name in ("wrong", "standard"):
        path = write_tiny_study(tmp_path, tiny_data, name=f"gate-{name}", trials=2)
        mapping = yaml.safe_load(path.read_text())
        mapping["parametrization"] = "standard"
        path.write_text(yaml.safe_dump(mapping, sort_keys=False))
        options = SweepOptions(
            study_path=str(path),
            runs_dir=str(runs_dir),
            overrides={"tracking_uri": uri},
            quiet=True,
            coord_check=True,
            executor="inprocess",  # the check's logic; it runs in the driver either way
        )
        if name == "wrong":
            monkeypatch.setattr(
                operators.spectral, "spectral_lr_multiplier", lambda k, d, p, rho=1.0: right(k, d, p, rho) * k
            )
        report = run_sweep(options)
        monkeypatch.undo()
        assert report["target"]["status"] == "completed"
        cc = report["coord_check"]
        assert cc["verdict"] == ("flagged" if name == "wrong" else "pass") and cc["blocks"] is False
        if name == "wrong":
            assert any(f.startswith("fourier_") and "grows, slope +" in f for f in cc["flagged"])
        gate = json.loads((runs_dir / f"gate-{name}" / "coord_check.json").read_text())
        assert gate["passed"] == {"standard": name == "standard"}
    runs = mlflow_runs(uri)
    targets = [r for r in runs if r.data.tags.get("mutransfer.kind") == "target"]
    assert sorted(r.data.tags["mutransfer.study"] for r in targets) == ["gate-standard", "gate-wrong"]
    parents = {r.data.tags["mutransfer.study"]: r for r in runs if r.data.tags.get("mutransfer.kind") == "study"}
    assert parents["gate-wrong"].data.tags["mutransfer.coord_check"] == "flagged"
