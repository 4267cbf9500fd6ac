"""A two-objective search (``search.objectives: error+seconds``): the sampler is told both, the journal is a
two-objective Optuna study, and the report gives the Pareto front (issue "The first hour", item 5)."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml

from mutransfer._study import load_study
from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.pareto import pareto_front, pareto_lines, pareto_section
from mutransfer.errors import UserInputError
from tests.sweep_helpers import IN_PROCESS, write_tiny_study


def _trial(i: int, error: float | None, seconds: float, status: str = "completed") -> TrialRecord:
    return TrialRecord(f"t{i:04d}", i + 1, status, {"lr": 0.001 * (i + 1)}, {}, error, 2, trainer_seconds=seconds)


def test_the_front_keeps_what_no_trial_beats_on_both_and_drops_the_rest():
    trials = [
        _trial(0, 0.10, 5.0),  # the lowest error: on the front
        _trial(1, 0.20, 2.0),  # cheaper: on the front
        _trial(2, 0.30, 3.0),  # beaten by t0001 on both: off
        _trial(3, 0.20, 2.5),  # equal error, slower than t0001: off
        _trial(4, 0.05, 1.0, "pruned"),  # pruned: its seconds are part of a training's, never on the front
        _trial(5, None, 0.5, "failed"),
        _trial(6, 0.40, 1.0),  # the cheapest: on the front
        _trial(7, 0.45, 0.0),  # its seconds were not measured: off, though 0 s would beat every trial
    ]
    assert [t.trial_id for t in pareto_front(trials)] == ["t0000", "t0001", "t0006"]
    section = pareto_section("error+seconds", trials)
    assert section["completed"] == 6 and [p["trial_id"] for p in section["trials"]] == ["t0000", "t0001", "t0006"]
    assert pareto_section("error", trials) is None and pareto_lines(None) == []
    assert pareto_lines(section)[0].startswith("Pareto front (validation error vs training seconds), 3 of 6 completed")


def _study(tmp_path, tiny_data, algorithm: str = "tpe"):
    path = write_tiny_study(tmp_path, tiny_data, name="two", trials=4, epochs=2, grace=2)
    mapping = yaml.safe_load(path.read_text())
    mapping["search"].update(algorithm=algorithm, objectives="error+seconds")
    mapping["search_space"]["batch_size"] = {"type": "choice", "values": [5, 10, 20]}  # what costs seconds
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return path


def test_a_two_objective_study_runs_end_to_end_with_its_front(tiny_data, tmp_path, capsys, monkeypatch):
    """NSGA-II told (validation error, training seconds) of each completed trial; the report's front is the trials
    no other completed one beats on both; optuna.load_study sees a two-objective study whose best_trials are that
    front; the summary and the study page show it; the target trains the lowest validation error."""
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    path = _study(tmp_path, tiny_data, "NSGAIISampler")
    assert main(["sweep", "--study", str(path), "--runs-dir", str(tmp_path / "runs"), "--json", *IN_PROCESS]) == 0
    report = json.loads(capsys.readouterr().out)
    done = [t for t in report["trial_table"] if t["status"] == "completed"]
    front = report["pareto_front"]["trials"]
    assert front and report["pareto_front"]["completed"] == len(done)
    on = {p["trial_id"] for p in front}
    for t in done:  # on the front exactly when no other completed trial beats it on both objectives
        beaten = any(
            o["val_error"] <= t["val_error"]
            and o["trainer_seconds"] <= t["trainer_seconds"]
            and (o["val_error"], o["trainer_seconds"]) != (t["val_error"], t["trainer_seconds"])
            for o in done
        )
        assert (t["trial_id"] in on) is not beaten, t
    assert front[0]["trial_id"] == report["best_proxy"]["trial_id"]  # the winner: the lowest validation error

    folder = tmp_path / "runs" / "two"
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / "optuna.journal")))
    ostudy = optuna.load_study(study_name="two", storage=storage)
    assert len(ostudy.directions) == 2
    assert {t.user_attrs["mutransfer.trial_id"] for t in ostudy.best_trials} == on
    for t in ostudy.get_trials(states=[optuna.trial.TrialState.COMPLETE]):
        row = next(r for r in done if r["trial_id"] == t.user_attrs["mutransfer.trial_id"])
        assert t.values == pytest.approx([row["val_error"], row["trainer_seconds"]], rel=1e-6)

    from tests.sweep_helpers import mlflow_runs

    (parent,) = [
        r for r in mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}") if r.data.tags["mutransfer.kind"] == "study"
    ]
    assert parent.data.tags["mutransfer.verdict"] == "; ".join(report["verdict"])  # the studies' view's last column
    assert parent.data.metrics["mutransfer_vs_direct_wall_seconds"] == pytest.approx(
        report["compute"]["mutransfer_vs_direct_wall_seconds"]
    )

    import mutransfer as mt

    loaded = mt.load_study("two", storage=tmp_path / "runs", executor="inprocess")
    assert [t.key for t in loaded.best_trials] == [p["trial_id"] for p in front]  # the API's front: the same, in order

    page = (folder / "report.html").read_text()
    assert 'id="pareto"' in page and "Pareto front: validation error vs training seconds" in page

    from mutransfer._sweep.report import format_report  # the summary the sweep prints without --json

    assert f"Pareto front (validation error vs training seconds), {len(front)} of {len(done)}" in format_report(report)


@pytest.mark.parametrize("name", ["CmaEsSampler", "optuna.samplers.CmaEsSampler"])
def test_a_one_objective_sampler_is_refused_for_two_objectives(tiny_data, tmp_path, name):
    with pytest.raises(UserInputError, match="CmaEsSampler searches one objective") as err:
        load_study(_study(tmp_path, tiny_data, name))
    assert "search.algorithm" in str(err.value)
    from mutransfer._study.samplers import single_objective

    assert single_objective(name) and not single_objective("NSGAIISampler") and not single_objective("tpe")


def test_an_unknown_objective_is_refused(tiny_data, tmp_path):
    path = _study(tmp_path, tiny_data)
    path.write_text(path.read_text().replace("error+seconds", "error+flops"))
    with pytest.raises(UserInputError, match=r"search.objectives: .*error\+seconds"):
        load_study(path)


def test_a_two_objective_sampler_is_told_pruned_trials_as_pruned_and_failed_ones_as_failed(tiny_data, tmp_path):
    """(error, seconds) for a completed trial, PRUNED for a pruned one (Optuna's samplers count it as a poor one),
    None (failed) for a failed one or one without measured seconds; a one-objective search is told as before."""
    from mutransfer._sweep.plan import Outcome
    from mutransfer._sweep.sampling import PRUNED, sample_config

    metrics = {"val_error": 0.3, "trainer_seconds": 2.0}
    assert Outcome("completed", metrics).told("error+seconds") == (0.3, 2.0)
    assert Outcome("pruned", metrics).told("error+seconds") == PRUNED
    assert Outcome("failed", metrics).told("error+seconds") is None
    assert Outcome("completed", {"val_error": 0.3}).told("error+seconds") is None
    assert Outcome("pruned", metrics).told("error") == 0.3  # one objective: the last value, as before
    study, _ = load_study(_study(tmp_path, tiny_data, "tpe"))
    told = [
        ({"lr": 1e-3, "batch_size": 10}, (0.3, 2.0)),
        ({"lr": 1e-2, "batch_size": 20}, PRUNED),
        ({"lr": 3e-3, "batch_size": 10}, None),
    ]
    config = sample_config(study, 3, told)
    assert set(config) == set(study.search_space)


def test_the_population_executor_is_refused_for_two_objectives(tiny_data, tmp_path, capsys, monkeypatch):
    """A population books each member a share of its seconds: not the configuration's cost. Refused, exit 2."""
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    path = _study(tmp_path, tiny_data)
    assert main(["sweep", "--study", str(path), "--executor", "population"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "executor population (--executor" in err[0] and "error+seconds" in err[0]
    assert not (tmp_path / "mutransfer-runs").exists()  # refused before any folder
