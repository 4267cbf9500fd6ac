"""The Python API (mutransfer/__init__.py, mutransfer/_api/): a study made, searched, transferred, trained, reported
and loaded again from Python, on the in-process executor (real trainings, a real MLflow store); the issue's snippet
as written on Ray in a fresh interpreter (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import optuna
import pytest
import torch
import yaml

import mutransfer as mt
from tests.repo_paths import ROOT
from tests.sweep_helpers import write_tiny_data, write_tiny_study


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    data = write_tiny_data(folder / "tiny.h5")
    return folder, write_tiny_study(folder, data, trials=4, epochs=3, grace=1)


def _create(folder, spec, **kw):
    return mt.create_study(
        spec, storage=folder / "runs", executor="inprocess", tracking_uri=f"sqlite:///{folder / 'mlflow.db'}", **kw
    )


def _executions(study_dir) -> int:
    return sum(len(p.read_text().splitlines()) for p in (study_dir / "trials").glob("*/executions.jsonl"))


def test_a_study_from_python_end_to_end_then_loaded_again(tiny, tmp_path):
    folder, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "py"})
    seen = []
    with _create(tmp_path, spec, sampler=optuna.samplers.TPESampler(seed=0)) as study:
        study.optimize(n_trials=4, callbacks=[lambda s, t: seen.append((s.name, t.key, t.state))])
        assert [t.number for t in study.trials] == [0, 1, 2, 3]
        assert seen == [("py", t.key, t.state) for t in study.trials]  # each trial told once, as it ended
        best = study.best_trial
        assert best.value == min(t.value for t in study.trials if t.state == "completed")
        assert study.best_params == best.params and set(best.params) == {"lr", "batch_size"}
        frame = study.trials_dataframe()
        assert list(frame["number"]) == [0, 1, 2, 3] and "params_lr" in frame.columns

        record = study.transfer()
        assert record.source == best.key and record.proxy["lr"] == best.params["lr"]
        assert record.target["batch_size"] == best.params["batch_size"]

        target = study.train_target()
        assert isinstance(target.model, torch.nn.Module) and target.history
        assert target.hyperparameters["lr"] == pytest.approx(record.target["lr"])
        x = torch.randn(2, 64, 1)  # (batch, grid, channels): u0 on 64 points (the model appends x itself)
        assert target.model(x).shape == (2, 64, 1)

        report = study.report()
        assert json.loads(report.to_json())["best_proxy"]["trial_id"] == best.key
        assert "<html" in report.to_html().lower() and study.name in report.to_text()
    runs = _executions(study.study_dir)
    from mlflow.tracking import MlflowClient

    parent = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(
        json.loads(report.to_json())["mlflow"]["parent_run_id"]
    )
    assert parent.info.status == "FINISHED", "a study reported, then closed, is finished, not interrupted"

    again = mt.load_study("py", storage=tmp_path / "runs", executor="inprocess")
    assert again.best_params == study.best_params
    from mutransfer._study_folder.lock import lock_paths
    from mutransfer._study_folder.state import StudyDir

    assert not lock_paths(StudyDir(study.study_dir))[1].exists(), "a finished study, loaded, holds its lock"
    assert again.train_target().test_error == pytest.approx(target.test_error)
    assert _executions(study.study_dir) == runs  # loading a finished study trains nothing


def test_a_study_closed_after_its_search_continues_where_it_stopped(tiny, tmp_path):
    folder, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "halves"})
    first = _create(tmp_path, spec)
    first.optimize()
    params = first.best_params
    first.close()
    runs = _executions(first.study_dir)
    second = mt.load_study("halves", storage=tmp_path / "runs", executor="inprocess")
    assert second.best_params == params and _executions(first.study_dir) == runs  # the search is not run again
    assert second.train_target().model is not None
    assert json.loads((first.study_dir / "state.json").read_text())["phase"] != "proxies"


def test_a_sampler_object_chooses_the_configurations(tiny, tmp_path):
    folder, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"budget.epochs": 1, "search.num_trials": 3})
    params = []
    for name, seed in (("r1", 7), ("r2", 7), ("r3", 8)):
        study = _create(tmp_path, spec.replace({"name": name}), sampler=optuna.samplers.RandomSampler(seed=seed))
        study.optimize()
        params.append([t.params for t in study.trials])
        study.close()
    assert params[0] == params[1] and params[0] != params[2]


def test_an_optuna_pruner_stops_trials_in_place_of_asha(tiny, tmp_path):
    """Any Optuna pruner is asked at each evaluation on the study's journal: ThresholdPruner(upper=0) stops every
    trial at its first (each error is above 0), and the trials' evaluations are its intermediate values."""
    _, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "pruned", "search.num_trials": 2})
    with _create(tmp_path, spec, pruner=optuna.pruners.ThresholdPruner(upper=0.0)) as study:
        study.optimize()
        assert [t.state for t in study.trials] == ["pruned", "pruned"]
        assert [len(t.intermediate_values) for t in study.optuna_study.trials] == [1, 1]
        assert study.spec.study.budget.grace_period == study.spec.study.budget.epochs  # ASHA off: no rungs
    spec = spec.replace({"name": "kept"})
    with _create(tmp_path, spec, pruner=optuna.pruners.ThresholdPruner(upper=1e9)) as study:
        study.optimize()  # every error is below 1e9: nothing stopped
        assert [t.state for t in study.trials] == ["completed", "completed"]


