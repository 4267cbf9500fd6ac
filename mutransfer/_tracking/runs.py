"""MLflow tracking of a study: one parent run, a child run per proxy trial, a child run for the target.

Everything is logged from the driver with :class:`mlflow.tracking.MlflowClient`
(explicit run ids, no fluent active-run state):

- the **parent run** (tag ``mutransfer.kind = study``) is created when the study
  starts and its id is stored in the study directory, so ``--resume`` reuses it;
- **proxy trial runs** (``mutransfer.kind = proxy_trial``) are written by
  :class:`~mutransfer._sweep.trial_logger.TrialLogger`, a Tune ``Callback``: the
  child run is created (RUNNING, tag ``mutransfer.status = running``) when the
  trial starts, or reused if the trial already has an unfinished one (a resumed
  study); its per-epoch metrics (step = epoch) are logged in one ``log_batch``
  at most every second while it runs; when the trial ends the rest of its
  epochs, the final metrics and tags go in one more ``log_batch`` and the run is
  terminated. A trial whose child run is finished is skipped (idempotent on
  resume). MLflowLoggerCallback (one synchronous call per reported field) is
  avoided: it made small sweeps 2.5x slower.
- the **target run** (``mutransfer.kind = target``) is created before the target's
  workers start, gets its per-epoch metrics while it trains (the driver reads them from
  the target's ``progress.jsonl``) and is terminated after it (FAILED if training
  raised). An interrupted or failed study ends its RUNNING children with its own status.

Trial outcome tags: ``mutransfer.status`` = completed | pruned (stopped by ASHA) |
diverged | failed; MLflow status FINISHED, or FAILED for failed trials.

This module holds the run lifecycle (tags, URIs, :func:`log_batch`, :class:`Tracker`);
the trial logger is mutransfer._sweep.trial_logger, and the ``studies`` table and the
``ui`` helpers are mutransfer._tracking.listings.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import socket
import time
from pathlib import Path

from mutransfer._tracking._sqlite_file import check_sqlite_file, full_store_error, sqlite_path
from mutransfer.errors import UserInputError

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

KIND_TAG = "mutransfer.kind"
STUDY_TAG = "mutransfer.study"
TRIAL_ID_TAG = "mutransfer.trial_id"
STATUS_TAG = "mutransfer.status"
#: a trial run's error (a failed one's); a proxy-trial run whose key was handed out again ("true": skipped by every
#: reader, mutransfer._sweep._rebuild_journal)
ERROR_TAG, SUPERSEDED_TAG = "mutransfer.error", "mutransfer.superseded"
PARENT_TAG = "mlflow.parentRunId"
RUN_NAME_TAG = "mlflow.runName"
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
#: experiment tag: its artifact location relative to the sqlite store's folder (mutransfer._study_folder.portable)
ARTIFACT_TAG = "mutransfer.artifact_location"


def default_tracking_uri(cwd: str | os.PathLike | None = None) -> str:
    """sqlite:///<cwd>/mlflow.db as an absolute URI (so a resumed study finds the same store)."""
    return f"sqlite:///{Path(cwd or os.getcwd()).absolute() / 'mlflow.db'}"


def resolve_tracking_uri(uri: str | None) -> str:
    """None → sqlite:///mlflow.db in the cwd; relative sqlite paths are made absolute; others pass through.

    A sqlite URI naming a directory, or a file that is not an SQLite database, is refused in one line
    (:func:`check_sqlite_file`)."""
    if uri is None:
        resolved = default_tracking_uri()
    else:
        _check_tracking_uri(uri)
        resolved = uri
        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            resolved = f"sqlite:///{Path(uri[len('sqlite:///') :]).absolute()}"
    check_sqlite_file(resolved)
    return resolved


#: seconds to open a connection to a server (TCP connect) before anything is asked of it
CONNECT_SECONDS = 5.0


def check_tcp(host: str, port: int, what: str, fix: str) -> None:
    """A one-line UserInputError unless ``host:port`` accepts a TCP connection within :data:`CONNECT_SECONDS`."""
    open_tcp(host, port, what, fix).close()


def open_tcp(host: str, port: int, what: str, fix: str) -> socket.socket:
    """A TCP connection to ``host:port`` (timeout :data:`CONNECT_SECONDS`), or a one-line UserInputError saying why
    not: ``what`` names the endpoint, ``fix`` what to do."""
    try:
        return socket.create_connection((host, port), timeout=CONNECT_SECONDS)
    except socket.gaierror:
        raise UserInputError(f"{what}: host {host} is not known (DNS); {fix}") from None
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise UserInputError(f"{what}: {host}:{port} {reason}; {fix}") from None


