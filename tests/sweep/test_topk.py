"""`sweep --top-k N`: the N best proxies trained at the target, the winner chosen by its target error.

Fast tests (no Ray): the ranking, the winner, the resume bookkeeping of mutransfer._sweep.topk (a stand-in for
Ray Train's training, a real sqlite MLflow store), the report's table and costs, the refusal of top_k > trials.
Slow tests: the CLI end to end with real Ray and MLflow, and a SIGKILL between two candidates then --resume.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from mutransfer._study import load_study, parse_study
from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.context import (
    FinalSearch,
    ProxyResults,
    StudyData,
    StudyRun,
    pick_best,
    ranked,
)
from mutransfer._sweep.session import Made, Session
from mutransfer._sweep.target import TargetOutcome
from mutransfer._sweep.topk import (
    Candidate,
    candidates,
    carry,
    choose_winner,
    count_in_compute,
    topk_metrics,
    train_top_k,
)
from mutransfer.errors import UserInputError
from tests.sweep_helpers import K_ONLY_STUDY, k_only_study_text, prepared_by_hand, session_by_hand


def _trial(i: int, status: str, error: float | None, lr: float = 1e-3) -> TrialRecord:
    hp = {"lr": lr, "batch_size": 20, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0, "init_scale": 1.0}
    return TrialRecord(f"t{i:04d}", i, status, {"lr": lr}, hp, error, 2, trainer_seconds=1.0, device_seconds=2.0)


def test_ranking_is_pick_bests_ranking_completed_first_then_pruned_or_diverged():
    trials = [
        _trial(0, "pruned", 0.1),
        _trial(1, "completed", 0.5),
        _trial(2, "failed", None),
        _trial(3, "completed", 0.3),
        _trial(4, "diverged", 1e9),
        _trial(5, "pruned", None),
    ]
    assert [t.trial_id for t in ranked(trials)] == ["t0003", "t0001", "t0000", "t0004"]
    rng = random.Random(0)
    for _ in range(200):  # the first of the ranking is always pick_best's choice
        trials = [
            _trial(i, rng.choice(["completed", "pruned", "diverged", "failed"]), rng.choice([None, rng.random()]))
            for i in range(rng.randint(1, 6))
        ]
        order = ranked(trials)
        assert (order[0] if order else None) is pick_best(trials)


def test_candidates_are_the_n_best_and_fewer_when_fewer_reported():
    proxies = ProxyResults(
        [_trial(0, "completed", 0.4), _trial(1, "failed", None), _trial(2, "completed", 0.2)], None, 1
    )
    search = Made(made_proxies=proxies).final(load_study(K_ONLY_STUDY)[0])
    assert [t.trial_id for t in candidates(search, 1)] == ["t0002"]
    assert [t.trial_id for t in candidates(search, 3)] == ["t0002", "t0000"]  # t0001 has no error: only 2 carried


def _cand(rank: int, error, status: str = "completed") -> Candidate:
    outcome = TargetOutcome(status, error, 1)
    return Candidate(
        rank, f"t{rank:04d}", 0.1 * rank, {"lr": 1e-3}, {}, outcome, target_test_error=error, status=status
    )


def test_the_winner_is_the_lowest_target_error_never_a_diverged_or_nan_one():
    assert choose_winner([_cand(1, 0.3), _cand(2, 0.2), _cand(3, 0.25)]).rank == 2
    assert choose_winner([_cand(1, 0.3), _cand(2, 0.3)]).rank == 1  # a tie goes to the better proxy
    assert choose_winner([_cand(1, 1e-9, "diverged"), _cand(2, float("nan")), _cand(3, 0.9)]).rank == 3
    assert choose_winner([_cand(1, 0.3)]).rank == 1


def test_carry_is_the_mup_transfer_of_the_candidate():
    """K 6 -> 24 (the quick study, 1-D): the spectral LR and init std scale by sqrt(log 6 / log 24); master LR unchanged."""
    study, _ = load_study(K_ONLY_STUDY)
    trial = _trial(7, "completed", 0.1, lr=3e-3)
    result = carry(FinalSearch([trial], trial, study), None, trial)
    factor = math.sqrt(math.log(study.proxy_K) / math.log(study.target_K))
    assert study.dim == 1 and math.isclose(result.record["lr_factor"], factor, rel_tol=1e-12)
    assert math.isclose(
        result.record["target_spectral_init_std"], result.record["proxy_spectral_init_std"] * factor, rel_tol=1e-12
    )
    assert result.hp == trial.hp


class _Stop(Exception):
    pass


def _outcome(error: float, checkpoint: Path):
    from mutransfer._sweep.target import TargetOutcome

    checkpoint.mkdir(parents=True, exist_ok=True)
    return TargetOutcome(
        "completed", error, 2, trainer_seconds=1.5, wall_seconds=4.0, device_seconds=4.0, checkpoint_dir=str(checkpoint)
    )


def _context(tmp_path: Path, study, tracker, state: dict) -> tuple[Session, Made]:
    import torch

    (tmp_path / "study").mkdir(parents=True, exist_ok=True)
    prepared = prepared_by_hand(study, tmp_path / "study", state, tracking_uri=tracker.uri, tracker=tracker)
    trials = [_trial(0, "completed", 0.4), _trial(1, "completed", 0.2), _trial(2, "pruned", 0.3)]
    fit = SimpleNamespace(train_x=torch.zeros(4, 64, 1))
    experiment_id = tracker.ensure_experiment("topk")
    run = StudyRun(experiment_id, tracker.client.create_run(experiment_id).info.run_id)
    session = session_by_hand(prepared, StudyData(fit, fit, fit, tmp_path / "data.h5"), run=run)
    return session, Made(made_proxies=ProxyResults(trials, pick_best(trials), 1))


def test_a_finished_candidate_is_kept_and_not_trained_again_after_an_interruption(tmp_path):
    """Session 1 stops during candidate 2 (after its run was created); session 2 trains 2 and 3 only, reusing 2's run."""
    from mutransfer._tracking.runs import Tracker

    study, _ = load_study(K_ONLY_STUDY, {"top_k": 3})
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    errors = {"t0001": 0.5, "t0000": 0.25, "t0002": 0.35}  # ranks: t0001, t0000, t0002 (pruned)
    calls: list[tuple] = []

    def fit(ctx, job, remember_run, stop_at=None):
        run_id, key = job.run_id, job.proxy_trial_id
        if run_id is None:
            run_id = ctx.tracker.create_target_run(ctx.experiment_id, ctx.parent_id, study.name, {})
            ctx.tracker.set_tags(run_id, dict(job.tags))
            remember_run(run_id)
        calls.append((key, run_id, job.transfer.hp["lr"]))
        if key == stop_at:
            raise _Stop
        return _outcome(errors[key], job.storage_dir / "target" / "final"), run_id

    ctx, made = _context(tmp_path, study, tracker, {})
    with pytest.raises(_Stop):
        train_top_k(ctx, made, lambda *a: fit(*a, stop_at="t0000"))
    stored = json.loads((ctx.study_dir.root / "state.json").read_text())
    assert [d["trial_id"] for d in stored["topk_targets"]] == ["t0001"] and set(stored["topk_run_ids"]) == {
        "t0001",
        "t0000",
    }
    assert stored["topk_targets"][0]["outcome"]["checkpoint_dir"] == "targets/t0001/target/final"  # kept relative

    first_session = list(calls)
    ctx, made = _context(tmp_path, study, tracker, stored)  # a new driver reads state.json
    calls.clear()
    made = train_top_k(ctx, made, fit)
    assert [c[0] for c in calls] == ["t0000", "t0002"]  # candidate 1 is not trained again
    assert calls[0][1] == first_session[1][1]  # candidate 2 continues under its own MLflow run
    top = made.records["top_k"].candidates
    assert [c.rank for c in top] == [1, 2, 3] and [c.winner for c in top] == [False, True, False]
    assert made.target.test_error == 0.25 and made.target_run_id == stored["topk_run_ids"]["t0000"]
    assert made.transfer.hp == carry(made.final(study), None, made.proxies.trials[0]).hp
    assert made.target.checkpoint_dir == str(ctx.study_dir.root / "targets" / "t0000" / "target" / "final")
    state = json.loads((ctx.study_dir.root / "state.json").read_text())
    assert state["target_run_id"] == made.target_run_id and state["target_outcome"]["test_error"] == 0.25
    tags = {c.trial_id: tracker.client.get_run(c.mlflow_run_id).data.tags for c in made.records["top_k"].candidates}
    assert tags["t0000"]["mutransfer.topk_winner"] == "true" and tags["t0001"]["mutransfer.topk_winner"] == "false"
    assert tags["t0002"]["mutransfer.topk_rank"] == "3" and tags["t0002"]["mutransfer.proxy_trial"] == "t0002"


