"""`sweep --warm-start`: an earlier study's best trials read back (folder, MLflow), rescaled by μP, refused or
carried into the plan (fast: no Ray; the end-to-end run is in test_warm_start_sweep.py)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import pytest
import yaml

from mutransfer._study.files import parse_study
from mutransfer._sweep.warm_start import load_source, read_folder, read_tracking
from mutransfer.errors import UserInputError
from tests.sweep_helpers import K_ONLY_STUDY, k_only_study_text


def _mapping(**changes) -> dict:
    m = yaml.safe_load(k_only_study_text())
    for key, value in changes.items():
        m[key] = value
    return m


def _study(**changes):
    return parse_study(_mapping(**changes), "test")


#: (key, config, status, test error) of a hand-written source study's trials
TRIALS = [
    ("t0000", {"lr": 0.004, "batch_size": 20}, "completed", 0.10),
    ("t0001", {"lr": 0.02, "batch_size": 10}, "pruned", 0.30),
    ("t0002", {"lr": 0.001, "batch_size": 10}, "completed", 0.05),
    ("t0003", {"lr": 0.05, "batch_size": 20}, "completed", 0.20),  # above this study's lr range (3e-2)
]


def write_source(root: Path, *, study=None, trials=TRIALS, unfinished: bool = True) -> Path:
    """A study folder as a sweep leaves it: study.yaml, state.json, trials/<key>/config.json + outcome.json."""
    study = study if study is not None else _study(name="src", proxy_K=4, target_K=24)
    root.mkdir(parents=True)
    (root / "study.yaml").write_text(study.to_yaml())
    (root / "state.json").write_text(json.dumps({"study": study.name, "phase": "done", "search_window": 2}))
    for key, config, status, error in trials:
        d = root / "trials" / key
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(config))
        epoch = 20 if status == "completed" else 4
        (d / "outcome.json").write_text(
            json.dumps({"status": status, "metrics": {"epoch": epoch, "val_error": error}, "error": None, "rungs": {}})
        )
    if unfinished:  # handed out, never finished: not a result
        d = root / "trials" / f"t{len(trials):04d}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"lr": 0.003, "batch_size": 20}))
    return root


# --------------------------------------------------------------------------- reading


def test_a_study_folder_reads_back_as_typed_records(tmp_path):
    source = read_folder(write_source(tmp_path / "src"))
    assert (source.name, source.problem, source.operator, source.parametrization) == ("src", "burgers", "fno", "mup")
    assert (source.proxy_K, source.proxy_width, source.kind) == (4, 32, "folder")
    assert [t.key for t in source.trials] == ["t0000", "t0001", "t0002", "t0003"]  # t0004 has no outcome
    assert source.trials[2].config == {"lr": 0.001, "batch_size": 10} and source.trials[1].status == "pruned"
    assert [t.key for t in source.best(2)] == ["t0002", "t0000"]  # completed only, by error
    assert [t.key for t in source.best(10)] == ["t0002", "t0000", "t0003"]


def _store_with_study(tmp_path: Path, study, outcomes, *, warm_from=None) -> str:
    """A real sqlite MLflow store holding ``study``'s parent run and proxy_trial child runs, written by the sweep's own
    Tracker and TrialLogger (the path a driver takes for a trial that finished while it was down)."""
    from mutransfer._study.models import merge_hyperparameters
    from mutransfer._sweep.plan import Outcome
    from mutransfer._sweep.trial_logger import TrialLogger
    from mutransfer._tracking.runs import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    experiment = tracker.ensure_experiment("mutransfer")
    params = {
        "study": study.name,
        "problem": study.problem.name,
        **study.scaling(),
        "search.space": {k: v.to_dict() for k, v in study.search_space.items()},
    }
    parent = tracker.create_parent(experiment, study, params=params, tags={}, files={})
    logger = TrialLogger(
        uri=uri,
        experiment_id=experiment,
        parent_run_id=parent,
        study_name=study.name,
        proxy_K=study.proxy_K,
        proxy_width=study.operator.width,
        budget_epochs=study.budget.epochs,
        hyperparameters=functools.partial(merge_hyperparameters, study),
        total_trials=len(outcomes),
        device_kind="cpu",
        devices_per_trial=1,
        key_tags={key: {"mutransfer.warm_start_from": source} for key, source in (warm_from or {}).items()},
    )
    for key, config, status, error in outcomes:
        epoch = study.budget.epochs if status == "completed" else 2
        logger.log_from_journal(key, config, Outcome(status, {"epoch": epoch, "val_error": error}))
    return uri


def test_a_source_folder_reads_back_from_its_journal_alone(tmp_path):
    """A source whose Optuna journal holds its trials in full reads back from it, equal to its trial files, and still
    does once those files are gone; a journal written before it held them is passed over for the files."""
    from mutransfer._sweep._trial_journal import FORMAT
    from mutransfer._sweep.plan import write_journal

    root = write_source(tmp_path / "src", trials=TRIALS[:3])
    from_files = read_folder(root)
    write_journal(_study(name="src", proxy_K=4, target_K=24), root / "trials")
    for key, *_ in TRIALS[:3]:
        (root / "trials" / key / "config.json").unlink()
        (root / "trials" / key / "outcome.json").unlink()
    assert read_folder(root).trials == from_files.trials and len(from_files.trials) == 3
    journal = root / "optuna.journal"
    held = f'"mutransfer.journal_format":{FORMAT}'
    assert held in journal.read_text()
    journal.write_text(journal.read_text().replace(held, '"mutransfer.journal_format":1'))
    assert read_folder(root).trials == ()  # an older journal: the files are read, and there are none left


def test_a_study_reads_back_from_a_real_mlflow_store(tmp_path):
    study = _study(name="src", proxy_K=4, target_K=24)
    uri = _store_with_study(tmp_path, study, TRIALS, warm_from={"t0000": "t0042"})
    source = read_tracking("src", uri)
    assert (source.name, source.problem, source.operator, source.parametrization) == ("src", "burgers", "fno", "mup")
    assert (source.proxy_K, source.proxy_width, source.kind, source.location) == (4, 32, "tracking", uri)
    assert [(t.key, t.config, t.status, t.val_error) for t in source.trials] == TRIALS
    assert read_tracking("other", uri) is None
    # the same record by name, when no folder of that name exists
    assert load_source("src", runs_dir=str(tmp_path / "runs"), tracking_uri=uri).trials == source.trials
    # the child runs of warm trials carry their source trial (TrialLogger's tag)
    from tests.sweep_helpers import mlflow_runs

    tags = {
        r.data.tags.get("mutransfer.trial_id"): r.data.tags.get("mutransfer.warm_start_from") for r in mlflow_runs(uri)
    }
    assert tags["t0000"] == "t0042" and tags["t0001"] is None


def test_a_missing_source_says_where_it_looked_and_creates_no_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(UserInputError) as err:
        load_source("nothing", runs_dir=str(tmp_path / "runs"), tracking_uri=uri)
    text = str(err.value)
    assert "--warm-start nothing: no such study" in text and str(tmp_path / "runs" / "nothing") in text and uri in text
    assert "\n" not in text and not (tmp_path / "none.db").exists()
    with pytest.raises(UserInputError, match="--warm-start: empty"):
        load_source(" ", runs_dir=None, tracking_uri=uri)


# --------------------------------------------------------------------------- rescaling and fitting


def test_the_rescale_is_the_transfer_function_and_the_effective_spectral_lr_moves_by_its_factor(tmp_path):
    from mutransfer._study.models import build_model, effective_spectral_lr
    from mutransfer._sweep.warm_plan import build_warm_start
    from operators.transfer import Scaling, transfer

    src_study = _study(name="src", proxy_K=4, target_K=24)
    source = read_folder(write_source(tmp_path / "src", study=src_study))
    here = _study(name="here", proxy_K=8, target_K=24)
    warm = build_warm_start("src", here, source, 3, [])
    assert [(t.key, t.source_trial) for t in warm.trials] == [
        ("t0000", "t0002"),
        ("t0001", "t0000"),
        ("t0002", "t0003"),
    ]
    expected = transfer(Scaling(dim=1, proxy_modes=4, target_modes=8), 0.001, init_scale=1.0)
    assert math.isclose(expected.lr_factor, math.sqrt(math.log(4) / math.log(8)), rel_tol=1e-12)
    src_model, here_model = build_model(src_study), build_model(here)
    for t in warm.trials:
        assert math.isclose(t.rescale["lr_factor"], expected.lr_factor, rel_tol=1e-12)
        assert math.isclose(t.rescale["init_variance_factor"], expected.init_variance_factor, rel_tol=1e-12)
        source_lr = next(s for s in source.trials if s.key == t.source_trial).config["lr"]
        # μP: the master LR carries over (within range), the model's c(K) moves the effective spectral LR by the factor
        assert t.config["lr"] == min(source_lr, 3e-2)
        ratio = effective_spectral_lr(here_model, t.config["lr"]) / effective_spectral_lr(src_model, t.config["lr"])
        assert math.isclose(ratio, t.rescale["lr_factor"], rel_tol=1e-9)
    assert warm.source_size == {"K": 4, "width": 32} and warm.size == {"K": 8, "width": 32}
    assert any("master hyperparameters carry over" in n for n in warm.notes)


def test_out_of_range_values_are_clipped_and_foreign_choices_or_missing_names_left_out(tmp_path):
    from mutransfer._sweep.warm_plan import build_warm_start

    trials = [
        ("t0000", {"lr": 0.05, "batch_size": 20}, "completed", 0.1),  # clipped
        ("t0001", {"lr": 0.001, "batch_size": 30}, "completed", 0.2),  # 30 is not a choice here
        ("t0002", {"lr": 0.002}, "completed", 0.3),  # batch_size not searched there
        ("t0003", {"lr": 0.003, "batch_size": 10}, "completed", 0.4),
    ]  # fits
    source = read_folder(write_source(tmp_path / "src", trials=trials, unfinished=False))
    warm = build_warm_start("src", _study(name="here"), source, 4, [])
    assert [(t.key, t.source_trial, t.config) for t in warm.trials] == [
        ("t0000", "t0000", {"lr": 0.03, "batch_size": 20}),
        ("t0001", "t0003", {"lr": 0.003, "batch_size": 10}),
    ]
    notes = "\n".join(warm.notes)
    assert "clipped into this study's search space: t0000 lr 0.05 -> 0.03" in notes
    assert "left out (a value not among this study's choices): t0001 batch_size=30" in notes
    assert "left out (the source did not search it): t0002 (batch_size)" in notes
    unusable = dataclasses.replace(source, trials=source.trials[1:3])
    with pytest.raises(UserInputError, match="none of the 2 best trials of 'src' fits"):
        build_warm_start("src", _study(name="here"), unusable, 2, [])


# --------------------------------------------------------------------------- refusals (prepare)


def _options(tmp_path, warm=None, **kw):
    from mutransfer._sweep.context import SweepOptions

    overrides = {"name": kw.pop("name", "here"), "proxy_K": 8, "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return SweepOptions(overrides=overrides, runs_dir=str(tmp_path / "runs"), quiet=True, warm_start=warm, **kw)


def _nothing_created(tmp_path) -> bool:
    return not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs" / "here").exists()


def test_a_matching_source_passes_prepare_and_each_refusal_fires(tmp_path, monkeypatch):
    from mutransfer._sweep.prepare import prepare

    monkeypatch.chdir(tmp_path)
    write_source(tmp_path / "runs" / "src")  # by name under --runs-dir
    darcy = _study(
        name="darcy-src", problem={"name": "darcy", "resolution": 31, "n_train": 10, "n_test": 5}, target_K=12
    )
    write_source(tmp_path / "darcy-src", study=darcy)

    ctx = prepare(_options(tmp_path, "src", warm_start_top=2))
    warm = ctx.records["warm_start"]
    assert [t.source_trial for t in warm.trials] == ["t0002", "t0000"] and warm.location.endswith("src")
    assert _nothing_created(tmp_path)
    assert "warm_start" not in prepare(_options(tmp_path)).records  # cold

    cases = [
        (_options(tmp_path, "nowhere"), "--warm-start nowhere: no such study"),
        (_options(tmp_path, str(tmp_path / "darcy-src")), "solved problem darcy, this study problem burgers"),
        (_options(tmp_path, warm_start_top=3), "--warm-start-top needs --warm-start STUDY"),
        (_options(tmp_path, warm_start_any=True), "--warm-start-any needs --warm-start STUDY"),
    ]
    for options, fragment in cases:
        with pytest.raises(UserInputError, match=fragment.replace("(", r"\(")):
            prepare(options)
        assert _nothing_created(tmp_path)
    # --warm-start-any: the same source passes, with a note
    ctx = prepare(_options(tmp_path, str(tmp_path / "darcy-src"), warm_start_any=True))
    assert "--warm-start-any: the source's problem is darcy, this study's burgers" in ctx.records["warm_start"].notes


def test_another_operator_is_refused_unless_any(tmp_path):
    from mutransfer._sweep.warm_plan import _check_kind

    source = dataclasses.replace(read_folder(write_source(tmp_path / "src")), operator="galerkin")
    with pytest.raises(UserInputError, match="used operator galerkin, this study operator fno; .* --warm-start-any"):
        _check_kind("src", _study(name="here"), source, False)
    assert _check_kind("src", _study(name="here"), source, True) == [
        "--warm-start-any: the source's operator is galerkin, this study's fno"
    ]
    assert _check_kind("src", _study(name="here"), dataclasses.replace(source, operator="fno"), False) == []


def test_the_cli_refuses_an_unknown_source_in_one_line_before_any_compute(tmp_path):
    from tests.cli.test_sweep_cli import assert_no_compute, run_probe

    proc = run_probe(tmp_path, "sweep", "--warm-start", "nowhere")
    assert_no_compute(proc, tmp_path, "--warm-start nowhere: no such study", "mutransfer-runs/nowhere")


def test_grid_search_is_refused_and_tpe_random_pass(tmp_path, monkeypatch):
    from mutransfer._sweep.prepare import prepare

    monkeypatch.chdir(tmp_path)
    write_source(tmp_path / "runs" / "src")
    for algorithm, refused in (("grid", True), ("random", False), ("tpe", False)):
        m = _mapping(search=dict(_mapping()["search"], algorithm=algorithm))
        if algorithm == "grid":
            m["search_space"]["lr"] = {"type": "choice", "values": [1e-3, 1e-2]}
        path = tmp_path / f"{algorithm}.yaml"
        path.write_text(yaml.safe_dump(m))
        options = _options(tmp_path, "src", study_path=str(path))
        if refused:
            with pytest.raises(UserInputError, match="search.algorithm grid .* use search.algorithm tpe or random"):
                prepare(options)
        else:
            assert prepare(options).records["warm_start"].trials


def _resumable(tmp_path, state: dict) -> None:
    """A study folder 'here' as a first session leaves it (study.yaml + state.json)."""
    from mutransfer._study import load_study

    study, _ = load_study(
        K_ONLY_STUDY, {"name": "here", "proxy_K": 8, "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    )
    root = tmp_path / "runs" / "here"
    root.mkdir(parents=True)
    (root / "study.yaml").write_text(study.to_yaml())
    (root / "state.json").write_text(json.dumps(dict({"study": "here", "phase": "proxies"}, **state)))


def test_resume_keeps_the_stored_warm_start_and_refuses_a_new_or_different_one(tmp_path, monkeypatch):
    import shutil

    from mutransfer._sweep.prepare import prepare

    monkeypatch.chdir(tmp_path)
    write_source(tmp_path / "runs" / "src")
    write_source(tmp_path / "runs" / "other")
    stored = prepare(_options(tmp_path, "src")).records["warm_start"]

    _resumable(tmp_path, {"search_window": 2})  # started cold, its search has begun
    with pytest.raises(UserInputError, match="started without a warm start"):
        prepare(_options(tmp_path, "src", resume=True))
    assert "warm_start" not in prepare(_options(tmp_path, resume=True)).records
    shutil.rmtree(tmp_path / "runs" / "here")

    _resumable(tmp_path, {"search_window": 2, "warm_start": stored.as_dict()})
    with pytest.raises(UserInputError, match="started warm from 'src'"):
        prepare(_options(tmp_path, "other", resume=True))
    with pytest.raises(UserInputError, match="--warm-start-top 5: this study started with --warm-start-top 2"):
        prepare(_options(tmp_path, "src", resume=True, warm_start_top=5))
    shutil.rmtree(tmp_path / "runs" / "src")  # the resume never reads the source again
    for options in (_options(tmp_path, "src", resume=True), _options(tmp_path, resume=True)):
        assert prepare(options).records["warm_start"] == stored


# --------------------------------------------------------------------------- the plan


def test_the_plan_hands_out_the_warm_configs_first_and_a_resumed_plan_the_same(tmp_path):
    from mutransfer._sweep.plan import SearchPlan
    from mutransfer._sweep.sampling import sample_config
    from mutransfer._sweep.warm_plan import build_warm_start

    here = _study(name="here", proxy_K=8, search=dict(_mapping()["search"], num_trials=6))
    warm = build_warm_start("src", here, read_folder(write_source(tmp_path / "src")), 3, [])
    entries = warm.plan_entries()
    trials = tmp_path / "trials"
    plan = SearchPlan(here, trials, 1, seeds=entries)
    handed = []
    for i in range(2):
        key, config = plan.next_trial()
        handed.append((key, config))
        plan.record(key, {"epoch": here.budget.epochs, "val_error": 0.1 * (i + 1)}, failed=False)
    key, config = plan.next_trial()  # the third warm trial, left running
    handed.append((key, config))
    assert handed == [(t.key, t.config) for t in warm.trials]
    provenance = plan.journal.held(0).seed  # in the study's journal
    assert provenance["source_trial"] == "t0002" and provenance["source_study"] == "src"
    assert provenance["source_size"] == {"K": 4, "width": 32} and "lr_factor" in provenance["rescale"]

    resumed = SearchPlan(here, trials, 1, seeds=entries)  # a new session over the same folder
    assert resumed.next_trial() == handed[2]  # the unfinished warm trial continues under its key
    resumed.record("t0002", {"epoch": here.budget.epochs, "val_error": 0.05}, failed=False)
    key, config = resumed.next_trial()  # the first sampled trial: TPE told the warm trials' results
    told = [(t.config, v) for t, v in zip(warm.trials, (0.1, 0.2, 0.05))]
    assert key == "t0003" and config == sample_config(here, 3, told)
    assert resumed.journal.held(3).seed is None  # a sampled trial has no provenance


def test_the_report_section_and_text_name_each_warm_trial_and_its_source(tmp_path):
    from mutransfer._study_folder.records import TrialRecord
    from mutransfer._sweep.strategies.warm_start import warm_start_lines as _warm_start_lines
    from mutransfer._sweep.warm_plan import build_warm_start, warm_start_section

    here = _study(name="here", proxy_K=8)
    warm = build_warm_start("src", here, read_folder(write_source(tmp_path / "src")), 2, [])
    records = [
        TrialRecord("t0000", 1, "completed", warm.trials[0].config, {}, 0.07, 20),
        TrialRecord("t0001", 2, "pruned", warm.trials[1].config, {}, 0.4, 4),
    ]
    section = warm_start_section(warm, records)
    assert section["source"] == "src" and section["trials"] == 2 and section["requested"] == 2
    assert [(r["trial_id"], r["source_trial"], r["source_error"], r["val_error"]) for r in section["from_source"]] == [
        ("t0000", "t0002", 0.05, 0.07),
        ("t0001", "t0000", 0.10, 0.4),
    ]
    text = "\n".join(_warm_start_lines(section))
    assert (
        "warm start from study src" in text and "t0000 <- t0002: val rel. L2 0.07 here (completed), 0.05 there" in text
    )
    assert warm_start_section(None, records) is None and _warm_start_lines(None) == []


def test_a_source_value_that_is_not_a_number_is_left_out_with_a_note():
    """A hand-made folder or a stray MLflow param ("abc", a list, inf) leaves that trial out, without a traceback."""
    from mutransfer._study import load_study
    from mutransfer._sweep.warm_plan import _fit
    from mutransfer._sweep.warm_start import SourceTrial

    study = load_study(K_ONLY_STUDY)[0]
    for bad in ("abc", [1e-3], float("inf")):
        missing: list = []
        assert (
            _fit(study, SourceTrial("t0001", {"lr": bad, "batch_size": 10}, 0.1, "completed"), [], [], missing) is None
        )
        assert missing and "t0001 (lr=" in missing[0] and "is not a finite number" in missing[0]
    good = _fit(study, SourceTrial("t0002", {"lr": "1e-3", "batch_size": 10}, 0.1, "completed"), [], [], [])
    assert good == {"lr": 1e-3, "batch_size": 10}
