"""The proxy search's plan (mutransfer._sweep.plan) without Ray: keys, order independence, resume from JSON, ASHA."""

from __future__ import annotations

import json
import math
import random

import optuna
import pytest
import yaml

from mutransfer._study import default_study_text, parse_study
from mutransfer._sweep._asha import rung_milestones
from mutransfer._sweep.plan import DONE, SearchPlan, trial_key


def _study(algorithm="tpe", trials=8, epochs=8, grace=2, rf=2, seed=0):
    m = yaml.safe_load(default_study_text())
    m["search"].update(algorithm=algorithm, num_trials=trials, seed=seed, max_concurrent=2)
    m["budget"].update(epochs=epochs, grace_period=grace, reduction_factor=rf)
    return parse_study(m, "test")


def _curve(config: dict, epoch: int) -> float:
    """A made-up learning curve: best near lr = 3e-3, decreasing with the epoch."""
    return abs(math.log10(config["lr"] / 3e-3)) + 1.0 / epoch + (0.01 if config["batch_size"] == 20 else 0.0)


def _run(study, trials_dir, window, *, order, stop_after=None, rng=None):
    """Drive a plan like Tune would, ``window`` trials at a time, finishing running trials in the given order.

    order: "fifo" (oldest first), "lifo" (newest first) or "random" (``rng``). Each trial reports
    every epoch (ASHA may stop it) then ends. Stops after ``stop_after`` outcomes (a kill).
    """
    plan = SearchPlan(study, trials_dir, window)
    running: list[tuple[str, dict]] = []
    finished = 0
    while True:
        while len(running) < window:
            nxt = plan.next_trial()
            if nxt is None or nxt == DONE:
                break
            running.append(nxt)
        if stop_after is not None and finished >= stop_after:
            return plan
        if not running:
            assert plan.next_trial() == DONE
            return plan
        pick = {"fifo": 0, "lifo": len(running) - 1}.get(order)
        if pick is None:
            pick = rng.randrange(len(running))
        key, config = running.pop(pick)
        epoch = 0
        for epoch in range(1, study.budget.epochs + 1):
            if plan.should_stop(key, epoch, _curve(config, epoch)):
                break
        plan.record(key, {"epoch": epoch, "val_error": _curve(config, epoch), "diverged": 0}, failed=False)
        finished += 1


def _table(plan):
    return [(trial_key(i), plan.configs[i], plan.outcomes[i].status, plan.outcomes[i].value) for i in range(plan.total)]


@pytest.mark.parametrize("algorithm", ["tpe", "random"])
def test_results_arriving_in_any_order_give_the_same_trials(tmp_path, algorithm):
    study = _study(algorithm, trials=10)
    runs = [
        _run(study, tmp_path / "fifo" / "trials", 3, order="fifo"),
        _run(study, tmp_path / "lifo" / "trials", 3, order="lifo"),
        _run(study, tmp_path / "random" / "trials", 3, order="random", rng=random.Random(7)),
    ]
    tables = [_table(p) for p in runs]
    assert tables[0] == tables[1] == tables[2]
    assert len({json.dumps(c, sort_keys=True) for _k, c, _s, _v in tables[0]}) == 10  # ten different configurations
    assert {s for _k, _c, s, _v in tables[0]} >= {"completed", "pruned"}  # ASHA stopped some, not all


def test_a_different_seed_gives_different_configurations(tmp_path):
    a = _run(_study(seed=0), tmp_path / "a" / "trials", 2, order="fifo")
    b = _run(_study(seed=1), tmp_path / "b" / "trials", 2, order="fifo")
    assert [a.configs[i] for i in range(8)] != [b.configs[i] for i in range(8)]


def test_a_plan_rebuilt_from_its_files_continues_as_if_never_interrupted(tmp_path):
    study = _study(trials=10)
    whole = _run(study, tmp_path / "whole" / "trials", 2, order="fifo")
    part = _run(study, tmp_path / "part" / "trials", 2, order="lifo", stop_after=4)
    handed_out = set(part.configs)
    assert len(handed_out) > len(part.outcomes) == 4  # some trials were running when it stopped
    resumed = SearchPlan(study, tmp_path / "part" / "trials", 2)
    assert resumed.outcomes.keys() == part.outcomes.keys()
    unfinished = [i for i in sorted(handed_out) if i not in part.outcomes]
    firsts = [resumed.next_trial() for _ in unfinished]  # the unfinished ones come first, under their old keys
    assert [k for k, _c in firsts] == [trial_key(i) for i in unfinished]
    resumed = _run(study, tmp_path / "part" / "trials", 2, order="random", rng=random.Random(3))
    assert _table(resumed) == _table(whole)


