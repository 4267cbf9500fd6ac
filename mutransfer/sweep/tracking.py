"""MLflow tracking of a study: one parent run, a child run per proxy trial, a child run for the target.

Everything is logged from the driver with :class:`mlflow.tracking.MlflowClient`
(explicit run ids, no fluent active-run state):

- the **parent run** (tag ``mutransfer.kind = study``) is created when the study
  starts and its id is stored in the study directory, so ``--resume`` reuses it;
- **proxy trial runs** (``mutransfer.kind = proxy_trial``) are written by
  :class:`TrialLogger`, a Tune ``Callback``: it buffers each trial's per-epoch
  results in ``on_trial_result`` and, when the trial ends
  (``on_trial_complete`` / ``on_trial_error``), creates the child run, writes
  params, all metrics and tags in ONE ``log_batch`` (chunked at MLflow's 1000
  metrics per call) and terminates it. A run is never left RUNNING, and a
  trial id that already has a child run is skipped (idempotent on resume).
  MLflowLoggerCallback (one synchronous call per reported field) is avoided: it
  made small sweeps 2.5x slower.
- the **target run** (``mutransfer.kind = target``) is created before Ray Train
  starts and terminated after it (FAILED if training raised).

Trial outcome tags: ``mutransfer.status`` = completed | pruned (stopped by ASHA) |
diverged | failed; MLflow status FINISHED, or FAILED for failed trials.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from mutransfer.errors import UserInputError

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

KIND_TAG = "mutransfer.kind"
STUDY_TAG = "mutransfer.study"
TRIAL_ID_TAG = "mutransfer.trial_id"
STATUS_TAG = "mutransfer.status"
PARENT_TAG = "mlflow.parentRunId"
RUN_NAME_TAG = "mlflow.runName"
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100


def default_tracking_uri(cwd: str | os.PathLike | None = None) -> str:
    """sqlite:///<cwd>/mlflow.db as an absolute URI (so a resumed study finds the same store)."""
    return f"sqlite:///{Path(cwd or os.getcwd()).absolute() / 'mlflow.db'}"


def resolve_tracking_uri(uri: str | None) -> str:
    """None → sqlite:///mlflow.db in the cwd; relative sqlite paths are made absolute; others pass through."""
    if uri is None:
        return default_tracking_uri()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri[len('sqlite:///'):]).absolute()}"
    return uri