#: URI schemes of MLflow's tracking stores (a plain path is a file store)
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")


def _check_tracking_uri(uri: str) -> None:
    """Refuse an empty URI or an unknown scheme before MLflow is asked (its errors are tracebacks)."""

    scheme = uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else None
    if not uri.strip() or (scheme is not None and scheme not in TRACKING_SCHEMES):
        raise UserInputError(
            f"tracking URI {uri!r}: use sqlite:///PATH.db or a {'/'.join(TRACKING_SCHEMES[2:4])} server "
            f"URL (schemes: {', '.join(TRACKING_SCHEMES)})"
        )
    if uri.startswith("-"):
        raise UserInputError(f"tracking URI {uri}: looks like a flag, not a URI; give one, e.g. sqlite:///mlflow.db")
    if scheme in (None, "file"):  # MLflow 3 refuses to write a folder store (an exception per call, not a message)
        folder = uri[len("file://") :] if scheme == "file" else uri
        raise UserInputError(
            f"tracking URI {uri}: a folder store, which MLflow no longer writes; use a database file, e.g. "
            f"sqlite:///{Path(folder) / 'mlflow.db'}"
        )
    if uri.rstrip("/") in ("sqlite:///:memory:", "sqlite://", "sqlite:"):
        raise UserInputError(
            f"tracking URI {uri}: an in-memory store ends with the command and keeps nothing; name a file, "
            "e.g. sqlite:///mlflow.db"
        )


def experiment_artifact_location(uri: str, name: str) -> tuple[str, dict] | None:
    """(artifact location, tags) for a new experiment in a sqlite store: ``mlruns/<name>`` beside the store."""

    path = sqlite_path(uri)
    if path is None:
        return None
    relative = f"mlruns/{artifact_folder(name)}"
    return str(path.absolute().parent / relative), {ARTIFACT_TAG: relative}