def test_the_next_trial_waits_for_the_results_the_window_needs(tmp_path):
    plan = SearchPlan(_study(), tmp_path / "trials", 2)
    k0, c0 = plan.next_trial()
    k1, _c1 = plan.next_trial()
    assert (k0, k1) == ("t0000", "t0001")
    assert plan.next_trial() is None  # t0002 needs t0000's result
    plan.record("t0001", {"epoch": 8, "val_error": 0.5}, failed=False)
    assert plan.next_trial() is None  # t0001's is not the one it needs
    plan.record(k0, {"epoch": 8, "val_error": 0.4}, failed=False)
    assert plan.next_trial()[0] == "t0002"
    again = SearchPlan(_study(), tmp_path / "trials", 2)  # a new driver reads them from the journal alone
    assert again.configs[0] == c0 and again.outcomes[0].status == "completed" and again.outcomes[0].value == 0.4
    assert not (tmp_path / "trials" / "t0000" / "config.json").exists()  # trial folders keep checkpoints only


def test_asha_stops_a_trial_worse_than_the_finished_ones_at_a_rung(tmp_path):
    study = _study(epochs=8, grace=2, rf=2)
    assert rung_milestones(study) == [2, 4]
    plan = SearchPlan(study, tmp_path / "trials", 1)
    for value in (0.3, 0.2):  # the second is better: not stopped
        key, _ = plan.next_trial()
        assert not plan.should_stop(key, 2, value) and not plan.should_stop(key, 4, value)
        plan.record(key, {"epoch": 8, "val_error": value}, failed=False)
    key, _ = plan.next_trial()
    assert not plan.should_stop(key, 2, 0.25)  # at the median of 0.2 and 0.3: continues
    assert plan.should_stop(key, 4, 0.26)  # above it: stopped
    plan.record(key, {"epoch": 4, "val_error": 0.26}, failed=False)
    assert plan.outcomes[2].status == "pruned" and plan.journal.values(2) == {2: 0.25, 4: 0.26}


def test_a_trial_resumed_past_a_rung_is_judged_there_from_its_history(tmp_path):
    """A study written before the journal held the evaluations: a trial resumed at epoch 5 is judged at rungs 2 and 4
    with the values its history.json holds (0.9 at rung 2: above the pool's, stopped), which go to the journal."""
    from mutransfer._sweep.trial import write_trial_history
    from mutransfer._training import EpochRecord

    study, trials = _study(epochs=8, grace=2, rf=2), tmp_path / "trials"
    plan = SearchPlan(study, trials, 1)
    for value in (0.3, 0.2):
        key, _ = plan.next_trial()
        assert not plan.should_stop(key, 2, value)
        plan.record(key, {"epoch": 8, "val_error": value}, failed=False)
    key, _ = plan.next_trial()
    records = [EpochRecord(epoch=e, iteration=e, train_loss=1.0, test_error=0.9, lr=1e-3, seconds=e) for e in (2, 4)]
    write_trial_history(trials / key, records)
    resumed = SearchPlan(study, trials, 1)  # a new driver: the journal holds no value of t0002 yet
    assert resumed.journal.values(2) == {}
    assert resumed.next_trial()[0] == key and resumed.should_stop(key, 5, 0.1)  # 0.1 now, but 0.9 at rung 2
    assert resumed.journal.values(2) == {2: 0.9, 4: 0.9, 5: 0.1}
    fresh = SearchPlan(study, tmp_path / "fresh" / "trials", 1)
    for value in (0.3, 0.2, 0.1):  # the same trial, never interrupted, better at rung 2: not stopped
        key, _ = fresh.next_trial()
        assert not fresh.should_stop(key, 2, value)
        fresh.record(key, {"epoch": 8, "val_error": value}, failed=False)