def test_enqueued_trials_run_first_and_bad_ones_are_one_line(tiny, tmp_path):
    from mutransfer._api._enqueue import enqueue

    _, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "enq", "search.num_trials": 4})
    with _create(tmp_path, spec) as study:
        study.enqueue_trial({"lr": 1e-3, "batch_size": 10})
        study.enqueue_trial({"lr": 1e-3, "batch_size": 10}, skip_if_exists=True)  # already there: nothing
        study.enqueue_trial({"lr": 2e-3})  # batch_size sampled
        study.enqueue_trial({"lr": np.float32(2e-3)}, skip_if_exists=True)  # the same, to float32's precision
        with pytest.raises(mt.UserInputError, match="skip_if_exists is True or False, got 'yes'"):
            study.enqueue_trial({"lr": 2e-3}, skip_if_exists="yes")  # type: ignore[arg-type]
        for bad, why in [
            ({"lrr": 1e-3}, "'lrr' is not a searched hyperparameter"),
            ({"lr": 50.0}, "lr '50.0' is not a value of the search space"),
            ({"batch_size": 7}, "batch_size '7' is not a value of the search space (one of 10, 20)"),
            ([("lr", 1e-3)], "params: a dict of searched hyperparameters to values"),
            ({}, "params: name at least one searched hyperparameter"),
            ({"lr": np.array([1e-3])}, "lr: a number or a choice, got ndarray"),
        ]:
            with pytest.raises(mt.UserInputError, match=f"enqueue_trial: .*{why[:30]}"):
                study.enqueue_trial(bad)  # type: ignore[arg-type]
        study.enqueue_trial({"batch_size": np.int64(20), "lr": np.float32(4e-3)})  # numpy numbers: Python ones
        study.optimize(n_trials=4)
        assert study.trials[0].params == {"lr": 1e-3, "batch_size": 10}
        assert study.trials[2].params == {"lr": pytest.approx(4e-3), "batch_size": 20}
        assert type(study.trials[2].params["batch_size"]) is int
        assert study.trials[1].params["lr"] == 2e-3 and study.trials[3].params["lr"] != 2e-3
        enqueued = [t.user_attrs.get("mutransfer.enqueued", False) for t in study.optuna_study.trials]
        assert enqueued == [True, True, True, False]
        with pytest.raises(mt.UserInputError, match="enqueue_trial: the search has handed out or holds all its 4"):
            study.enqueue_trial({"lr": 3e-3})
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "optuna.journal").write_bytes(b"")  # a driver stopped as Optuna made the file
    assert enqueue(spec, tmp_path / "empty", {"lr": 1e-3}, (), skip_if_exists=False) == ({"lr": 1e-3},)  # kept
    grid = mt.StudySpec.from_yaml(path).replace(
        {"name": "grid", "search.algorithm": "grid", "search_space.lr": {"type": "choice", "values": [1e-3, 2e-3]}}
    )
    with pytest.raises(mt.UserInputError, match="enqueue_trial: a grid search hands out every combination"):
        _create(tmp_path, grid).enqueue_trial({"lr": 1e-3})