def test_a_stored_winner_without_its_mlflow_run_is_refused_on_resume_naming_the_rebuild(tmp_path):
    """A top-k record whose winner names no MLflow run (a damaged state.json) is refused in one line that says how
    to rebuild the state, and nothing is trained again."""
    from mutransfer._sweep.context import SweepError
    from mutransfer._tracking.runs import Tracker

    study, _ = load_study(K_ONLY_STUDY, {"top_k": 2})
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    errors = {"t0001": 0.5, "t0000": 0.25}
    calls: list[str] = []

    def fit(ctx, job, remember_run):
        calls.append(job.proxy_trial_id)
        run_id = job.run_id or ctx.tracker.create_target_run(ctx.experiment_id, ctx.parent_id, study.name, {})
        remember_run(run_id)
        return _outcome(errors[job.proxy_trial_id], job.storage_dir / "target" / "final"), run_id

    train_top_k(*_context(tmp_path, study, tracker, {}), fit)
    stored = json.loads((tmp_path / "study" / "state.json").read_text())
    winner = next(c for c in stored["topk_targets"] if c["trial_id"] == "t0000")
    del winner["mlflow_run_id"]
    calls.clear()
    with pytest.raises(SweepError) as info:
        train_top_k(*_context(tmp_path, study, tracker, stored), fit)
    assert calls == []  # both candidates were stored: none trained again
    message = str(info.value)
    assert "top-k: the winner, proxy trial t0000, names no MLflow run;" in message and "\n" not in message
    assert "--rebuild-state" in message, message