def test_a_trial_that_fails_after_a_restart_keeps_its_rung_values_for_asha(tmp_path):
    """t0000 reported 0.1 at rung 2, then its driver was stopped; resumed, it fails before it reports again. Its value
    at rung 2 stays in the journal, so t0001 (0.5 there) is judged against it, as in an uninterrupted search (before
    the journal held the values, the plan kept them in memory until the outcome, and lost them with the driver)."""
    study, trials = _study(trials=2, epochs=8, grace=2, rf=2), tmp_path / "trials"
    plan = SearchPlan(study, trials, 1)
    key, _ = plan.next_trial()
    assert not plan.should_stop(key, 2, 0.1)
    resumed = SearchPlan(study, trials, 1)  # a new driver
    assert resumed.next_trial()[0] == key
    resumed.record(key, {}, failed=True, error="RuntimeError: lost worker")
    key, _ = resumed.next_trial()
    assert resumed.should_stop(key, 2, 0.5)


def test_trials_enqueued_in_the_journal_are_handed_out_before_sampling(tmp_path):
    """Optuna's enqueue_trial on the journal, from any process: the next trials are those, in order (a missing value
    sampled); one the search space does not hold is marked FAIL with why, and skipped. A driver stopped after it
    handed one out hands the same trial out again, once; one stopped part-way through claiming one (its parameters
    written, not its key) hands it out with the parameters written."""
    import optuna

    from mutransfer._sweep._journal_file import journal_storage
    from mutransfer._sweep._trial_journal import journal_path

    study, trials = _study(trials=4), tmp_path / "trials"
    plan = SearchPlan(study, trials, 1)
    ostudy = optuna.load_study(study_name=study.name, storage=journal_storage(journal_path(trials)))
    ostudy.enqueue_trial({"lr": 50.0})
    ostudy.enqueue_trial({"lr": 5e-3, "batch_size": 20})
    ostudy.enqueue_trial({"lr": 2e-3})
    key, config = plan.next_trial()
    assert (key, config) == ("t0000", {"lr": 5e-3, "batch_size": 20})
    refused = [t for t in ostudy.get_trials() if t.state == optuna.trial.TrialState.FAIL]
    assert len(refused) == 1 and "lr '50.0' is not a value of the search space (0.0003..0.03 log)" in str(
        refused[0].user_attrs["mutransfer.refused"]
    )
    plan.record(key, {"epoch": 8, "val_error": 0.3}, failed=False)
    key, config = plan.next_trial()
    assert key == "t0001" and config["lr"] == 2e-3 and config["batch_size"] in (10, 20)
    again = SearchPlan(study, trials, 1)  # the driver stopped with t0001 running
    assert again.next_trial() == (key, config)
    by_key = [t.user_attrs.get("mutransfer.trial_id") for t in ostudy.get_trials()]
    assert by_key.count("t0001") == 1 and ostudy.get_trials()[2].user_attrs["mutransfer.enqueued"] is True
    again.record(key, {"epoch": 8, "val_error": 0.2}, failed=False)
    ostudy.enqueue_trial({"lr": 4e-3})
    part = ostudy.get_trials()[-1]  # a claim stopped after its parameters, before its key
    batch = optuna.distributions.CategoricalDistribution([10, 20])
    ostudy._storage.set_trial_param(part._trial_id, "batch_size", batch.to_internal_repr(20), batch)
    assert SearchPlan(study, trials, 1).next_trial() == ("t0002", {"lr": 4e-3, "batch_size": 20})
    key, config = SearchPlan(study, trials, 1).next_trial()  # the same, once
    assert key == "t0002" and [t.user_attrs.get("mutransfer.trial_id") for t in ostudy.get_trials()].count(key) == 1