def test_a_loaded_study_takes_a_pruner_in_place_of_its_asha_never_other_asha_settings(tiny, tmp_path):
    _, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "lp", "search.num_trials": 1})
    with _create(tmp_path, spec) as study:
        study.optimize()
    kw = {"storage": tmp_path / "runs", "executor": "inprocess"}
    median = optuna.pruners.MedianPruner()
    with mt.load_study("lp", pruner=median, **kw) as loaded:
        assert loaded._options.pruner is median  # in place of its ASHA, for the trials it has left
        assert loaded.spec.study.budget.grace_period == spec.study.budget.grace_period < spec.study.budget.epochs
    same = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=spec.study.budget.reduction_factor)
    mt.load_study("lp", pruner=same, **kw).close()  # the stored ASHA itself: nothing to change
    with mt.load_study("lp", **kw) as loaded:
        with pytest.raises(mt.UserInputError, match="n_trials 3: this study searches 1 trials"):
            loaded.optimize(n_trials=3)
        assert len(loaded.trials) == 1  # the refusal changed nothing: the study reads on
    other = _create(tmp_path, spec.replace({"search.num_trials": 2}), load_if_exists=True)
    with pytest.raises(mt.UserInputError, match=r"study 'lp' was made with other settings \(search.num_trials\): cont"):
        other.optimize()
    with pytest.raises(mt.UserInputError, match="pruner SuccessiveHalvingPruner: study 'lp' keeps the ASHA it was"):
        mt.load_study("lp", pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=3), **kw)


def test_pruners_map_to_asha_and_others_are_refused(tiny, tmp_path):
    _, path = tiny
    spec = mt.StudySpec.from_yaml(path)
    asha = _create(tmp_path, spec, pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=3))
    assert (asha.spec.study.budget.grace_period, asha.spec.study.budget.reduction_factor) == (2, 3)
    none = _create(tmp_path, spec, pruner=optuna.pruners.NopPruner())
    assert none.spec.study.budget.grace_period == spec.study.budget.epochs
    with pytest.raises(mt.UserInputError, match="bootstrap_count 0"):
        _create(tmp_path, spec, pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, bootstrap_count=2))
    with pytest.raises(mt.UserInputError, match="pruner str: an Optuna pruner object"):
        _create(tmp_path, spec, pruner="median")  # type: ignore[arg-type]
    two = spec.replace({"search.objectives": "error+seconds"})
    with pytest.raises(mt.UserInputError, match="pruner MedianPruner: Optuna's pruners judge one objective"):
        _create(tmp_path, two, pruner=optuna.pruners.MedianPruner())
    with pytest.raises(mt.UserInputError, match="sampler GridSampler"):
        _create(tmp_path, spec, sampler=optuna.samplers.GridSampler({"lr": [1e-3]}))
    with pytest.raises(mt.UserInputError, match="executor 'threads': one of ray, inprocess"):
        mt.create_study(spec, storage=tmp_path, executor="threads")  # type: ignore[arg-type]
    assert not (tmp_path / "runs").exists()  # nothing made


def test_bad_input_is_one_line_before_anything_is_made(tiny, tmp_path):
    folder, path = tiny
    with pytest.raises(mt.UserInputError, match="search.num_trials"):
        mt.StudySpec.from_yaml(path).replace({"search.num_trials": 0})
    with pytest.raises(mt.UserInputError, match="file not found"):
        mt.StudySpec.from_yaml(tmp_path / "missing.yaml")
    with pytest.raises(mt.UserInputError, match="not found in"):
        mt.load_study("nothing", storage=tmp_path)
    spec = mt.StudySpec.from_yaml(path).replace({"name": "twice"})
    study = _create(tmp_path, spec)
    with pytest.raises(mt.UserInputError, match="n_trials 0"):
        study.optimize(n_trials=0)
    (tmp_path / "runs" / "twice").mkdir(parents=True)
    with pytest.raises(mt.UserInputError, match="load_if_exists=True"):
        _create(tmp_path, spec)
    with pytest.raises(TypeError, match="create_study"):
        mt.Study(spec, None)  # type: ignore[arg-type]