def _rows() -> list[dict]:
    rows = []
    for rank, (key, error, winner) in enumerate([("t0001", 0.5, False), ("t0002", 0.25, True)], 1):
        rows.append(
            {
                "rank": rank,
                "trial_id": key,
                "proxy_val_error": 0.1 * rank,
                "target_test_error": error,
                "status": "completed",
                "epochs": 2,
                "device_seconds": 4.0 * rank,
                "trainer_seconds": 1.5,
                "trainer_device_seconds": 1.5,
                "flops": 1e8,
                "mlflow_run_id": f"run{rank}",
                "winner": winner,
                "hp": {"lr": 2e-3},
                "lr": 2e-3,
            }
        )
    return rows


def test_every_candidate_counts_in_mutransfers_cost():
    compute = {
        "mutransfer_vs_direct_flops": 0.5,
        "direct_sweep_flops": 1e9,
        "mutransfer_vs_direct_training_seconds": 0.4,
        "direct_sweep_training_seconds_estimate": 10.0,
        "trainer_seconds_critical_path": 3.0,
        "sweep_wall_seconds": 10.0,
        "overhead_share": 0.7,
    }
    count_in_compute(compute, _rows())
    assert compute["top_k_targets"] == 2 and compute["top_k_device_seconds"] == 12.0 and compute["top_k_flops"] == 2e8
    # the winner is the report's target, counted already: the other candidate is added
    assert math.isclose(compute["mutransfer_vs_direct_flops"], 0.5 + 1e8 / 1e9)
    assert math.isclose(compute["mutransfer_vs_direct_training_seconds"], 0.4 + 1.5 / 10.0)
    assert math.isclose(compute["trainer_seconds_critical_path"], 4.5) and math.isclose(compute["overhead_share"], 0.55)
    alone = {"mutransfer_vs_direct_flops": 0.5, "direct_sweep_flops": 1e9}
    count_in_compute(alone, _rows()[1:])  # top-1 by the numbers: nothing added
    assert alone["mutransfer_vs_direct_flops"] == 0.5