def test_the_journal_holds_every_trial_in_full(tmp_path):
    """Every trial's configuration, seed provenance, retried failure and outcome (status, last metrics, error) is in
    the journal, read back by a new driver from it alone: the trial folders hold no file of the driver's."""
    from mutransfer._sweep._trial_journal import read_journal
    from mutransfer._sweep.plan import held_trials
    from mutransfer._sweep.sampling import search_distributions

    study, trials = _study(trials=6, epochs=8, grace=2, rf=2), tmp_path / "trials"
    seeds = [({"lr": 1e-2, "batch_size": 10}, {"source": "earlier", "trial_id": "t0003"})]
    plan = _four_trials(study, trials, seeds)
    assert plan.journal.complete and not any(p.is_file() for p in trials.rglob("*"))
    resumed = SearchPlan(study, trials, 1, seeds=seeds)
    assert resumed.configs == plan.configs and resumed.outcomes == plan.outcomes
    assert [o.status for o in resumed.outcomes.values()] == ["completed", "failed", "pruned"]
    held = read_journal(tmp_path / "optuna.journal", study.name)
    space = search_distributions(study)
    assert [i for i, _c, _o in held_trials(tmp_path / "optuna.journal", held, 6, space, lambda i: i < 1)] == [
        0,
        1,
        2,
        3,
    ]
    for journal in (plan.journal, resumed.journal):
        assert journal.held(0).seed == seeds[0][1] and journal.held(0).metrics["train_loss"] == 0.1
        assert journal.held(1).retrying == {"failures": 1, "error": "RuntimeError: once"}
        assert journal.held(1).error == "RuntimeError: twice"
        assert journal.values(2) == {2: 0.28, 4: 0.6}


def _four_trials(study, trials, seeds):
    """t0000 completed (a seed), t0001 retried then failed, t0002 pruned at rung 4, t0003 running."""
    plan = SearchPlan(study, trials, 1, seeds=seeds)
    key, _ = plan.next_trial()
    assert not plan.should_stop(key, 2, 0.3) and not plan.should_stop(key, 4, 0.25)
    plan.record(key, {"epoch": 8, "val_error": 0.2, "train_loss": 0.1, "diverged": 0}, failed=False)
    key, _ = plan.next_trial()
    plan.retrying(key, 1, "RuntimeError: once")
    plan.record(key, {"epoch": 1, "val_error": 0.9}, failed=True, error="RuntimeError: twice")
    key, _ = plan.next_trial()
    assert not plan.should_stop(key, 2, 0.28) and plan.should_stop(key, 4, 0.6)  # at rung 4 above t0000's 0.25
    plan.record(key, {"epoch": 4, "val_error": 0.6}, failed=False)
    plan.next_trial()  # t0003: still running
    return plan


@pytest.mark.parametrize("former", ["none", "v1"])
def test_a_folder_from_before_the_journal_held_its_trials_is_migrated_once(tmp_path, former):
    """A folder whose trials are in config.json / outcome.json / warm_start.json files (and a journal from before, or
    none) loads into a new journal holding the same trials, which then continue; the former journal is kept as
    optuna.journal.v1, and a migration stopped part-way is done again from the files."""
    from mutransfer._sweep._trial_journal import TrialJournal, read_journal
    from mutransfer._sweep.sampling import search_distributions
    from tests.journal_helpers import as_legacy

    study, trials = _study(trials=6, epochs=8, grace=2, rf=2), tmp_path / "trials"
    seeds = [({"lr": 1e-2, "batch_size": 10}, {"source": "earlier", "trial_id": "t0003"})]
    plan = _four_trials(study, trials, seeds)
    before = read_journal(tmp_path / "optuna.journal", study.name)
    as_legacy(trials, study.name, journal=former)
    assert read_journal(tmp_path / "optuna.journal", study.name) is None
    if former == "none":  # a driver stopped part-way through a migration
        TrialJournal(tmp_path / "optuna.journal", study.name, search_distributions(study), migrating=True)
    migrated = SearchPlan(study, trials, 1, seeds=seeds)
    assert migrated.configs == plan.configs and migrated.outcomes == plan.outcomes
    after = read_journal(tmp_path / "optuna.journal", study.name)
    assert after is not None and after.keys() == before.keys()
    for i in before:  # a retried trial's last failure was never in the files
        assert after[i].config == before[i].config and after[i].seed == before[i].seed
        assert (after[i].status, after[i].metrics, after[i].error) == (
            before[i].status,
            before[i].metrics,
            before[i].error,
        )
    assert (tmp_path / "optuna.journal.v1").exists() == (former == "v1")
    assert migrated.next_trial()[0] == "t0003"  # the running one first, then on
    assert SearchPlan(study, trials, 1, seeds=seeds).configs == plan.configs  # once: no second migration
    assert not (tmp_path / "optuna.journal.v1.2").exists()