def test_the_package_exports_the_api_and_imports_it_on_first_use():
    code = "import sys, mutransfer; assert 'mutransfer._api' not in sys.modules; mutransfer.create_study; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
    assert set(mt.__all__) >= {"StudySpec", "create_study", "load_study", "Study", "TransferRecord", "TargetResult"}


#: the snippet of docs/api.md as written (its pruner made concrete), run in a fresh interpreter
SNIPPET = """
import optuna
import mutransfer as mt
spec = mt.StudySpec.from_yaml("studies/quick.yaml")        # or built from typed objects
study = mt.create_study(spec, storage="mutransfer-runs", sampler=optuna.samplers.TPESampler(seed=0),
                        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2))
study.optimize(n_trials=8)           # the proxy search; resumable; callbacks=[...]
study.best_params, study.best_trial, study.trials_dataframe()
record = study.transfer()            # typed TransferRecord (what changed, by which rule)
target = study.train_target()        # typed TargetResult: .model (an nn.Module), .history, .test_error
report = study.report()              # typed Report: .to_json(), .to_text(), .to_html()
study.close()
study = mt.load_study(spec.name, storage="mutransfer-runs")   # spec.name: "quick"
print(study.best_params, target.test_error)
"""


@pytest.mark.slow
def test_the_snippet_runs_as_written_on_ray(tmp_path):
    """The quick study (its epochs cut to 2 so that the test stays short; its executor set to ``ray``, so that the
    snippet's steps run on Ray Tune and a Ray actor, as any study's do by default: the quick study's own executor,
    in process, is run by the notebook test below and the README's commands)."""
    import yaml

    mapping = yaml.safe_load((ROOT / "studies" / "quick.yaml").read_text())
    mapping["budget"].update(epochs=2, grace_period=1)
    mapping["target"]["epochs"] = 2
    mapping["resources"]["executor"] = "ray"
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "quick.yaml").write_text(yaml.safe_dump(mapping))
    env = {"MUTRANSFER_CACHE": str(tmp_path / "cache"), "MLFLOW_DISABLE_TELEMETRY": "true"}
    import os

    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SNIPPET)],
        cwd=tmp_path,
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # the loaded study, never closed, is closed at the interpreter's exit while its modules are alive
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr[-3000:]
    assert "'lr'" in out.stdout
    assert (tmp_path / "mutransfer-runs" / "quick" / "model" / "MLmodel").exists()


@pytest.mark.slow
def test_the_notebook_session_of_docs_api_runs_cell_by_cell(tmp_path, monkeypatch):
    """docs/api.md's notebook cells, in order, in one namespace (the in-process executor, data generated)."""
    import re

    text = (ROOT / "docs" / "api.md").read_text()
    part = text[text.index("## A notebook session") : text.index("## Where a study's trials live")]
    cells = re.findall(r"```python\n(.*?)```", part, re.S)
    assert len(cells) == 4
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    namespace: dict = {}
    for cell in cells:
        exec(compile(cell, "docs/api.md", "exec"), namespace)
    assert tuple(namespace["u1"].shape) == (4, 128, 1)
    assert (tmp_path / "mutransfer-runs" / "nb" / "model" / "MLmodel").exists()