def artifact_folder(name: str) -> str:
    """The folder name of experiment ``name``'s artifacts: the name itself where it is letters, digits, ``.``, ``_``,
    ``-`` (and not dots alone); else those characters kept, the rest ``_``, and a digest of the name added. Never a
    ``/``, ``..`` or ``%``: MLflow URL-decodes an artifact location, so ``../../x`` quoted as ``..%2F..%2Fx`` wrote the
    study's model outside the store's folder."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if slug == name and slug.strip("."):
        return name
    return f"{slug.strip('.')[:100] or 'experiment'}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def _client(uri: str):
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a store is opened

    path = sqlite_path(uri)
    if path is None:
        return MlflowClient(tracking_uri=uri)
    try:
        return _sqlite_client(uri, path)
    except Exception as exc:
        full = full_store_error(path, exc)  # a full disk: the CLI's one line naming the store
        if full is not None:
            raise full from None
        raise


def _sqlite_client(uri: str, path: Path):
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 -- deferred: as in _client

    if _has_tables(path):
        return MlflowClient(tracking_uri=uri)
    # MLflow creates and migrates a new sqlite store's tables when it first opens it; two processes doing that at
    # once fail ("table ... already exists", alembic's "expected to match one row"). The first to take the lock
    # creates them; the others find them made.
    from filelock import FileLock  # noqa: PLC0415 -- deferred: only for a store not created yet

    with FileLock(f"{path}.lock", timeout=600):
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)
        _write_ahead(path)
    return client


def _write_ahead(path: Path) -> None:
    """Make a new sqlite store's file WAL mode (a setting of the file, kept once made): readers do not block the
    writer and several drivers logging at once wait less on each other (MLflow's busy timeout is 20 s). Only
    when the store is made: switching an older one needs it to itself. Best effort (an error leaves the mode)."""
    import sqlite3  # noqa: PLC0415 -- deferred: only when a store is opened

    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error:
        pass


def _has_tables(path: Path) -> bool:
    """Whether the sqlite file at ``path`` holds MLflow's tables at their newest revision. The alembic_version row
    is written after the first migration and updated after each one, so a row alone can be a store half-way
    through its migrations (a client opened then migrates it too: "table _alembic_tmp_metrics already exists")."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    import sqlite3  # noqa: PLC0415 -- deferred: only when a store is opened

    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as db:
            row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == _newest_schema_revision()


@functools.cache
def _newest_schema_revision() -> str | None:
    """The alembic head of the installed MLflow's tracking schema (None where MLflow no longer tells it: then no
    store counts as made and its opening always takes the creation lock, which is safe, only slower)."""
    try:
        from mlflow.store.db.utils import _get_latest_schema_revision  # noqa: PLC0415 -- deferred: mlflow (~1 s)

        return str(_get_latest_schema_revision())
    except Exception:
        return None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _param_value(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text[:6000]


def create_run(client, experiment_id: str, tags: dict, *, start_time: int | None = None) -> str:
    """Create a run with ``tags`` and return its id. Tag values are made strings here: a sqlite store takes an int,
    a tracking server (the REST store) refuses it (``bad argument type`` in the protobuf)."""
    strings = {k: _param_value(v) for k, v in tags.items()}
    return client.create_run(experiment_id, start_time=start_time, tags=strings).info.run_id


def log_batch(client, run_id: str, *, metrics=(), params: dict | None = None, tags: dict | None = None) -> None:
    """One log_batch call per 1000 metrics / 100 params (MLflow's limits)."""
    from mlflow.entities import Metric, Param, RunTag  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a store is written

    metric_list = [Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in metrics if _finite(v)]
    param_list = [Param(k, _param_value(v)) for k, v in (params or {}).items()]
    tag_list = [RunTag(k, _param_value(v)) for k, v in (tags or {}).items()]
    first = True
    while first or metric_list or param_list:
        client.log_batch(
            run_id,
            metrics=metric_list[:MAX_METRICS_PER_BATCH],
            params=param_list[:MAX_PARAMS_PER_BATCH],
            tags=tag_list if first else [],
        )
        metric_list, param_list = metric_list[MAX_METRICS_PER_BATCH:], param_list[MAX_PARAMS_PER_BATCH:]
        first = False


#: the keys :func:`epoch_metrics` logs at every epoch (step = epoch); a run's other metrics are logged once
EPOCH_METRIC_KEYS = ("test_error", "val_error", "train_loss", "lr")


def epoch_metrics(epoch: int, *, test_error=None, val_error=None, train_loss, lr, timestamp_ms: int) -> list[tuple]:
    """The per-epoch metrics of a trial or the target as (key, value, timestamp ms, step = epoch) tuples.

    A proxy trial has a ``val_error`` (its held-out split is the validation split), the target a ``test_error``
    (and a ``val_error`` when the study has a validation split).
    """
    errors = [(k, v) for k, v in (("test_error", test_error), ("val_error", val_error)) if v is not None]
    return [
        *[(k, v, timestamp_ms, epoch) for k, v in errors],
        ("train_loss", train_loss, timestamp_ms, epoch),
        ("lr", lr, timestamp_ms, epoch),
    ]


def logged_steps(client, run_id: str, key: str = "test_error") -> set[int]:
    """The steps (epochs) of ``key`` already in a run's metric history."""
    return {m.step for m in client.get_metric_history(run_id, key)}


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


class Tracker:
    """MLflow store of one study (parent run and target run)."""

    def __init__(self, uri: str):
        self.uri = uri
        self._client = None

    @property
    def client(self):
        if self._client is None:
            self._client = _client(self.uri)
        return self._client

    def ensure_experiment(self, name: str) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        # a sqlite store keeps its artifacts beside it (mlruns/<name>), so the folder moves as one
        located = experiment_artifact_location(self.uri, name)
        try:
            if located is None:
                return self.client.create_experiment(name)
            return self.client.create_experiment(name, artifact_location=located[0], tags=located[1])
        except Exception:  # created concurrently
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def create_parent(self, experiment_id: str, study, *, params: dict, tags: dict, files: dict[str, str]) -> str:
        run_id = create_run(
            self.client,
            experiment_id,
            {KIND_TAG: "study", STUDY_TAG: study.name, RUN_NAME_TAG: study.name, STATUS_TAG: "running", **tags},
        )
        log_batch(self.client, run_id, params=params)
        for name, text in files.items():
            self.client.log_text(run_id, text, name)
        return run_id

    def set_status(self, run_id: str, status: str) -> None:
        """RUNNING (resumed) or a terminal status: FINISHED, FAILED, KILLED."""
        if status == "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        else:
            self.client.set_terminated(run_id, status=status, end_time=_now_ms())

    def set_tags(self, run_id: str, tags: dict) -> None:
        log_batch(self.client, run_id, tags=tags)

    def reopen_experiment(self, experiment_id: str) -> bool:
        """Whether the store holds an experiment of this id; a deleted one is restored (as :meth:`ensure_experiment`
        restores one by name). A failure to ask is raised."""
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 -- deferred: mlflow (~1 s)

        try:
            exp = self.client.get_experiment(experiment_id)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return False
            raise
        if exp.lifecycle_stage == "deleted":
            self.client.restore_experiment(experiment_id)
        return True

    def run_exists(self, run_id: str) -> bool:
        """Whether the store holds run ``run_id`` (a deleted run counts). Any failure to ask (a locked store, a server
        down or erring) is raised, never taken for a missing run: that would make a second run beside the first."""
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 -- deferred: mlflow (~1 s)

        try:
            self.client.get_run(run_id)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return False
            raise
        return True

    def children(self, experiment_id: str, parent_run_id: str, kind: str | None = None) -> list:
        query = f"tags.`{PARENT_TAG}` = '{parent_run_id}'"
        if kind:
            query += f" and tags.`{KIND_TAG}` = '{kind}'"
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], filter_string=query, max_results=1000, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def create_target_run(self, experiment_id: str, parent_run_id: str, study_name: str, params: dict) -> str:
        run_id = create_run(
            self.client,
            experiment_id,
            {
                PARENT_TAG: parent_run_id,
                KIND_TAG: "target",
                STUDY_TAG: study_name,
                RUN_NAME_TAG: f"{study_name} target",
                STATUS_TAG: "running",
            },
        )
        log_batch(self.client, run_id, params=params)
        return run_id

    def end_open_children(self, parent_run_id: str, status: str) -> None:
        """Give every child run still RUNNING (a proxy trial the driver was watching) the parent's end ``status``."""
        experiment_id = self.client.get_run(parent_run_id).info.experiment_id
        for run in self.children(experiment_id, parent_run_id):
            if run.info.status == "RUNNING":
                self.set_status(run.info.run_id, status)

    def log_epochs(self, run_id: str, records, *, skip: set[int] = frozenset()) -> list[int]:
        """Log the per-epoch metrics of ``records`` (training.EpochRecord) whose epoch is not in ``skip``,
        stamped now, in one call (the target's live metrics); returns the epochs logged."""
        now = _now_ms()
        fresh = [r for r in records if r.epoch not in skip]
        metrics = [
            m
            for r in fresh
            for m in epoch_metrics(
                r.epoch,
                test_error=r.test_error,
                val_error=r.val_error,
                train_loss=r.train_loss,
                lr=r.lr,
                timestamp_ms=now,
            )
        ]
        if metrics:
            log_batch(self.client, run_id, metrics=metrics)
        return [r.epoch for r in fresh]

    def finish_target(self, run_id: str, outcome, *, start_ms: int, logged_epochs: set[int] = frozenset()) -> None:
        """Final metrics, params and status of the target run; epochs in ``logged_epochs`` were logged live."""
        metrics = []
        for r in outcome.history:  # training.EpochRecord
            if r.epoch not in logged_epochs:
                metrics += epoch_metrics(
                    r.epoch,
                    test_error=r.test_error,
                    val_error=r.val_error,
                    train_loss=r.train_loss,
                    lr=r.lr,
                    timestamp_ms=start_ms + int(r.seconds * 1000),
                )
        now = _now_ms()
        metrics += [
            ("final_test_error", outcome.test_error, now, 0),
            *(
                [("final_val_error", outcome.val_error, now, 0)]
                if getattr(outcome, "val_error", None) is not None
                else []
            ),
            ("trainer_seconds", outcome.trainer_seconds, now, 0),
            ("wall_seconds", outcome.wall_seconds, now, 0),
            ("device_seconds", outcome.device_seconds, now, 0),
        ]
        params = {"spectral_lr": outcome.spectral_lr0, "per_worker_batch": outcome.per_worker_batch}
        log_batch(self.client, run_id, metrics=metrics, params=params, tags={STATUS_TAG: outcome.status})
        if outcome.checkpoint_dir and Path(outcome.checkpoint_dir).is_dir():
            self.client.log_artifacts(run_id, outcome.checkpoint_dir, "checkpoint")
        self.set_status(run_id, "FINISHED")