def test_a_damaged_journal_is_refused_and_a_cut_write_set_aside(tmp_path):
    """A last write cut short (a driver killed during it) is set aside (optuna.journal.cut) and the study goes on; a
    damaged line inside is refused in one line naming the way out; a seed's provenance lets check_trial_files take a
    value outside the space, and a trial without one is refused in one line."""
    from mutransfer._sweep.plan import check_trial_files
    from mutransfer.errors import UserInputError
    from tests.journal_helpers import set_trial_attr

    study, trials = _study(trials=2), tmp_path / "trials"
    plan = SearchPlan(study, trials, 1, seeds=[({"lr": 50.0, "batch_size": 10}, {"source_study": "other"})])
    assert plan.next_trial() == ("t0000", {"lr": 50.0, "batch_size": 10})
    check_trial_files(study, trials)
    journal = tmp_path / "optuna.journal"
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 8, "cut')  # a driver killed during a write
    check_trial_files(study, trials)  # Optuna's reads skip it
    again = SearchPlan(study, trials, 1, seeds=plan.seeds)
    assert (
        journal.read_bytes().startswith(whole)
        and (tmp_path / "optuna.journal.cut").read_bytes() == b'{"op_code": 8, "cut\n'
    )
    assert again.next_trial() == ("t0000", {"lr": 50.0, "batch_size": 10})
    set_trial_attr(trials, study.name, 0, "mutransfer.seed", None)  # nothing says it was a seed
    with pytest.raises(UserInputError, match="trial t0000.: lr '50.0' is not a value of the study's search space"):
        check_trial_files(study, trials)
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([*lines[:2], b"{not json", *lines[2:]]))
    with pytest.raises(UserInputError, match="optuna.journal: line 3 is not an Optuna journal entry; restore it from"):
        SearchPlan(study, trials, 1)
    journal.unlink()  # its trials' one store: a resume would start the search again
    with pytest.raises(UserInputError, match="optuna.journal is missing, and it alone holds the trials of"):
        check_trial_files(study, trials)
    (trials / "t0000").rmdir()  # no trial handed out: a search not begun
    check_trial_files(study, trials)


def test_grid_hands_out_every_combination_once(tmp_path):
    m = yaml.safe_load(default_study_text())
    m["search_space"] = {
        "lr": {"type": "choice", "values": [1e-3, 1e-2, 1e-1]},
        "batch_size": {"type": "choice", "values": [10, 20]},
    }
    m["search"].update(algorithm="grid")
    plan = _run(parse_study(m, "test"), tmp_path / "trials", 2, order="lifo")
    assert plan.total == 6
    assert sorted((c["lr"], c["batch_size"]) for c in plan.configs.values()) == sorted(
        (lr, b) for lr in (1e-3, 1e-2, 1e-1) for b in (10, 20)
    )


def test_all_failed_message_names_the_first_error_and_what_to_try(tmp_path):
    from mutransfer._sweep.proxies import all_failed_message

    study = _study(trials=2)
    plan = SearchPlan(study, tmp_path / "trials", 2)
    for error in ("RuntimeError: loss is nan at step 3", "ValueError: something else"):
        key, _ = plan.next_trial()
        plan.record(key, {}, failed=True, error=error)
    text = all_failed_message(study, plan)
    assert "t0000" in text and "loss is nan at step 3" in text and "a lower LR range" in text and "--name NEW" in text
    plan.outcomes[0].error = "ValueError: shapes do not match"
    text = all_failed_message(study, plan)
    assert "mutransfer train" in text and "search_space.lr is 0.0003..0.03" in text


def test_resume_hint_repeats_every_override_given():
    import argparse

    from mutransfer.cli._sweep_cmd import _resume_hint
    from mutransfer.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["sweep", "--study", "my study.yaml", "--num-trials", "4", "--epochs", "3", "--verify"])
    assert isinstance(args, argparse.Namespace)
    hint = " ".join(_resume_hint(args))
    assert hint.startswith("mutransfer sweep --resume --study 'my study.yaml'")
    assert "--num-trials 4" in hint and "--epochs 3" in hint and "--verify --verify-points 5 --verify-seeds 3" in hint
    ladder = " ".join(_resume_hint(parser.parse_args(["sweep", "--ladder", "4", "8", "16", "--top-k", "2"])))
    assert "--ladder 4 8 16" in ladder and "--top-k 2" in ladder  # a list flag repeats its values, not "[4, 8, 16]"
    plain = " ".join(_resume_hint(parser.parse_args(["sweep"])))
    assert plain == "mutransfer sweep --resume"


