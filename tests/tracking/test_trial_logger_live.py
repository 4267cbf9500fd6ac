"""The proxy trials' live MLflow child runs (mutransfer._sweep.trial_logger) on a real sqlite store, with synthetic
Tune trial events: created RUNNING at the start, epochs logged while the trial runs, one run per trial across a
driver restart, finished with every epoch once."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

from mutransfer._sweep.trial_logger import TrialLogger
from mutransfer._tracking.runs import Tracker


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """One sqlite store for the module (creating its tables is the slow part)."""
    tracker = Tracker(f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}")
    return tracker, tracker.ensure_experiment("live")


@pytest.fixture()
def store(database, tmp_path):
    """A study of its own: a new parent run."""
    tracker, experiment = database
    parent = tracker.client.create_run(experiment, tags={"mutransfer.kind": "study"}).info.run_id
    return tracker, experiment, parent, tmp_path


def _hyperparameters(config: dict) -> dict:
    """A study with lr searched and batch_size 10 fixed (module level: the logger pickles)."""
    return {"lr": config.get("lr", 1e-3), "batch_size": 10}


def _logger(store, **kw) -> TrialLogger:
    tracker, experiment, parent, tmp_path = store
    logger = TrialLogger(
        uri=tracker.uri,
        experiment_id=experiment,
        parent_run_id=parent,
        study_name="live",
        proxy_K=6,
        proxy_width=16,
        budget_epochs=4,
        hyperparameters=_hyperparameters,
        total_trials=1,
        device_kind="cpu",
        devices_per_trial=1.0,
        trials_dir=str(tmp_path / "trials"),
        trial_key=lambda t: t.config["key"],
        **kw,
    )
    logger.live_interval_s = 0.0  # every result is logged at once (the sweep logs at most once a second)
    return logger


def _trial(tune_id: str = "abc"):
    return SimpleNamespace(
        trial_id=tune_id,
        config={"key": "t0000", "lr": 0.01},
        experiment_tag="1_lr=0.01",
        last_result={},
        num_failures=0,
        path=None,
        get_error=lambda: None,
    )


def _result(epoch: int) -> dict:
    return {
        "epoch": epoch,
        "val_error": 1.0 / epoch,
        "train_loss": 2.0 / epoch,
        "lr": 0.01,
        "trainer_seconds": 0.1 * epoch,
        "spectral_lr0": 0.02,
        "diverged": 0,
        "time_total_s": 0.2 * epoch,
    }


def _children(store):
    tracker, experiment, parent, _ = store
    return tracker.children(experiment, parent, "proxy_trial")


def _steps(store, run_id):
    return sorted(m.step for m in store[0].client.get_metric_history(run_id, "val_error"))


def test_a_trial_run_is_running_with_its_epochs_while_the_trial_trains(store):
    logger, trial = _logger(store), _trial()
    logger.on_trial_start(trial)
    [run] = _children(store)
    assert run.info.status == "RUNNING" and run.data.tags["mutransfer.status"] == "running"
    assert run.data.tags["mutransfer.trial_id"] == "t0000" and run.data.params["hp.lr"] == "0.01"
    for epoch in (1, 2):
        trial.last_result = _result(epoch)
        logger.on_trial_result(trial, trial.last_result)
    assert _steps(store, run.info.run_id) == [1, 2] and _children(store)[0].info.status == "RUNNING"
    for epoch in (3, 4):
        trial.last_result = _result(epoch)
        logger.on_trial_result(trial, trial.last_result)
    logger.on_trial_complete(trial)
    [run] = _children(store)
    assert run.info.status == "FINISHED" and run.data.tags["mutransfer.status"] == "completed"
    assert _steps(store, run.info.run_id) == [1, 2, 3, 4]  # each epoch once
    assert run.data.metrics["final_val_error"] == pytest.approx(0.25) and run.data.params["spectral_lr"] == "0.02"


def test_the_live_interval_batches_epochs_and_the_end_logs_the_rest(store):
    logger, trial = _logger(store), _trial()
    logger.live_interval_s = 3600.0
    logger.on_trial_start(trial)
    for epoch in (1, 2, 3):
        trial.last_result = _result(epoch)
        logger.on_trial_result(trial, trial.last_result)
    run_id = _children(store)[0].info.run_id
    assert _steps(store, run_id) == [1]  # the first at once, the next not within the interval
    logger.on_trial_complete(trial)
    assert _steps(store, run_id) == [1, 2, 3]


def test_a_restarted_driver_keeps_the_trials_one_run_and_its_history(store):
    first, trial = _logger(store), _trial("abc")
    first.on_trial_start(trial)
    for epoch in (1, 2):
        trial.last_result = _result(epoch)
        first.on_trial_result(trial, trial.last_result)
    [run] = _children(store)
    store[0].end_open_children(store[2], "KILLED")  # Ctrl-C: the parent ends its running children
    assert _children(store)[0].info.status == "KILLED"

    second = _logger(store)  # the next driver
    again = _trial("def")  # Tune's id may differ: the trial's key is what names its run
    second.on_trial_start(again)
    [same] = _children(store)
    assert same.info.run_id == run.info.run_id and same.info.status == "RUNNING"
    for epoch in (2, 3, 4):  # resumed from its checkpoint at epoch 1: epoch 2 again
        again.last_result = _result(epoch)
        second.on_trial_result(again, again.last_result)
    second.on_trial_complete(again)
    [done] = _children(store)
    assert done.info.status == "FINISHED" and _steps(store, done.info.run_id) == [1, 2, 3, 4]
    assert second.logged_trial_ids() == {"t0000"}

    third = _logger(store)  # a replay of the finished trial adds nothing
    third.on_trial_start(_trial("ghi"))
    assert [r.info.run_id for r in _children(store)] == [run.info.run_id] and _children(store)[
        0
    ].info.status == "FINISHED"


def test_the_logger_still_pickles_and_forgets_its_runs(store):
    logger = _logger(store, background=True)
    logger.trial_key = None  # a lambda does not pickle; the sweep passes the module-level proxies.trial_dirname
    logger.on_trial_start(_trial())
    assert logger.drain(timeout=120) == []
    copy = pickle.loads(pickle.dumps(logger))  # Tune pickles its callbacks: the writer thread stays behind
    assert copy._open == {} and copy._logged is None and copy.uri == logger.uri
    assert copy._background is None and copy.background
    logger.close()


def test_in_the_background_tunes_events_return_while_the_store_waits_and_the_writes_follow_in_order(store):
    """The sweep's mode: an event returns before its write (a store that does not answer holds the writes, not
    Tune); once the store answers, drain() sees them all written, in order, each epoch once."""
    import threading

    logger, trial = _logger(store, background=True), _trial()
    answer = threading.Event()
    started = logger._started
    logger._started = lambda t, at: (answer.wait(60), started(t, at))  # the store answers when the test says
    logger.on_trial_start(trial)
    for epoch in (1, 2, 3, 4):
        trial.last_result = _result(epoch)
        logger.on_trial_result(trial, trial.last_result)
    logger.on_trial_complete(trial)
    trial.last_result = {}  # Tune changes its trial after the event: the logger wrote a copy
    assert logger.pending() == 6 and _children(store) == []  # all six events returned, none written
    with pytest.raises(TimeoutError, match="6 MLflow writes still waiting"):
        logger.drain(timeout=0.2)
    answer.set()
    assert logger.drain(timeout=120) == [] and logger.pending() == 0
    [run] = _children(store)
    assert run.info.status == "FINISHED" and _steps(store, run.info.run_id) == [1, 2, 3, 4]
    assert run.data.metrics["final_val_error"] == pytest.approx(0.25)
    assert logger.close() == 0 and logger.pending() == 0  # the writer thread ends


def test_a_write_that_fails_is_said_and_the_next_ones_still_run(tmp_path):
    from mutransfer._tracking.background import Background

    done: list[int] = []

    def fail():
        raise ConnectionError("127.0.0.1:5000 connection refused\nmore")

    background = Background("test")
    background.submit(done.append, 1)
    background.submit(fail)
    background.submit(done.append, 2)
    assert background.drain(timeout=30)
    assert done == [1, 2] and background.failures == ["fail: 127.0.0.1:5000 connection refused more"]


def test_a_driver_killed_after_the_final_write_leaves_the_final_metrics_once(store):
    """Killed between the trial's final log_batch and the run's end: the next driver ends the run without logging
    final_val_error, epochs, ... a second time (a tracking server outage made this window minutes long)."""
    first, trial = _logger(store), _trial()
    first.on_trial_start(trial)
    for epoch in (1, 2, 3, 4):
        trial.last_result = _result(epoch)
        first.on_trial_result(trial, trial.last_result)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("the driver is killed here")

    first.client.set_terminated = killed
    with pytest.raises(KeyboardInterrupt):
        first.on_trial_complete(trial)
    first._client = None
    [run] = _children(store)
    assert run.info.status == "RUNNING" and "final_val_error" in run.data.metrics

    second = _logger(store)  # the resumed driver writes the finished trial's run from its files
    second.on_trial_complete(trial)
    [done] = _children(store)
    assert done.info.status == "FINISHED"
    for key in ("final_val_error", "epochs", "wall_seconds"):
        assert len(store[0].client.get_metric_history(done.info.run_id, key)) == 1, key
    assert _steps(store, done.info.run_id) == [1, 2, 3, 4]


def test_a_final_write_that_fails_is_done_again_in_the_same_run(store):
    """The store fails the trial's final write (after MLflow's retries); when the proxies end the trial is written
    again from its files, into its one run (before: a second run, and the first left RUNNING)."""
    logger, trial = _logger(store), _trial()
    logger.on_trial_start(trial)
    for epoch in (1, 2, 3, 4):
        trial.last_result = _result(epoch)
        logger.on_trial_result(trial, trial.last_result)
    terminate = logger.client.set_terminated

    def down(*args, **kwargs):
        raise ConnectionError("the tracking server is down")

    logger.client.set_terminated = down
    with pytest.raises(ConnectionError):
        logger.on_trial_complete(trial)
    logger.client.set_terminated = terminate
    logger.on_trial_complete(trial)  # collect_trials -> log_from_journal: the same writer, once the store is back
    [run] = _children(store)
    assert run.info.status == "FINISHED" and _steps(store, run.info.run_id) == [1, 2, 3, 4]
    assert len(store[0].client.get_metric_history(run.info.run_id, "final_val_error")) == 1
