"""The proxy trials' MLflow child runs, live: a Tune ``Callback`` that keeps one run per trial up to date.

:class:`TrialLogger`, per trial (keyed by its stable key ``t0000`` …, mutransfer._sweep.plan, which its
configuration carries as ``trial_key`` and which is its directory name and the ``mutransfer.trial_id`` tag):

- ``on_trial_start``: creates the child run (MLflow status RUNNING, ``mutransfer.status =
  running``, the trial's parameters), or reuses the trial's unfinished run if it has one
  (a trial retried, or resumed after the driver was killed) and sets it RUNNING;
- ``on_trial_result``: buffers the epoch and logs the epochs not yet logged (step = epoch)
  in one ``log_batch``, at most every :attr:`TrialLogger.live_interval_s` seconds;
- ``on_trial_complete`` / ``on_trial_error``: logs the remaining epochs (completed from the
  trial's own ``history.json``, mutransfer._sweep.trial), and the final metrics, tags and params
  as the search's journal holds the trial's end (mutransfer._sweep._trial_journal.EndedTrials),
  in one ``log_batch``, and terminates the run (FINISHED, or FAILED).

A trial whose child run is finished is skipped (idempotent on resume). The console lines
come from mutransfer._sweep.progress. The executor feeds it the search's events (on Ray, as a ``ray.tune.Callback``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mutransfer._sweep._trial_journal import EndedTrials, journal_path
from mutransfer._sweep.plan import error_text, key_number, key_of, trial_status
from mutransfer._sweep.trial import read_trial_history
from mutransfer._tracking.background import Background
from mutransfer._tracking.runs import (
    EPOCH_METRIC_KEYS,
    ERROR_TAG,
    KIND_TAG,
    PARENT_TAG,
    RUN_NAME_TAG,
    STATUS_TAG,
    STUDY_TAG,
    SUPERSEDED_TAG,
    TRIAL_ID_TAG,
    Tracker,
    _client,
    create_run,
    epoch_metrics,
    log_batch,
    logged_steps,
)

#: the mutransfer.status tag of a child run whose trial has not finished
OPEN_STATUS = "running"


@dataclass(frozen=True)
class TrialView:
    """What the logger reads of a Tune trial, copied when Tune reports the event (Tune changes the trial after,
    and the background thread writes later)."""

    trial_id: str
    config: dict
    last_result: dict
    num_failures: int
    path: str | None
    error: str | None

    @classmethod
    def of(cls, trial, *, failed: bool = False) -> TrialView:
        """The copy; a failed trial's error line is read now (:func:`~mutransfer._sweep.plan.error_text`)."""
        return cls(
            trial_id=str(trial.trial_id),
            config=dict(trial.config or {}),
            last_result=dict(trial.last_result or {}),
            num_failures=int(getattr(trial, "num_failures", 0) or 0),
            path=getattr(trial, "path", None),
            error=error_text(trial) if failed else None,
        )

    def get_error(self) -> str | None:
        """Tune's ``Trial.get_error``, as it was at the event (read by mutransfer._sweep.plan.error_text)."""
        return self.error


@dataclass
class OpenRun:
    """A trial's child run that is not finished yet: its id, the epochs and params it holds."""

    run_id: str
    steps: set[int] | None = None  # None: not read yet (a run of an earlier session)
    params: set[str] = field(default_factory=set)
    #: the single-value metrics it holds already (final_val_error, epochs, ...: a driver killed between the
    #: final log_batch and the run's end wrote them; they are not logged again)
    finals: set[str] = field(default_factory=set)
    live: bool = False  # set RUNNING by this driver
    flushed: float = 0.0  # time.time() of the last live log_batch


def _finished(run) -> bool:
    """A child run that holds its trial's final result (older versions wrote no run before that)."""
    return run.info.status in ("FINISHED", "FAILED") and run.data.tags.get(STATUS_TAG, OPEN_STATUS) != OPEN_STATUS