def test_a_journal_trial_that_does_not_fit_the_search_space_is_refused(tmp_path):
    from mutransfer.errors import UserInputError
    from tests.journal_helpers import set_trial_attr

    study = _study()
    plan = SearchPlan(study, tmp_path / "trials", 2)
    key, config = plan.next_trial()
    assert SearchPlan(study, tmp_path / "trials", 2).configs[0] == config  # a fitting one is read back
    set_trial_attr(tmp_path / "trials", study.name, 0, "param.momentum", 0.9)  # an edited journal
    with pytest.raises(UserInputError, match="not the study's search space"):
        SearchPlan(study, tmp_path / "trials", 2)


def test_a_migration_stopped_part_way_keeps_the_waiting_trials_and_a_migrated_folder_is_never_migrated_again(
    tmp_path, monkeypatch
):
    """Found by review: a migration stopped after the former journal was set aside lost the trials it held waiting;
    and a migrated folder whose journal was then lost was migrated again from its stale files, re-running the trials
    ended since. Now the waiting trials are read from the former journal on every attempt, and a migrated folder
    (optuna.journal.migrated) refuses a missing journal."""
    import optuna

    from mutransfer._sweep import _migrate
    from mutransfer._sweep.plan import check_trial_files
    from mutransfer.errors import UserInputError
    from tests.journal_helpers import as_legacy, journal_of

    study, trials = _study(trials=6), tmp_path / "trials"
    plan = SearchPlan(study, trials, 1)
    key, _ = plan.next_trial()
    plan.record(key, {"epoch": 8, "val_error": 0.3}, failed=False)
    journal_of(trials, study.name).enqueue_trial({"lr": 4e-3})
    as_legacy(trials, study.name, journal="v1")

    def stopped(self):
        raise KeyboardInterrupt  # the driver stopped as it was to mark the new journal complete

    monkeypatch.setattr(_migrate.TrialJournal, "mark_complete", stopped)
    with pytest.raises(KeyboardInterrupt):
        SearchPlan(study, trials, 1)
    (tmp_path / "optuna.journal").unlink()  # ... or stopped right after the former journal was moved aside
    monkeypatch.undo()
    migrated = SearchPlan(study, trials, 1)
    assert migrated.next_trial() == ("t0001", {"lr": 4e-3, "batch_size": migrated.configs[1]["batch_size"]})
    waiting = journal_of(trials, study.name).get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert not waiting and (tmp_path / "optuna.journal.migrated").exists()
    migrated.record("t0001", {"epoch": 8, "val_error": 0.2}, failed=False)
    (tmp_path / "optuna.journal").unlink()  # lost after the migration: the files hold t0000 only
    with pytest.raises(UserInputError, match="optuna.journal is missing, and it alone holds the trials of"):
        check_trial_files(study, trials)


def test_a_trial_of_ours_ended_from_outside_is_taken_as_ended_and_a_gap_in_the_journal_is_refused(tmp_path):
    """Found by review: a running trial ended with Optuna's tell (the dashboard's "Mark complete") had no status of
    ours, so every resume ran it again and could not record it. Now it is ended as Optuna holds it (its value what
    was told; FAIL: failed, saying so). A journal whose trial keys have a gap (a key attribute edited away) is refused
    in one line instead of dropping the trials after it."""
    from mutransfer.errors import UserInputError
    from tests.journal_helpers import journal_of, set_trial_attr

    study, trials = _study(trials=6), tmp_path / "trials"
    plan = SearchPlan(study, trials, 3)
    for _ in range(3):
        plan.next_trial()
    ostudy = journal_of(trials, study.name)
    ostudy.tell(0, 0.25)
    ostudy.tell(1, state=optuna.trial.TrialState.FAIL)
    again = SearchPlan(study, trials, 3)
    assert again.outcomes[0].status == "completed" and again.outcomes[0].value == 0.25
    assert again.outcomes[1].status == "failed" and "Optuna's tell" in str(again.outcomes[1].error)
    assert again.next_trial()[0] == "t0002"  # the one still running, then new ones
    set_trial_attr(trials, study.name, 1, "mutransfer.trial_id", None)
    with pytest.raises(UserInputError, match="optuna.journal: holds trial t0002 but not t0001 before it; restore"):
        SearchPlan(study, trials, 3)


