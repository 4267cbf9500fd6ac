"""The proxy trials' MLflow child runs: a Tune ``Callback`` that buffers each trial's epochs and writes one run per trial.

:class:`TrialLogger` buffers each trial's per-epoch results in ``on_trial_result``
(completed from the trial's own ``history.json``, mutransfer.sweep.trial) and, when
the trial ends (``on_trial_complete`` / ``on_trial_error``), creates the child run,
writes params, all metrics and tags in ONE ``log_batch`` and terminates it. A run is
never left RUNNING, and a trial that already has a child run is skipped
(idempotent on resume). A trial is named by its stable key (``t0000`` …,
mutransfer.sweep.plan), which its configuration carries as ``trial_key`` and which is the
child run's ``mutransfer.trial_id`` tag. ``as_tune_callback`` wraps it as a ``ray.tune.Callback``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mutransfer.sweep.tracking import (
    KIND_TAG,
    PARENT_TAG,
    RUN_NAME_TAG,
    STATUS_TAG,
    STUDY_TAG,
    TRIAL_ID_TAG,
    Tracker,
    _client,
    log_batch,
)


class TrialLogger:
    """Tune Callback that writes one MLflow child run per proxy trial (see the module docstring).

    Picklable (Tune stores the RunConfig, callbacks included, in its experiment folder, which
    the sweep never reads back): the MLflow client and the buffers are rebuilt after unpickling.
    """

    def __init__(
        self,
        *,
        uri: str,
        experiment_id: str,
        parent_run_id: str,
        study_name: str,
        proxy_K: int | None,
        proxy_width: int | None = None,
        budget_epochs: int,
        fixed: dict,
        searched: list[str],
        total_trials: int,
        device_kind: str,
        devices_per_trial: float,
        quiet: bool = False,
        trials_dir: str | None = None,
    ):
        self.uri = uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.study_name = study_name
        self.proxy_K = proxy_K
        self.proxy_width = proxy_width
        self.budget_epochs = budget_epochs
        self.fixed = dict(fixed)
        self.searched = list(searched)
        self.total_trials = total_trials
        self.device_kind = device_kind
        self.devices_per_trial = devices_per_trial
        self.quiet = quiet
        #: <study dir>/trials: each trial's history.json (mutransfer.sweep.trial); None: beside Tune's trial dir
        self.trials_dir = trials_dir
        self._reset()

    def _reset(self) -> None:
        self._client = None
        self._logged: set[str] | None = None
        self._buffers: dict[str, dict[int, dict]] = {}
        self._last: dict[str, dict] = {}
        self._start: dict[str, float] = {}
        self._retries: dict[str, int] = {}
        self._done = 0

    def __getstate__(self):
        state = dict(self.__dict__)
        for key in ("_client", "_logged", "_buffers", "_last", "_start", "_retries", "_done"):
            state.pop(key, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    # ---- Tune Callback protocol (duck-typed; wrapped by as_tune_callback) -----------
    @property
    def client(self):
        if self._client is None:
            self._client = _client(self.uri)
        return self._client

    def logged_trial_ids(self) -> set[str]:
        """Trial ids that already have a complete child run.

        A child run still RUNNING was being written when a previous driver died (between
        create_run and set_terminated): it is deleted, and the trial is written again.
        """
        if self._logged is None:
            runs = Tracker(self.uri)
            runs._client = self.client
            self._logged = set()
            for r in runs.children(self.experiment_id, self.parent_run_id, kind="proxy_trial"):
                if r.info.status == "RUNNING":
                    self.client.delete_run(r.info.run_id)
                else:
                    self._logged.add(r.data.tags.get(TRIAL_ID_TAG))
            self._done = len(self._logged)
        return self._logged

    def on_trial_start(self, trial) -> None:
        self._start.setdefault(_key(trial), time.time())

    def on_trial_result(self, trial, result: dict) -> None:
        tid = _key(trial)
        buf = self._buffers.setdefault(tid, {})
        if not result.get("diverged") and "epoch" in result and "test_error" in result:
            buf[int(result["epoch"])] = {
                "test_error": float(result["test_error"]),
                "train_loss": float(result.get("train_loss", float("nan"))),
                "lr": float(result.get("lr", float("nan"))),
                "seconds": float(result.get("trainer_seconds", 0.0)),
            }
        self._last[tid] = dict(result)

    def on_trial_recover(self, trial) -> None:
        tid = _key(trial)
        self._retries[tid] = self._retries.get(tid, 0) + 1
        reason = self._error_line(trial)
        detail = "" if reason == "unknown error" else f" ({reason})"
        self._say(f"[trial {self._index(trial)}/{self.total_trials}] attempt {self._retries[tid]} failed, retrying{detail}")

    def on_trial_complete(self, trial) -> None:
        self._flush(trial, failed=False)

    def on_trial_error(self, trial) -> None:
        self._flush(trial, failed=True)

    # ---- helpers --------------------------------------------------------------------
    @staticmethod
    def _index_of_key(key: str) -> int:
        """1-based trial number: the key's index + 1 (0 for a name that is not a key)."""
        from mutransfer.sweep.plan import key_index

        try:
            return key_index(key) + 1
        except ValueError:
            return 0

    def _index(self, trial) -> int:
        return self._index_of_key(_key(trial))

    def _error_line(self, trial) -> str:
        from mutransfer.sweep.plan import error_text

        return error_text(trial)

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def _outcome(self, last: dict, failed: bool) -> str:
        from mutransfer.sweep.plan import trial_status

        return trial_status(last, failed, self.budget_epochs)

    def _add_trial_history(self, buf: dict, tid: str, tune_path) -> None:
        """Fill ``buf`` with the epochs the trial kept in its directory (those of earlier attempts included).

        Tune stores a trial at <study dir>/tune/run-<n>/<key> (sweep.proxies), the trial its history in
        <study dir>/trials/<key> (sweep.trial); epochs already reported to this driver win.
        """
        if self.trials_dir is None and not tune_path:
            return
        from mutransfer.sweep.trial import read_trial_history

        trials = Path(self.trials_dir) if self.trials_dir is not None else Path(tune_path).parents[2] / "trials"
        for r in read_trial_history(trials / tid):
            buf.setdefault(r.epoch, {"test_error": r.test_error, "train_loss": r.train_loss, "lr": r.lr, "seconds": r.seconds})

    def _flush(self, trial, failed: bool) -> None:
        tid = _key(trial)
        last = self._last.pop(tid, None) or dict(trial.last_result or {})
        self._write_run(
            tid,
            config=dict(trial.config or {}),
            buf=self._buffers.pop(tid, {}),
            last=last,
            failed=failed,
            error=self._error_line(trial) if failed else None,
            retries=self._retries.pop(tid, int(getattr(trial, "num_failures", 0) or 0) - (1 if failed else 0)),
            start=self._start.pop(tid, None),
            index=self._index(trial),
            tune_path=getattr(trial, "path", None),
        )

    def log_from_files(self, key: str, config: dict, outcome) -> None:
        """Write the child run of a trial from its JSON files (the driver died before on_trial_complete logged it).

        ``config``: its config.json; ``outcome``: its :class:`~mutransfer.sweep.plan.Outcome`;
        the epochs come from its history.json.
        """
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
            index=self._index_of_key(key),
        )

    def _write_run(self, tid, *, config, buf, last, failed, error, retries, start, index, tune_path=None) -> None:
        if tid in self.logged_trial_ids():
            return
        self._add_trial_history(buf, tid, tune_path)
        status = self._outcome(last, failed)
        config = {k: config[k] for k in self.searched if k in config}
        hp = dict(self.fixed, **config)
        wall = float(last.get("time_total_s", 0.0) or 0.0)
        end = time.time()
        start = end - wall if start is None else start
        params = {"trial_id": tid, "K": self.proxy_K, "width": self.proxy_width, **{f"hp.{k}": v for k, v in hp.items()}}
        if "spectral_lr0" in last:
            params["spectral_lr"] = last["spectral_lr0"]
        start_ms = int(start * 1000)
        metrics = []
        for epoch in sorted(buf):
            row = buf[epoch]
            ts = start_ms + int(row["seconds"] * 1000)
            metrics += [
                ("test_error", row["test_error"], ts, epoch),
                ("train_loss", row["train_loss"], ts, epoch),
                ("lr", row["lr"], ts, epoch),
            ]
        final_error = float(last.get("test_error", float("nan"))) if not failed else float("nan")
        epochs_done = int(last.get("epoch", max(buf) if buf else 0) or 0)
        trainer_seconds = float(last.get("trainer_seconds", 0.0) or 0.0)
        now = int(end * 1000)
        metrics += [
            ("final_test_error", final_error, now, epochs_done),
            ("epochs", epochs_done, now, 0),
            ("trainer_seconds", trainer_seconds, now, 0),
            ("wall_seconds", wall, now, 0),
            ("device_seconds", wall * self.devices_per_trial, now, 0),
        ]
        tags = {STATUS_TAG: status, "mutransfer.trial_index": index, "mutransfer.retries": max(0, retries)}
        if failed:
            tags["mutransfer.error"] = error or "unknown error"
        run = self.client.create_run(
            self.experiment_id,
            start_time=start_ms,
            tags={
                PARENT_TAG: self.parent_run_id,
                KIND_TAG: "proxy_trial",
                STUDY_TAG: self.study_name,
                TRIAL_ID_TAG: tid,
                RUN_NAME_TAG: f"trial {index:03d} ({tid})",
            },
        )
        log_batch(self.client, run.info.run_id, metrics=metrics, params=params, tags=tags)
        self.client.set_terminated(run.info.run_id, status="FAILED" if failed else "FINISHED", end_time=now)
        self._logged.add(tid)
        self._done += 1
        shown = ", ".join(f"{k}={_short(v)}" for k, v in config.items())
        result = f"test {final_error:.4g} at epoch {epochs_done}/{self.budget_epochs}" if not failed else (error or "")
        self._say(f"[trial {index}/{self.total_trials}] {status:<9} {result}  {shown}  ({wall:.1f} s)")


def _key(trial) -> str:
    """A Tune trial's key of ours (its configuration's ``trial_key``; Tune's id for a trial without one)."""
    return str((getattr(trial, "config", None) or {}).get("trial_key") or trial.trial_id)


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def as_tune_callback(logger: TrialLogger):
    """Wrap a :class:`TrialLogger` in a ``ray.tune.Callback`` (imports Ray only when needed)."""
    from mutransfer.sweep.tune_callback import MlflowTrialCallback

    return MlflowTrialCallback(logger)


# --------------------------------------------------------------------------- studies table