class TrialLogger:
    """Tune Callback that keeps one MLflow child run per proxy trial (see the module docstring).

    Picklable (Tune stores the RunConfig, callbacks included, in its experiment folder, which
    the sweep never reads back): the MLflow client and the buffers are rebuilt after unpickling.
    ``quiet`` is accepted for older callers and unused (the console lines are mutransfer._sweep.progress's).
    """

    #: seconds between two live log_batch calls of one trial (the rest is logged when it ends)
    live_interval_s = 1.0

    def __init__(
        self,
        *,
        uri: str,
        experiment_id: str,
        parent_run_id: str,
        study_name: str,
        proxy_K: int | None,
        proxy_width: int | None = None,
        grid: str | None = None,
        budget_epochs: int,
        hyperparameters: Callable[[dict], dict],
        total_trials: int,
        device_kind: str,
        devices_per_trial: float,
        quiet: bool = False,
        trials_dir: str | None = None,
        trial_key=None,
        tags: dict | None = None,
        key_tags: dict[str, dict[str, str]] | None = None,
        background: bool = False,
    ):
        self.uri = uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.study_name = study_name
        self.proxy_K = proxy_K
        self.proxy_width = proxy_width
        #: the grid the trials train on, e.g. "64" or "16x16" (None: not a grid problem)
        self.grid = grid
        self.budget_epochs = budget_epochs
        #: a trial's Tune config -> its merged hyperparameters (mutransfer._study.models.merge_hyperparameters)
        self.hyperparameters = hyperparameters
        self.total_trials = total_trials
        self.device_kind = device_kind
        self.devices_per_trial = devices_per_trial
        self.quiet = quiet
        #: <study dir>/trials: each trial's history.json (mutransfer._sweep.trial); None: beside Tune's trial dir
        self.trials_dir = trials_dir
        #: a picklable function trial -> the name of its run (mutransfer._sweep.plan_tune.trial_dirname)
        self.trial_key = trial_key
        #: tags every trial's run carries besides the standard ones (a ladder rung: mutransfer.rung)
        self.tags = dict(tags or {})
        #: key -> extra tags of that trial's run (the strategies': a warm start's source trial)
        self.key_tags = dict(key_tags or {})
        #: True: Tune's events are copied and written on a thread of their own (mutransfer._tracking.background),
        #: so a tracking server that is down stalls the writes, not the trials; call :meth:`drain` before reading
        self.background = background
        self._reset()

    def _reset(self) -> None:
        self._client = None
        self._background: Background | None = None
        self._logged: set[str] | None = None
        self._open: dict[str, OpenRun] = {}
        self._buffers: dict[str, dict[int, dict]] = {}
        self._last: dict[str, dict] = {}
        self._start: dict[str, float] = {}
        self._retries: dict[str, int] = {}
        self._done = 0
        #: how each trial ended, as the search's journal holds it: what its run's end is written from
        self._ended = None if self.trials_dir is None else EndedTrials(journal_path(self.trials_dir), self.study_name)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}  # _reset's: made again on unpickling

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    # ---- Tune Callback protocol (duck-typed; fed by the executor, mutransfer._sweep._executors) -----------
    @property
    def client(self):
        if self._client is None:
            self._client = _client(self.uri)
        return self._client

    def logged_trial_ids(self) -> set[str]:
        """Trial keys that already have a finished child run.

        Read once from the store, with the unfinished runs (RUNNING, or KILLED/FAILED with the
        status tag ``running``: their driver was stopped) that a trial resumes in.
        """
        if self._logged is None:
            runs = Tracker(self.uri)
            runs._client = self.client
            logged: set[str] = set()  # assigned once read whole: a store that fails here is asked again
            for r in runs.children(self.experiment_id, self.parent_run_id, kind="proxy_trial"):
                key = r.data.tags.get(TRIAL_ID_TAG)
                if r.data.tags.get(SUPERSEDED_TAG) == "true":  # its key was handed out again
                    continue
                if _finished(r):
                    logged.add(key)
                elif key not in self._open:
                    finals = set(r.data.metrics) - set(EPOCH_METRIC_KEYS)
                    self._open[key] = OpenRun(r.info.run_id, params=set(r.data.params), finals=finals)
            self._logged, self._done = logged, len(logged)
        return self._logged

    def _key(self, trial) -> str:
        return self.trial_key(trial) if self.trial_key is not None else _key(trial)

    # ---- Tune's events: in order, on the background thread when there is one -------------
    def on_trial_start(self, trial) -> None:
        self._do(self._started, TrialView.of(trial), time.time())

    def on_trial_result(self, trial, result: dict) -> None:
        self._do(self._result, TrialView.of(trial), dict(result))

    def on_trial_recover(self, trial) -> None:
        self._do(self._recovered, TrialView.of(trial))

    def on_trial_complete(self, trial) -> None:
        self._do(self._flush, TrialView.of(trial), False, time.time())

    def on_trial_error(self, trial) -> None:
        self._do(self._flush, TrialView.of(trial, failed=True), True, time.time())

    def _do(self, fn: Callable[..., None], *args) -> None:
        if not self.background:
            fn(*args)
            return
        if self._background is None:
            self._background = Background(f"mlflow {self.study_name}")
        self._background.submit(fn, *args)

    def pending(self) -> int:
        """Events queued for the store and not written yet (0 without a background thread)."""
        return 0 if self._background is None else self._background.pending()

    def close(self, timeout: float | None = None) -> int:
        """End the background thread: the queued events get ``timeout`` seconds, the rest is dropped (returns how
        many; an interrupted study's files hold them and ``--resume`` logs them)."""
        if self._background is None:
            return 0
        dropped, self._background = self._background.close(timeout), None
        return dropped

    def drain(self, timeout: float | None = None) -> list[str]:
        """Wait until every event so far is in the store (background mode); returns the writes that failed
        after MLflow's retries (one line each), raises TimeoutError if ``timeout`` passed first."""
        if self._background is None:
            return []
        if not self._background.drain(timeout):
            raise TimeoutError(f"{self._background.pending()} MLflow writes still waiting after {timeout} s")
        return list(self._background.failures)

    def _started(self, trial, at: float) -> None:
        key = self._key(trial)
        self._start.setdefault(key, at)
        if key in self.logged_trial_ids():  # a finished trial replayed: its run is complete
            return
        run = self._open.get(key)
        if run is None:
            params = self._params(key, dict(trial.config or {}))
            tags = dict(self._run_tags(key, self._index(trial)), **{STATUS_TAG: OPEN_STATUS})
            created = create_run(self.client, self.experiment_id, tags)
            run = self._open[key] = OpenRun(created, steps=set(), live=True)
            log_batch(self.client, run.run_id, params=params)
            run.params = set(params)  # only once written: a failed write leaves them to the trial's end
        elif not run.live:  # left unfinished by an earlier driver: running again
            self.client.update_run(run.run_id, status="RUNNING")
            run.live = True

    def _params(self, key: str, config: dict) -> dict:
        hp = self.hyperparameters(config)
        # a searched proxy size is the trial's own (mutransfer._study.search_space.SIZE_KEYS)
        own = {
            "trial_id": key,
            "K": hp.get("proxy_K", self.proxy_K),
            "width": hp.get("operator.width", self.proxy_width),
        }
        if self.grid is not None:
            own["grid"] = self.grid
        return {**own, **{f"hp.{k}": v for k, v in hp.items()}}

    def _run_tags(self, key: str, index: int) -> dict:
        return {
            PARENT_TAG: self.parent_run_id,
            KIND_TAG: "proxy_trial",
            STUDY_TAG: self.study_name,
            TRIAL_ID_TAG: key,
            RUN_NAME_TAG: f"trial {index:03d} ({key})",
            "mutransfer.trial_index": index,
            **self.tags,
            **self.key_tags.get(key, {}),
        }

    def _steps(self, run: OpenRun) -> set[int]:
        if run.steps is None:
            run.steps = logged_steps(self.client, run.run_id, "val_error")
        return run.steps

    def _log_live(self, key: str) -> None:
        """Log the buffered epochs the trial's run lacks, at most every live_interval_s seconds."""
        run = self._open.get(key)
        now = time.time()
        if run is None or now - run.flushed < self.live_interval_s:
            return
        steps = self._steps(run)
        buf = self._buffers.get(key, {})
        fresh = [e for e in sorted(buf) if e not in steps]
        if fresh:
            ts = int(now * 1000)
            metrics = [
                m
                for e in fresh
                for m in epoch_metrics(
                    e,
                    val_error=buf[e]["val_error"],
                    train_loss=buf[e]["train_loss"],
                    lr=buf[e]["lr"],
                    timestamp_ms=ts,
                )
            ]
            log_batch(self.client, run.run_id, metrics=metrics)
            steps.update(fresh)
            run.flushed = now

    @staticmethod
    def _buffer(buf: dict, result: dict) -> None:
        """Add one Tune result (a TrialReport's metrics) to ``buf``: epoch -> the epoch's metrics."""
        if not result.get("diverged") and "epoch" in result and "val_error" in result:
            buf[int(result["epoch"])] = {
                "val_error": float(result["val_error"]),
                "train_loss": float(result.get("train_loss", float("nan"))),
                "lr": float(result.get("lr", float("nan"))),
                "seconds": float(result.get("trainer_seconds", 0.0)),
            }

    def _result(self, trial, result: dict) -> None:
        tid = self._key(trial)
        self._buffer(self._buffers.setdefault(tid, {}), result)
        self._last[tid] = result
        self._log_live(tid)

    def _recovered(self, trial) -> None:
        key = self._key(trial)
        self._retries[key] = self._retries.get(key, 0) + 1

    # ---- helpers --------------------------------------------------------------------
    def _index(self, trial) -> int:
        return key_number(self._key(trial))

    def _add_trial_history(self, buf: dict, tid: str, tune_path) -> None:
        """Fill ``buf`` with the epochs the trial kept in its directory (those of earlier attempts included).

        Tune stores a trial at <study dir>/tune/run-<n>/<key> (sweep.proxies), the trial its history in
        <study dir>/trials/<key> (sweep.trial); epochs already reported to this driver win.
        """
        if self.trials_dir is None and not tune_path:
            return

        trials = Path(self.trials_dir) if self.trials_dir is not None else Path(tune_path).parents[2] / "trials"
        for r in read_trial_history(trials / tid):
            buf.setdefault(
                r.epoch, {"val_error": r.test_error, "train_loss": r.train_loss, "lr": r.lr, "seconds": r.seconds}
            )

    def _flush(self, trial, failed: bool, at: float | None = None) -> None:
        """Write a finished trial's run (``trial``: a :class:`TrialView` or a Tune trial): its configuration, status,
        last metrics and error as the search's journal holds them (the plan records a trial's end there before the
        observers hear of it, mutransfer._sweep.plan_tune, _executors); Tune's last result where no journal does (a
        logger fed by no plan) and for what the journal does not keep (a population's size)."""
        tid = self._key(trial)
        last = self._last.pop(tid, None) or dict(trial.last_result or {})
        held = None if self._ended is None else self._ended.of(tid)
        config, error = dict(trial.config or {}), error_text(trial) if failed else None
        if held is not None:
            config, last, failed, error = (
                dict(held.config),
                {**last, **held.metrics},
                held.status == "failed",
                held.error,
            )
        self._write_run(
            tid,
            config=config,
            buf=self._buffers.pop(tid, {}),
            last=last,
            failed=failed,
            error=error,
            retries=self._retries.pop(tid, int(getattr(trial, "num_failures", 0) or 0) - (1 if failed else 0)),
            start=self._start.pop(tid, None),
            end=at,
            index=self._index(trial),
            tune_path=getattr(trial, "path", None),
            status=None if held is None else held.status,
        )

    def log_from_journal(self, key: str, config: dict, outcome) -> None:
        """Write the child run of a trial from what the journal holds of it (``config``, ``outcome``: the driver died
        before on_trial_complete logged it); the epochs come from its history.json."""
        failed = outcome.status == "failed"
        self._write_run(
            key,
            config=dict(config),
            buf={},
            last=dict(outcome.metrics),
            failed=failed,
            error=outcome.error if failed else None,
            retries=0,
            start=None,
            index=key_number(key),
            status=outcome.status,
        )

    def _write_run(
        self, tid, *, config, buf, last, failed, error, retries, start, index, tune_path=None, end: float | None = None,
        status: str | None = None,
    ) -> None:  # fmt: skip
        """Finish the trial's child run (the open one, else a new one): the epochs it lacks, final metrics, tags
        (``status``: the journal's, else from ``last``)."""
        if tid in self.logged_trial_ids():
            return
        self._add_trial_history(buf, tid, tune_path)
        status = status or trial_status(last, failed, self.budget_epochs)
        params = self._params(tid, config)
        if "spectral_lr0" in last:
            params["spectral_lr"] = last["spectral_lr0"]
        wall = float(last.get("time_total_s", 0.0) or 0.0)
        end = time.time() if end is None else end  # the event's time (the write may come later)
        seen_start = start is not None  # on_trial_start's clock (it fires once the trial's actor runs)
        start = end - wall if start is None else start
        start_ms = int(start * 1000)
        run = self._open.get(tid)  # dropped once the run is terminated: a failed write keeps it for the retry
        logged = self._steps(run) if run is not None else set()
        metrics = []
        for epoch in sorted(set(buf) - logged):
            row = buf[epoch]
            metrics += epoch_metrics(
                epoch,
                val_error=row["val_error"],
                train_loss=row["train_loss"],
                lr=row["lr"],
                timestamp_ms=start_ms + int(row["seconds"] * 1000),
            )
        final_error = float(last.get("val_error", last.get("test_error", float("nan")))) if not failed else float("nan")
        epochs_done = int(last.get("epoch", max(buf) if buf else 0) or 0)
        trainer_seconds = float(last.get("trainer_seconds", 0.0) or 0.0)
        now = int(end * 1000)
        metrics += [
            ("final_val_error", final_error, now, epochs_done),
            ("epochs", epochs_done, now, 0),
            ("trainer_seconds", trainer_seconds, now, 0),
            ("wall_seconds", wall, now, 0),
            ("device_seconds", wall * self.devices_per_trial, now, 0),
        ]
        if seen_start:  # from Tune starting the trial to its end, on the driver's clock (mutransfer._sweep.overheads)
            # the members of a population (``population``: how many trained together) share its span, as they share
            # its trainer and wall time: each holds its part, so the study's overheads count the span once; a member
            # that outlived ASHA-stopped partners holds at least its wall share (the time it trained alone is its own)
            together = max(1, int(last.get("population", 1) or 1))
            metrics.append(("span_seconds", max((end - start) / together, wall if together > 1 else 0.0), now, 0))
        if run is not None:
            metrics = [m for m in metrics if m[0] not in run.finals]
        tags = {STATUS_TAG: status, "mutransfer.retries": max(0, retries)}
        if status in ("pruned", "diverged"):  # MLflow's FINISHED alone reads as a full run in the runs table
            tags[RUN_NAME_TAG] = f"trial {index:03d} ({tid}, {status} at epoch {epochs_done})"
        if index or run is None:
            tags["mutransfer.trial_index"] = index
        if failed:
            tags[ERROR_TAG] = error or "unknown error"
        if run is None:  # never seen starting (finished before a driver was killed, or an older store)
            run_id = create_run(self.client, self.experiment_id, self._run_tags(tid, index), start_time=start_ms)
            run = self._open[tid] = OpenRun(run_id, steps=set())  # a failed write below is retried in this run
        else:
            run_id = run.run_id
            params = {k: v for k, v in params.items() if k not in run.params}  # MLflow params are write-once
        log_batch(self.client, run_id, metrics=metrics, params=params, tags=tags)
        # written: a retry after a failure below (the run's end) adds none of it again
        run.finals.update(m[0] for m in metrics if m[0] not in EPOCH_METRIC_KEYS)
        run.steps = (run.steps or set()) | set(buf)
        run.params.update(params)
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED", end_time=now)
        self._open.pop(tid, None)
        self.logged_trial_ids().add(tid)
        self._done += 1


def _key(trial) -> str:
    """A Tune trial's key of ours (Tune's id for a trial without one)."""
    return key_of(trial) or trial.trial_id


# --------------------------------------------------------------------------- studies table