def test_a_process_holding_the_journal_open_sets_a_cut_write_aside_before_it_writes(tmp_path):
    """Found by review: a dashboard (or Study.optuna_study) opened before a driver was killed as it wrote appended its
    next entry to the cut line, damaging the journal for good. Its writes now set the cut bytes aside first."""
    from mutransfer._sweep._journal_file import check_journal, journal_storage
    from mutransfer._sweep._trial_journal import journal_path

    study, trials = _study(trials=2), tmp_path / "trials"
    SearchPlan(study, trials, 1).next_trial()
    held_open = optuna.load_study(study_name=study.name, storage=journal_storage(journal_path(trials)))
    journal = journal_path(trials)
    journal.write_bytes(journal.read_bytes() + b'{"op_code": 8, "wor')  # a driver killed as it wrote
    held_open.set_user_attr("note", "from the dashboard")
    check_journal(journal)  # whole lines only
    assert (tmp_path / "optuna.journal.cut").read_bytes() == b'{"op_code": 8, "wor\n'
    assert SearchPlan(study, trials, 1).journal.study.user_attrs["note"] == "from the dashboard"


@pytest.mark.parametrize("journal", ["empty", "of another study", "its first line only"])
def test_a_journal_that_cannot_hold_the_trial_folders_is_lost_not_a_new_search(tmp_path, journal):
    """Found by review: an empty journal, one of another study, or one cut to its first entry passed as a search not
    begun, beside trial folders: every trial gone without a word. Each is now a lost journal, refused in one line."""
    from mutransfer._sweep._trial_journal import TrialJournal, journal_path
    from mutransfer._sweep.plan import check_trial_files
    from mutransfer._sweep.sampling import search_distributions
    from mutransfer.errors import UserInputError

    study, trials = _study(trials=2), tmp_path / "trials"
    SearchPlan(study, trials, 1).next_trial()
    path = journal_path(trials)
    if journal == "empty":
        path.write_bytes(b"")
    elif journal == "of another study":
        path.unlink()
        TrialJournal(path, "another", search_distributions(study))
    else:
        path.write_bytes(path.read_bytes().split(b"\n")[0] + b"\n")
    for load in (lambda: check_trial_files(study, trials), lambda: SearchPlan(study, trials, 1)):
        with pytest.raises(UserInputError, match="optuna.journal (is missing|does not hold them in full)"):
            load()


def test_a_journal_of_format_2_without_trial_files_is_taken_as_it_is(tmp_path):
    """Found by review: a journal written by the build before format 3 (2cd8309: the journal alone, no trial files)
    was "migrated" from files it never had. It is the trials' store: taken as it is, and marked format 3."""
    from mutransfer._sweep._trial_journal import FORMAT, FORMAT_ATTR
    from tests.journal_helpers import journal_of

    study, trials = _study(trials=4), tmp_path / "trials"
    plan = SearchPlan(study, trials, 1)
    key, _ = plan.next_trial()
    plan.record(key, {"epoch": 8, "val_error": 0.3}, failed=False)
    ostudy = journal_of(trials, study.name)
    ostudy._storage.set_study_user_attr(ostudy._study_id, FORMAT_ATTR, 2)
    again = SearchPlan(study, trials, 1)
    assert again.outcomes[0].value == 0.3 and again.configs == plan.configs
    assert journal_of(trials, study.name).user_attrs[FORMAT_ATTR] == FORMAT