def test_optuna_opens_the_study_with_the_trials_mutransfer_trials_lists(tiny, tmp_path, capsys):
    """The trials in one Optuna storage (the study folder's journal): optuna.load_study returns them with the numbers,
    parameters, states and values `mutransfer trials --json` prints; a folder without a journal (written before it
    existed) gets it back from its trial files when the study is resumed."""
    from mutransfer.cli.main import main
    from tests.journal_helpers import as_legacy

    folder, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "opt", "budget": {"grace_period": 1}})
    with _create(tmp_path, spec) as study:
        study.optimize()
        journal = study.study_dir / "optuna.journal"
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
        loaded = optuna.load_study(study_name="opt", storage=storage)
        assert main(["trials", "opt", "--runs-dir", str(tmp_path / "runs"), "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        states = {"completed": "COMPLETE", "pruned": "PRUNED", "diverged": "FAIL", "failed": "FAIL"}

        def rows(trials):
            return [(t.number, t.params, t.state.name, t.value, t.user_attrs["mutransfer.trial_id"]) for t in trials]

        expected = [
            (
                r["number"] - 1,
                {k: r[k] for k in ("lr", "batch_size")},
                states[r["status"]],
                r["final_error"] if r["status"] in ("completed", "pruned") else None,
                r["trial_id"],
            )
            for r in listed
        ]  # the table counts trials from 1, Optuna (and the API) from 0
        assert rows(loaded.trials) == expected and len(expected) == 4
        assert {"COMPLETE", "PRUNED"} <= {t.state.name for t in loaded.trials}  # ASHA stopped one at least
        assert all(t.intermediate_values for t in loaded.trials)  # each evaluation's validation error
        assert loaded.best_trial.params == study.best_params
        assert rows(study.optuna_study.trials) == expected

        study.train_target()
        study.report()
    trial_files = [p.name for p in (study.study_dir / "trials").glob("*/*.json")]
    assert "config.json" not in trial_files and "outcome.json" not in trial_files  # the journal alone holds them
    as_legacy(study.study_dir / "trials", "opt")  # a folder finished before the journal: brought into one when resumed
    again = mt.load_study("opt", storage=tmp_path / "runs", executor="inprocess")
    assert again.best_params == study.best_params
    assert rows(again.optuna_study.trials) == expected


def test_the_optuna_view_of_a_study_not_yet_searched_is_refused_in_one_line(tiny, tmp_path):
    folder, path = tiny
    with _create(tmp_path, mt.StudySpec.from_yaml(path).replace({"name": "fresh"})) as study:
        with pytest.raises(mt.UserInputError, match="call study.optimize"):
            _ = study.optuna_study


def test_strategy_objects_run_what_their_flags_run(tiny, tmp_path):
    """mt.Verify, mt.DirectBaseline and mt.CoordCheck run the phases of --verify, --baseline direct and
    --coord-check: the report holds their sections, and the flags' own checks refuse what they refuse."""
    _, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "strat", "search.num_trials": 2, "budget.epochs": 2})
    plain = _create(tmp_path, spec.replace({"name": "plain"}))
    alone = plain.report().data
    plain.close()
    assert [alone.get(k) for k in ("verification", "direct_baseline", "coord_check")] == [None] * 3
    strategies = [mt.Verify(points=3, seeds=1), mt.DirectBaseline(), mt.CoordCheck()]
    with _create(tmp_path, spec, strategies=strategies) as study:
        report = study.report().data
    verification = report["verification"]
    assert len(verification["grid"]) == 3 and verification["seeds"] == [0]  # Verify(points=3, seeds=1)
    assert verification["cost"]["trainings"] == 6  # the target's 3 LRs and the proxy's, one seed
    assert report["direct_baseline"]["test_error"] is not None
    assert report["coord_check"]["modes"] == [6, 12, 24] and report["coord_check"]["verdict"]
    again = mt.load_study("strat", storage=tmp_path / "runs", executor="inprocess", strategies=strategies)
    assert again.report().data["verification"] == report["verification"]  # finished: nothing runs again
    finished = mt.load_study("plain", storage=tmp_path / "runs", executor="inprocess", strategies=[mt.Verify()])
    with pytest.raises(mt.UserInputError, match="already complete without it"):
        finished.report()  # a finished study cannot grow a verification


