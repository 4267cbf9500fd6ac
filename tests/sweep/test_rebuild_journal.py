"""A lost journal rebuilt from the trials' MLflow runs (mutransfer._sweep._rebuild_journal), without training: a real
SQLite MLflow store written by the real TrialLogger, a real plan. The end-to-end case (a trained study, deleted and
damaged journals, `sweep --resume --rebuild-state`) is tests/study_folder/test_journal_damage.py."""

from __future__ import annotations

import functools

import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from mutransfer._study import default_study_text, parse_study
from mutransfer._study.models import merge_hyperparameters
from mutransfer._sweep._rebuild_journal import _config, journal_lost, rebuild_journal
from mutransfer._sweep._trial_journal import journal_path
from mutransfer._sweep.plan import SearchPlan
from mutransfer._sweep.trial_logger import TrialLogger
from mutransfer._tracking.runs import KIND_TAG, STUDY_TAG, Tracker, create_run


class _Trial:
    """What TrialLogger reads of a Tune trial."""

    def __init__(self, key: str, config: dict):
        self.trial_id, self.config, self.last_result, self.num_failures, self.path = (
            key,
            {**config, "trial_key": key},
            {},
            0,
            None,
        )

    def get_error(self):
        return None


@pytest.fixture
def logged(tmp_path):
    """A study whose t0000 and t0002 ended and were logged, and whose t0001 was handed out but never started (no run):
    (study, trials folder, tracker, experiment id, parent run id, a function making a new TrialLogger)."""
    m = yaml.safe_load(default_study_text())
    m["search"].update(num_trials=6, max_concurrent=3)
    m["budget"].update(epochs=8, grace_period=2)
    study = parse_study(m, "rb")
    trials, uri = tmp_path / "runs" / "rb" / "trials", f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    experiment = tracker.ensure_experiment("mutransfer")
    parent = create_run(tracker.client, experiment, {KIND_TAG: "study", STUDY_TAG: study.name})

    def logger() -> TrialLogger:
        return TrialLogger(
            uri=uri, experiment_id=experiment, parent_run_id=parent, study_name=study.name, proxy_K=6,
            budget_epochs=8, hyperparameters=functools.partial(merge_hyperparameters, study), total_trials=6,
            device_kind="cpu", devices_per_trial=1, trials_dir=str(trials),
        )  # fmt: skip

    plan, first = SearchPlan(study, trials, 3), logger()
    handed = [plan.next_trial() for _ in range(3)]
    for (key, config), value in zip((handed[0], handed[2]), (0.3, 0.2)):
        trial, result = _Trial(key, config), {"epoch": 8, "val_error": value, "trainer_seconds": 5.0}
        first.on_trial_start(trial)
        first.on_trial_result(trial, result)
        plan.record(key, result, failed=False)
        first.on_trial_complete(trial)
    (trials / "t0002" / "done.json").write_text("{}")  # as its worker left it
    return study, trials, tracker, experiment, parent, logger, plan


def test_trials_after_the_first_key_without_a_run_are_set_aside_not_replayed(logged):
    """Found by review: t0002's run was dropped from the rebuilt journal, but stayed FINISHED, so the new trial handed
    out as t0002 was never logged, and its folder's done.json would replay the old result. Now its run is tagged
    superseded and its folder moved to superseded/."""
    study, trials, tracker, experiment, parent, logger, plan = logged
    journal_path(trials).unlink()
    (trials / "tnotes").mkdir()  # a folder that is no trial's (compared as text with t0001, it was moved)
    assert journal_lost(trials, study.name)
    said = rebuild_journal(tracker, experiment, parent, study, trials)
    assert "1 trial(s) (1 ended)" in said and "from t0001 on the search runs again (1 run(s)" in said
    again = SearchPlan(study, trials, 3)
    assert sorted(again.outcomes) == [0] and again.configs[0] == plan.configs[0]
    assert again.outcomes[0].value == 0.3 and not journal_lost(trials, study.name)
    assert not (trials / "t0002").exists() and (trials.parent / "superseded" / "t0002" / "done.json").exists()
    assert (trials / "tnotes").is_dir()
    assert "t0002" not in logger().logged_trial_ids()
    superseded = [
        r for r in tracker.children(experiment, parent, "proxy_trial") if r.data.tags.get("mutransfer.superseded")
    ]
    assert [r.data.tags["mutransfer.trial_id"] for r in superseded] == ["t0002"]