def test_the_search_samples_through_optuna_from_the_window_as_the_journal_holds_it(tmp_path):
    """Each sampled trial is asked on the journal's Optuna study through its sampler wrapper
    (mutransfer._sweep._windowed.WindowedSampler): the same configurations as mutransfer._sweep.sampling.sample_config
    of the window's results. The wrapper refuses a trial whose window has not ended, and a trial not of the search."""
    from mutransfer._sweep._windowed import WindowedSampler, ask
    from mutransfer._sweep.sampling import sample_config

    study = _study(trials=6)
    plan = _run(study, tmp_path / "trials", 2, order="lifo")
    for i in range(6):
        told = [(plan.configs[j], plan.outcomes[j].value) for j in range(i - 1)]
        assert plan.configs[i] == sample_config(study, i, told)
    assert isinstance(plan.journal.study.sampler, WindowedSampler)

    early = SearchPlan(study, tmp_path / "early" / "trials", 1)
    early.next_trial()  # t0000 running
    trial_id = early.journal.asking(1, "t0001")
    with pytest.raises(ValueError, match="trial t0001 asked before trial t0000 ended"):
        ask(early.journal.study, trial_id, early._space)
    stranger = optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING)  # another tool's: no key of ours
    with pytest.raises(ValueError, match="carries no mutransfer key"):
        early.journal.study.sampler.sample_relative(early.journal.study, stranger, {})


@pytest.mark.parametrize("enqueued", [False, True])
def test_a_driver_stopped_while_a_trial_was_asked_asks_it_again_alike(tmp_path, enqueued):
    """A driver stopped after the journal trial of t0001 took our key, with part of its parameters written: a resume
    does not take it as handed out (nor as damage), asks it again with the same configuration as a run never stopped,
    and the journal holds t0001 once. An enqueued trial being claimed keeps its fixed parameters and is not claimed
    twice."""
    import optuna

    from tests.journal_helpers import journal_of

    study = _study(trials=4)

    def begin(trials):
        plan = SearchPlan(study, trials, 1)
        if enqueued:
            journal_of(trials, study.name).enqueue_trial({"batch_size": 20})
            journal_of(trials, study.name).enqueue_trial({"batch_size": 10})
        key, _config = plan.next_trial()
        plan.record(key, {"epoch": 8, "val_error": 0.3}, failed=False)
        return plan

    whole = begin(tmp_path / "whole" / "trials")
    expected = whole.next_trial()
    stopped = begin(tmp_path / "stopped" / "trials")
    enqueued_id, fixed = stopped._enqueued() if enqueued else (None, {})
    trial_id = stopped.journal.asking(1, "t0001", enqueued_id, fixed)
    trial = optuna.trial.Trial(stopped.journal.study, trial_id)
    trial.suggest_float("lr", 3e-4, 3e-2, log=True)  # then the driver stopped: batch_size not written yet
    ostudy = journal_of(tmp_path / "stopped" / "trials", study.name)
    other = ostudy.ask()  # Optuna's own ask, from another process (found by review): it takes no trial of ours
    assert "mutransfer.trial_id" not in ostudy.trials[other.number].user_attrs
    resumed = SearchPlan(study, tmp_path / "stopped" / "trials", 1)
    assert sorted(resumed.configs) == [0]
    assert resumed.next_trial() == expected
    keys = [t.user_attrs.get("mutransfer.trial_id") for t in ostudy.get_trials()]
    assert keys.count("t0001") == 1 and (not enqueued or expected[1]["batch_size"] == 10)
    assert (resumed.next_trial() is None) and SearchPlan(
        study, tmp_path / "stopped" / "trials", 1
    ).next_trial() == expected


def test_a_trial_being_asked_that_was_edited_is_refused_before_it_runs(tmp_path):
    """Found by review: a trial a stop left part-way through being asked skipped the checks of a handed-out trial, so
    a value edited into it (lr 50, outside the space) was trained. It is refused in one line, before anything runs."""
    from mutransfer._sweep.plan import check_trial_files
    from mutransfer.errors import UserInputError
    from tests.journal_helpers import journal_of

    study, trials = _study(trials=4), tmp_path / "trials"
    plan = SearchPlan(study, trials, 1)
    key, _config = plan.next_trial()
    plan.record(key, {"epoch": 8, "val_error": 0.3}, failed=False)
    trial_id = plan.journal.asking(1, "t0001")
    lr = optuna.distributions.FloatDistribution(1e-4, 100.0, log=True)
    journal_of(trials, study.name)._storage.set_trial_param(trial_id, "lr", lr.to_internal_repr(50.0), lr)
    for reads in (lambda: check_trial_files(study, trials), lambda: SearchPlan(study, trials, 1)):
        with pytest.raises(UserInputError, match=r"optuna.journal \(trial t0001\): lr '50.0' is not a value of"):
            reads()