def test_the_report_shows_the_table_and_compares_the_winner_with_its_own_proxy():
    from mutransfer._sweep.report import build_report, format_report
    from mutransfer._sweep.target import TargetOutcome

    study, _ = load_study(K_ONLY_STUDY, {"top_k": 2})
    trials = [_trial(1, "completed", 0.1), _trial(2, "completed", 0.2)]
    target = TargetOutcome("completed", 0.25, 2, trainer_seconds=1.5, wall_seconds=8.0, device_seconds=8.0)
    common = dict(
        study=study,
        trials=trials,
        best=trials[0],
        transfer=None,
        target_hp=None,
        target=target,
        proxy_device="cpu",
        wall_seconds=20.0,
        mlflow={},
        study_dir="x",
        overrides=[],
    )
    report = build_report(**common, top_k=_rows())
    plain = build_report(**common)
    assert [r["trial_id"] for r in report["top_k"]] == ["t0001", "t0002"] and plain["top_k"] is None
    assert report["proxy_to_target"]["proxy_error"] == 0.2  # the winner's proxy, not the best proxy
    assert plain["proxy_to_target"]["proxy_error"] == 0.1
    assert report["compute"]["mutransfer_vs_direct_flops"] > plain["compute"]["mutransfer_vs_direct_flops"]
    text = format_report(json.loads(json.dumps(report)))
    table = text[text.index("top-k:") :].splitlines()
    assert "proxy trial t0002 (rank 2)" in table[0] and "transferred lr" in table[1]
    assert table[2].split()[:2] == ["1", "t0001"] and not table[2].endswith("winner")
    assert table[3].split()[:2] == ["2", "t0002"] and table[3].endswith("winner")
    assert "all 2 target trainings: 12.0 device-s" in table[4]
    assert "top-k" not in format_report(plain)
    assert topk_metrics(_rows(), 7) == [
        ("topk_1_target_error", 0.5, 7, 0),
        ("topk_2_target_error", 0.25, 7, 0),
        ("topk_winner_rank", 2, 7, 0),
    ]
    assert topk_metrics(None, 7) == []


def _mapping(**search) -> dict:
    m = yaml.safe_load(k_only_study_text())
    m["search"].update(search)
    return m


def test_top_k_above_the_trials_is_refused_and_up_to_them_accepted():
    with pytest.raises(UserInputError, match=r"search.top_k: 4 is more than the study's 3 trial\(s\)"):
        parse_study(_mapping(num_trials=3, top_k=4), "s.yaml")
    assert parse_study(_mapping(num_trials=3, top_k=3), "s.yaml").search.top_k == 3
    assert parse_study(_mapping(), "s.yaml").search.top_k == 1
    grid = _mapping(algorithm="grid", num_trials=1, top_k=3)  # a grid's trials are its combinations (here 2 x 2)
    grid["search_space"] = {
        "lr": {"type": "choice", "values": [1e-3, 1e-2]},
        "batch_size": {"type": "choice", "values": [10, 20]},
    }
    assert parse_study(grid, "s.yaml").search.top_k == 3
    grid["search"]["top_k"] = 5
    with pytest.raises(UserInputError, match="more than the study's 4 trial"):
        parse_study(grid, "s.yaml")


def test_top_k_flag_too_large_is_one_line_before_any_compute(tmp_path):
    from tests.cli.test_sweep_cli import assert_no_compute, run_probe

    proc = run_probe(tmp_path, "sweep", "--num-trials", "3", "--top-k", "4")
    assert_no_compute(proc, tmp_path, "search.top_k: 4 is more than the study's 3 trial(s)", "(set by --top-k)")


# ---- real Ray, real MLflow, real subprocesses ------------------------------------------------------------------


def _env(tmp_path, **extra) -> dict:
    import os

    return dict(
        os.environ,
        MLFLOW_DISABLE_TELEMETRY="true",
        RAY_USAGE_STATS_ENABLED="0",
        MUTRANSFER_CACHE=str(tmp_path / "cache"),
        TQDM_DISABLE="1",
        **extra,
    )


def _study(tmp_path: Path, name: str, **kw) -> list[str]:
    from tests.sweep_helpers import write_tiny_data, write_tiny_study

    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(tmp_path, data, name=name, trials=3, **kw)
    return [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study), "--json", "--top-k", "2"]