def test_a_rebuild_stopped_part_way_is_lost_not_migrated_from_nothing(logged, monkeypatch):
    """Found by review: a rebuild stopped before it marked the journal complete left one that the next resume
    "migrated" from trial files the folder does not have: every trial gone. Now it is a lost journal, refused, and
    rebuilt again."""
    from mutransfer._sweep import _rebuild_journal
    from mutransfer.errors import UserInputError

    study, trials, tracker, experiment, parent, _logger, plan = logged
    journal_path(trials).unlink()

    def stopped(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(_rebuild_journal.TrialJournal, "mark_complete", stopped)
    with pytest.raises(KeyboardInterrupt):
        rebuild_journal(tracker, experiment, parent, study, trials)
    monkeypatch.undo()
    assert journal_lost(trials, study.name)
    with pytest.raises(UserInputError, match="does not hold them in full .a migration or rebuild stopped part-way"):
        SearchPlan(study, trials, 3)
    rebuild_journal(tracker, experiment, parent, study, trials)
    assert SearchPlan(study, trials, 3).configs[0] == plan.configs[0]
    assert (journal_path(trials).with_name("optuna.journal.damaged")).exists()  # the part-way one, kept


def test_a_configuration_is_read_back_as_its_distribution_holds_it():
    """Found by review: MLflow keeps str(value), so True, None and the choice "1" came back as 'True', 'None' and 1,
    outside the space. Each is now the choice whose text it is; ranges are numbers."""
    space = {
        "flag": CategoricalDistribution([True, False]),
        "norm": CategoricalDistribution([None, "layer"]),
        "act": CategoricalDistribution(["1", "2"]),
        "batch_size": CategoricalDistribution([10, 20]),
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "layers": IntDistribution(2, 8),
    }
    params = {"hp.flag": "False", "hp.norm": "None", "hp.act": "1", "hp.batch_size": "20", "hp.lr": "0.00123",
              "hp.layers": "4"}  # fmt: skip
    assert _config(params, space) == {"flag": False, "norm": None, "act": "1", "batch_size": 20, "lr": 0.00123,
                                      "layers": 4}  # fmt: skip
    assert _config({k: v for k, v in params.items() if k != "hp.lr"}, space) is None


def test_a_trials_run_is_written_from_how_the_journal_holds_its_end(logged):
    """The other way (issue 35 item 4, "MLflow written from it"): a trial's run ends as the journal holds the trial's
    end, which the plan records before the observers hear of it. Here the journal says t0001 failed, with its error,
    while Tune's last result says it ran its budget: the run is FAILED with the journal's status and error. A logger
    that no journal feeds (its folder's journal moved away) writes Tune's view instead, so the check can fail."""
    study, trials, tracker, experiment, parent, logger, plan = logged
    key, config = "t0001", plan.configs[1]
    last = {"epoch": 8, "val_error": 0.25, "trainer_seconds": 4.0}
    for journal_there in (True, False):
        first = logger()
        if not journal_there:
            journal_path(trials).rename(trials.parent / "elsewhere.journal")
            key, config = "t0003", {"lr": 1e-3, "batch_size": 10}
        trial = _Trial(key, config)
        first.on_trial_start(trial)
        first.on_trial_result(trial, last)
        if journal_there:
            plan.record(key, last, failed=True, error="RuntimeError: from the journal")
        first.on_trial_complete(trial)  # Tune: completed
        run = next(
            r for r in tracker.children(experiment, parent, "proxy_trial") if r.data.tags["mutransfer.trial_id"] == key
        )
        if journal_there:
            assert run.info.status == "FAILED" and run.data.tags["mutransfer.status"] == "failed"
            assert run.data.tags["mutransfer.error"] == "RuntimeError: from the journal"
        else:
            assert run.info.status == "FINISHED" and run.data.tags["mutransfer.status"] == "completed"