def test_a_study_loaded_without_its_strategies_still_runs_what_it_was_started_for(tiny, tmp_path, capsys):
    """A study made with Verify, closed after its search, then loaded with no strategy (``--resume`` alone on the
    command line): its verification runs, as first asked (points and seeds), and it says so once."""
    _, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "asked", "search.num_trials": 2, "budget.epochs": 2})
    with _create(tmp_path, spec, strategies=[mt.Verify(points=3, seeds=1)]) as study:
        study.optimize()
    state = json.loads((study.study_dir / "state.json").read_text())
    assert state["asked"]["verify"] is True and state["asked"]["verify_points"] == 3
    again = mt.load_study("asked", storage=tmp_path / "runs", executor="inprocess", quiet=False)
    verification = again.report().data.get("verification")
    assert verification is not None and len(verification["grid"]) == 3 and verification["seeds"] == [0]
    err = capsys.readouterr().err
    assert err.count("note: the study was started with --verify (--verify-points 3 --verify-seeds 1)") == 1


def test_a_damaged_record_of_what_a_study_was_asked_is_one_line(tiny, tmp_path):
    _, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace({"name": "damaged", "search.num_trials": 2, "budget.epochs": 1})
    with _create(tmp_path, spec) as study:
        study.optimize()
    state_file = study.study_dir / "state.json"
    state = json.loads(state_file.read_text())
    assert state["asked"] == {
        "coord_check": False, "verify": False, "verify_points": 5, "verify_seeds": 3, "baseline": None
    }  # fmt: skip
    state["asked"]["verify_points"] = 10_000  # a grid no flag could ask for
    state_file.write_text(json.dumps(state))
    with pytest.raises(mt.UserInputError, match=r"state.json: field 'asked' must map .* verify_points to 3..41"):
        mt.load_study("damaged", storage=tmp_path / "runs", executor="inprocess").report()


def test_a_coordinate_check_a_study_could_not_run_is_refused_when_its_record_asks_for_it(tiny, tmp_path):
    """``asked`` is re-checked as the flag is: a study that keeps K (the width scales) cannot run a check across K,
    so an ``asked`` that says coord_check (edited in) is one line before anything trains, not a failure after."""
    _, path = tiny
    spec = mt.StudySpec.from_yaml(path).replace(
        {"name": "samek", "proxy_K": 24, "target_width": 32, "search.num_trials": 2, "budget.epochs": 1}
    )
    with _create(tmp_path, spec) as study:
        study.optimize()
    state_file = study.study_dir / "state.json"
    state = json.loads(state_file.read_text())
    state["asked"]["coord_check"] = True
    state_file.write_text(json.dumps(state))
    with pytest.raises(mt.UserInputError, match="--coord-check measures the update across K; this study keeps K"):
        mt.load_study("samek", storage=tmp_path / "runs", executor="inprocess").report()
    assert json.loads(state_file.read_text())["phase"] == "target"  # nothing ran past the search


def test_the_flags_are_the_strategy_objects_and_a_spec():
    """`mutransfer sweep` turns its flags into the API's strategy objects and a spec carrying the command, and calls
    mt.create_study: the objects are the ones a Python user passes, and they ask the sweep for what the flags say."""
    from mutransfer._api.strategies import with_strategies
    from mutransfer._sweep.context import SweepOptions
    from mutransfer.cli._sweep_cmd import command_spec, command_strategies
    from mutransfer.cli.main import build_parser

    flags = "--verify --verify-points 7 --verify-seeds 2 --baseline direct --warm-start src --warm-start-top 2"
    args = build_parser().parse_args(["sweep", *flags.split(), "--warm-start-any", "--coord-check", "--epochs", "3"])
    objects = [mt.Verify(points=7, seeds=2), mt.DirectBaseline(), mt.WarmStart("src", 2, True), mt.CoordCheck()]
    assert command_strategies(args) == objects
    assert command_strategies(build_parser().parse_args(["sweep", "--verify-points", "7"])) == []  # without --verify
    options = with_strategies(SweepOptions(), objects)
    fields = ("verify", "verify_points", "verify_seeds", "baseline", "warm_start", "warm_start_top", "warm_start_any")
    assert [getattr(options, f) for f in (*fields, "coord_check")] == [True, 7, 2, "direct", "src", 2, True, True]
    spec = command_spec(args)
    assert spec.study.budget.epochs == 3 and spec._command is not None and spec._command.overrides["epochs"] == 3
    assert spec.replace({"name": "x"})._command is None  # a spec changed in Python is a Python spec


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: mt.Verify(points=2), r"Verify\(points=2\): from 3 to 41 .* an optimum needs at least 3"),
        (lambda: mt.Verify(points=5.0), r"Verify\(points=5.0\): an int, 3 to 41"),
        (lambda: mt.Verify(seeds=0), r"Verify\(seeds=0\): from 1 to 100 seeds"),
        (lambda: mt.WarmStart("quick", top=0), r"WarmStart\(top=0\): from 1 to"),
        (lambda: mt.WarmStart("quick", top=True), r"WarmStart\(top=True\): an int"),
        (lambda: mt.WarmStart("quick", any_source="false"), r"WarmStart\(any_source='false'\): True or False"),
        (lambda: mt.WarmStart(""), r"WarmStart\(source=''\)"),
    ],
)
def test_a_bad_strategy_is_one_line_when_it_is_made(make, message):
    with pytest.raises(mt.UserInputError, match=message):
        make()