def _check_two_targets(tmp_path: Path, report: dict) -> list:
    from tests.sweep_helpers import mlflow_runs

    rows = report["top_k"]
    assert [r["rank"] for r in rows] == [1, 2] and sum(r["winner"] for r in rows) == 1
    winner = min(rows, key=lambda r: r["target_val_error"])  # chosen on validation data
    assert winner["winner"] and report["target"]["test_error"] == winner["target_test_error"]
    assert report["target"]["mlflow_run_id"] == winner["mlflow_run_id"]
    ranked = sorted((t for t in report["trial_table"] if t["status"] == "completed"), key=lambda t: t["val_error"])
    assert [r["trial_id"] for r in rows] == [t["trial_id"] for t in ranked[:2]]
    runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    targets = {r.info.run_id: r for r in runs if r.data.tags.get("mutransfer.kind") == "target"}
    assert set(targets) == {r["mlflow_run_id"] for r in rows}  # two target runs, one per candidate
    for r in rows:
        tags = targets[r["mlflow_run_id"]].data.tags
        assert tags["mutransfer.topk_rank"] == str(r["rank"]) and tags["mutransfer.proxy_trial"] == r["trial_id"]
        assert tags["mutransfer.topk_winner"] == ("true" if r["winner"] else "false")
    assert report["model"]["run_uri"] == f"runs:/{winner['mlflow_run_id']}/model"  # the winner is the logged model
    parent = next(r for r in runs if r.data.tags.get("mutransfer.kind") == "study")
    assert parent.data.metrics["topk_winner_rank"] == winner["rank"]
    assert parent.data.metrics[f"topk_{winner['rank']}_target_error"] == winner["target_test_error"]
    return runs


@pytest.mark.slow
def test_top_k_2_from_the_cli_trains_two_targets_and_logs_the_winner(tmp_path):
    cmd = [*_study(tmp_path, "topk"), "--executor", "inprocess"]  # the candidates' logic, the same on Ray
    done = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    _check_two_targets(tmp_path, report)
    root = tmp_path / "mutransfer-runs" / "topk"
    assert sorted(p.name for p in (root / "targets").iterdir()) == sorted(r["trial_id"] for r in report["top_k"])
    assert not (root / "target").exists()
    assert "winner" in (root / "report.txt").read_text()
    # the executor booked each candidate under top-k's tag (mutransfer._sweep._ledger): what its table counts
    from mutransfer._sweep._ledger import Ledger

    booked = [b for b in Ledger(root).bookings() if b.tag == "top_k"]
    assert sorted(b.key for b in booked) == sorted(f"targets/{r['trial_id']}/target" for r in report["top_k"])
    assert sum(b.flops for b in booked) == pytest.approx(report["compute"]["top_k_flops"])


@pytest.mark.slow
def test_kill_between_candidates_then_resume_does_not_train_the_first_again(tmp_path):
    import os
    import signal

    cmd = [*_study(tmp_path, "topk-kill"), "--executor", "inprocess"]  # the kill and the resume are the driver's
    root = tmp_path / "mutransfer-runs" / "topk-kill"
    held = root / "held-at-topk_next_candidate"
    with open(tmp_path / "first.err", "w") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=tmp_path,
            env=_env(tmp_path, MUTRANSFER_HOLD_AT="topk_next_candidate"),
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
        try:
            deadline = time.time() + 600
            while time.time() < deadline and not held.exists():
                assert proc.poll() is None, (tmp_path / "first.err").read_text()[-2000:]
                time.sleep(0.2)
            assert held.exists()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    state = json.loads((root / "state.json").read_text())
    assert [d["rank"] for d in state["topk_targets"]] == [1]
    first = state["topk_targets"][0]
    progress = root / "targets" / first["trial_id"] / "target" / "progress.jsonl"
    before = progress.read_bytes()

    resumed = subprocess.run(
        cmd + ["--resume"], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=900
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert progress.read_bytes() == before  # candidate 1 trained no epoch more
    assert report["top_k"][0]["mlflow_run_id"] == first["mlflow_run_id"]
    assert report["top_k"][0]["target_test_error"] == first["target_test_error"]
    runs = _check_two_targets(tmp_path, report)
    assert all(r.info.status == "FINISHED" for r in runs)