def sqlite_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):])
    return None


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _param_value(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text[:6000]


def log_batch(client, run_id: str, *, metrics=(), params: dict | None = None, tags: dict | None = None) -> None:
    """One log_batch call per 1000 metrics / 100 params (MLflow's limits)."""
    from mlflow.entities import Metric, Param, RunTag

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
        try:
            return self.client.create_experiment(name)
        except Exception:  # created concurrently
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def create_parent(self, experiment_id: str, study, *, params: dict, tags: dict, files: dict[str, str]) -> str:
        run = self.client.create_run(
            experiment_id,
            tags={KIND_TAG: "study", STUDY_TAG: study.name, RUN_NAME_TAG: study.name, STATUS_TAG: "running", **tags},
        )
        run_id = run.info.run_id
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

    def run_exists(self, run_id: str) -> bool:
        try:
            self.client.get_run(run_id)
            return True
        except Exception:
            return False

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
        run = self.client.create_run(
            experiment_id,
            tags={
                PARENT_TAG: parent_run_id,
                KIND_TAG: "target",
                STUDY_TAG: study_name,
                RUN_NAME_TAG: f"{study_name} target",
                STATUS_TAG: "running",
            },
        )
        log_batch(self.client, run.info.run_id, params=params)
        return run.info.run_id

    def finish_target(self, run_id: str, outcome, *, start_ms: int) -> None:
        metrics = []
        for epoch, test_error, train_loss, lr, seconds in outcome.history:
            ts = start_ms + int(seconds * 1000)
            metrics += [
                ("test_error", test_error, ts, epoch),
                ("train_loss", train_loss, ts, epoch),
                ("lr", lr, ts, epoch),
            ]
        now = _now_ms()
        metrics += [
            ("final_test_error", outcome.test_error, now, 0),
            ("trainer_seconds", outcome.trainer_seconds, now, 0),
            ("wall_seconds", outcome.wall_seconds, now, 0),
            ("device_seconds", outcome.device_seconds, now, 0),
        ]
        params = {"spectral_lr": outcome.spectral_lr0, "per_worker_batch": outcome.per_worker_batch}
        log_batch(self.client, run_id, metrics=metrics, params=params, tags={STATUS_TAG: outcome.status})
        if outcome.checkpoint_dir and Path(outcome.checkpoint_dir).is_dir():
            self.client.log_artifacts(run_id, outcome.checkpoint_dir, "checkpoint")
        self.set_status(run_id, "FINISHED")


class TrialLogger:
    """Tune Callback that writes one MLflow child run per proxy trial (see the module docstring).

    Picklable (Tune stores the RunConfig, callbacks included, for Tuner.restore):
    the MLflow client and the buffers are rebuilt after unpickling.
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
        self._start.setdefault(trial.trial_id, time.time())

    def on_trial_result(self, trial, result: dict) -> None:
        tid = trial.trial_id
        buf = self._buffers.setdefault(tid, {})
        history = result.get("history_before")
        if history:
            for epoch, test_error, train_loss, lr, seconds in json.loads(history):
                buf.setdefault(int(epoch), {"test_error": test_error, "train_loss": train_loss, "lr": lr, "seconds": seconds})
        if not result.get("diverged") and "epoch" in result and "test_error" in result:
            buf[int(result["epoch"])] = {
                "test_error": float(result["test_error"]),
                "train_loss": float(result.get("train_loss", float("nan"))),
                "lr": float(result.get("lr", float("nan"))),
                "seconds": float(result.get("trainer_seconds", 0.0)),
            }
        self._last[tid] = dict(result)

    def on_trial_recover(self, trial) -> None:
        self._retries[trial.trial_id] = self._retries.get(trial.trial_id, 0) + 1
        reason = self._error_line(trial)
        detail = "" if reason == "unknown error" else f" ({reason})"
        self._say(f"[trial {self._index(trial)}/{self.total_trials}] attempt {self._retries[trial.trial_id]} failed, retrying{detail}")

    def on_trial_complete(self, trial) -> None:
        self._flush(trial, failed=False)

    def on_trial_error(self, trial) -> None:
        self._flush(trial, failed=True)

    # ---- helpers --------------------------------------------------------------------
    @staticmethod
    def _index_of_tag(experiment_tag) -> int:
        """1-based trial number: Tune's experiment tag starts with the searcher's trial counter."""
        try:
            return int(str(experiment_tag).split("_", 1)[0])
        except (TypeError, ValueError):
            return 0

    def _index(self, trial) -> int:
        return self._index_of_tag(getattr(trial, "experiment_tag", None))

    @staticmethod
    def _error_text(err) -> str:
        if err is None:
            return "unknown error"
        lines = [l.strip() for l in str(err).splitlines() if l.strip()]
        # the last line of a traceback names the exception
        return (lines[-1] if lines else type(err).__name__)[:500]

    def _error_line(self, trial) -> str:
        try:
            err = trial.get_error()
        except Exception:
            err = None
        return self._error_text(err)

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def _outcome(self, last: dict, failed: bool) -> str:
        if failed:
            return "failed"
        if last.get("diverged"):
            return "diverged"
        if int(last.get("epoch", 0) or 0) < self.budget_epochs:
            return "pruned"
        return "completed"

    def _flush(self, trial, failed: bool) -> None:
        tid = trial.trial_id
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
        )

    def log_from_result(self, trial_id: str, result) -> None:
        """Write the child run of a trial from its Tune ``Result`` (used when the driver died before on_trial_complete)."""
        saved, self._buffers = self._buffers, {}
        try:
            class _T:  # the two attributes on_trial_result reads
                pass

            t = _T()
            t.trial_id = trial_id
            frame = result.metrics_dataframe
            if frame is not None:
                for row in frame.to_dict("records"):
                    self.on_trial_result(t, {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))})
            buf = self._buffers.pop(trial_id, {})
            last = dict(result.metrics or {})
        finally:
            self._buffers = saved
        failed = result.error is not None
        self._write_run(
            trial_id,
            config=dict(result.config or {}),
            buf=buf,
            last=last,
            failed=failed,
            error=self._error_text(result.error) if failed else None,
            retries=0,
            start=None,
            index=self._index_of_tag(last.get("experiment_tag")),
        )

    def _write_run(self, tid, *, config, buf, last, failed, error, retries, start, index) -> None:
        if tid in self.logged_trial_ids():
            return
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


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def as_tune_callback(logger: TrialLogger):
    """Wrap a :class:`TrialLogger` in a ``ray.tune.Callback`` (imports Ray only when needed)."""
    from mutransfer.sweep.tune_callback import MlflowTrialCallback

    return MlflowTrialCallback(logger)


# --------------------------------------------------------------------------- studies table


def list_studies(uri: str) -> list[dict]:
    """One row per study parent run in the store, newest first."""
    path = sqlite_path(uri)
    if path is not None and not path.exists():
        raise UserInputError(
            f"tracking store {path} not found; run `mutransfer sweep` in this directory first or pass --tracking-uri"
        )
    client = _client(uri)
    experiments = client.search_experiments()
    if not experiments:
        return []
    ids = [e.experiment_id for e in experiments]
    names = {e.experiment_id: e.name for e in experiments}
    runs = client.search_runs(ids, filter_string=f"tags.`{KIND_TAG}` = 'study'", max_results=1000, order_by=["attributes.start_time DESC"])
    rows = []
    for run in runs:
        p, m, t = run.data.params, run.data.metrics, run.data.tags
        rows.append(
            {
                "study": t.get(STUDY_TAG, run.info.run_name),
                "status": t.get(STATUS_TAG, run.info.status.lower()),
                "problem": p.get("problem"),
                "proxy_K": _int(p.get("proxy_K")),
                "target_K": _int(p.get("target_K")),
                "operator": p.get("operator") or "fno",
                "proxy_width": _int(p.get("proxy_width", p.get("width"))),
                "target_width": _int(p.get("target_width")),
                "best_proxy_error": m.get("best_proxy_test_error"),
                "target_error": m.get("target_test_error"),
                "proxy_device_seconds": m.get("proxy_device_seconds"),
                "target_device_seconds": m.get("target_device_seconds"),
                "device": p.get("device_kind") or t.get("mutransfer.device_kind"),
                "trials": _int(m.get("trials_total")),
                "experiment": names.get(run.info.experiment_id),
                "experiment_id": run.info.experiment_id,
                "run_id": run.info.run_id,
                "started": run.info.start_time,
            }
        )
    return rows


def _int(value) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def format_studies(rows: list[dict]) -> str:
    if not rows:
        return "no studies recorded yet; run `mutransfer sweep`"

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    def widths_text(r):
        w0, w1 = r.get("proxy_width"), r.get("target_width")
        if w0 is None:
            return "-"
        return str(w0) if w1 in (None, w0) else f"{w0}->{w1}"

    table = [("study", "status", "problem", "proxy K", "target K", "operator", "width", "best proxy err", "target err", "cost proxy/target (device-s)")]
    for r in rows:
        cost = "-"
        if r["proxy_device_seconds"] is not None or r["target_device_seconds"] is not None:
            cost = f"{num(r['proxy_device_seconds'], '.0f')} / {num(r['target_device_seconds'], '.0f')} {r.get('device') or ''}".rstrip()
        table.append(
            (
                str(r["study"]),
                str(r["status"]),
                str(r["problem"] or "-"),
                num(r["proxy_K"], "d"),
                num(r["target_K"], "d"),
                str(r.get("operator") or "fno"),
                widths_text(r),
                num(r["best_proxy_error"], ".4g"),
                num(r["target_error"], ".4g"),
                cost,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


# --------------------------------------------------------------------------- UI


def ui_command(uri: str, *, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """The argument list that starts the MLflow UI for ``uri`` (no shell)."""
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]


def ui_link(host: str, port: int, experiment_id: str | None) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    base = f"http://{shown}:{port}/"
    return f"{base}#/experiments/{experiment_id}/runs" if experiment_id is not None else base


def latest_study_experiment(uri: str, experiment: str | None = None) -> str | None:
    """Experiment id to link to: ``experiment`` by name, else that of the newest study run."""
    path = sqlite_path(uri)
    if path is not None and not path.exists():
        return None
    client = _client(uri)
    if experiment is not None:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            raise UserInputError(f"--experiment {experiment!r}: no such MLflow experiment in {uri}; check the name")
        return exp.experiment_id
    rows = list_studies(uri)
    return rows[0]["experiment_id"] if rows else None


def parent_summary(uri: str, run_id: str) -> dict[str, Any]:
    run = _client(uri).get_run(run_id)
    return {"status": run.info.status, "params": run.data.params, "metrics": run.data.metrics, "tags": run.data.tags}