def test_strategies_that_are_not_strategies_or_twice_are_refused_before_anything_is_made(tiny, tmp_path):
    _, path = tiny
    spec = mt.StudySpec.from_yaml(path)
    with pytest.raises(mt.UserInputError, match=r"strategies\[1\]: one of mt.Verify.*got str"):
        _create(tmp_path, spec, strategies=[mt.Verify(), "baseline"])
    with pytest.raises(mt.UserInputError, match=r"strategies\[1\]: Verify is given twice"):
        _create(tmp_path, spec, strategies=[mt.Verify(), mt.Verify(points=7)])
    with pytest.raises(mt.UserInputError, match="strategies: a list of strategy objects"):
        _create(tmp_path, spec, strategies=mt.Verify())  # type: ignore[arg-type]
    with pytest.raises(mt.UserInputError, match="ray_address '127.0.0.1:6379': the 'inprocess' executor"):
        _create(tmp_path, spec, ray_address="127.0.0.1:6379")
    with pytest.raises(mt.UserInputError, match="ray_address 'nowhere': use auto, or HOST:PORT"):
        mt.create_study(spec, storage=tmp_path / "runs", ray_address="nowhere")
    with pytest.raises(mt.UserInputError, match="register 'a/b' is not a model name"):
        _create(tmp_path, spec, register="a/b")
    assert _create(tmp_path, spec, register=" fno ")._options.register == "fno"  # as --register strips it


def test_a_spec_read_from_a_file_finds_its_data_and_its_model_beside_it_from_another_directory(
    tiny, tmp_path, monkeypatch
):
    """As ``mutransfer sweep --study`` finds them: a relative ``problem.data`` and a factory's module beside the file,
    read and trained from another working directory (a project folder copied with its data and its model)."""
    from tests.sweep.test_user_operator import USER_MODULE

    folder, _ = tiny
    project = tmp_path / "project"
    project.mkdir()
    (project / "tiny.h5").write_bytes((folder / "tiny.h5").read_bytes())
    (project / "beside_api_model.py").write_text(USER_MODULE)
    study = {
        "name": "beside",
        "problem": {"name": "burgers", "data": "tiny.h5", "resolution": 64, "n_train": 32, "n_test": 16},
        "operator": {"type": "beside_api_model:build", "width": 8, "layers": 2},
        "proxy_K": 6,
        "target_K": 12,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-3, "high": 1e-2}},
        "search": {"num_trials": 2, "max_concurrent": 2},
        "budget": {"epochs": 1, "grace_period": 1},
        "target": {"epochs": 1, "num_workers": 1, "cpus_per_worker": 1},
    }
    (project / "s.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    spec = mt.StudySpec.from_yaml(project / "s.yaml")
    assert spec.study.problem.data == str(project / "tiny.h5")
    assert spec.replace({"name": "beside2"}).study.problem.data == str(project / "tiny.h5")  # a copy keeps its file
    with pytest.raises(mt.UserInputError, match="file tiny.h5 not found"):  # the same text from no file
        mt.StudySpec.from_text(spec.text)
    with _create(tmp_path, spec) as made:
        assert made.train_target().model.__class__.__name__ == "UserFNO"
