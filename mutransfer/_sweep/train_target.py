"""The target phase: train the target once on the study's executor (on Ray: Ray Train, or one Ray actor for one CPU
worker), logged as an MLflow child run.

Returns ``made`` with its target (``made.target``, the TargetOutcome, and ``made.target_run_id``); with ``search.top_k`` > 1,
mutransfer._sweep.topk trains the N best proxies through :func:`fit_target` instead, the winner kept. A resumed study
reuses its target run and Ray Train resumes from the last reported checkpoint; a target
that had finished (the study was interrupted later, during ``--verify`` or ``--baseline``)
is read back from ``state.json`` and not trained again. A
failure marks the run FAILED and ends the sweep with a SweepError naming the cause;
Ctrl-C marks it KILLED. While it trains, :class:`TargetWatch` shows its epochs on the
console (mutransfer._sweep.progress) and logs them to the target run (step = epoch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from mutransfer._config.executors import ON_RAY
from mutransfer._study_folder.portable import resolved_path, stored_path
from mutransfer._sweep._executors import TargetJob
from mutransfer._sweep._memo import Memo, remembered
from mutransfer._sweep.context import SweepError, TrainedTarget, TransferResult
from mutransfer._sweep.progress import TargetProgress, for_options
from mutransfer._sweep.proxies import keep_sigint_handler
from mutransfer._sweep.session import Made, Session
from mutransfer._sweep.target import PROGRESS_FILE, TargetOutcome, read_progress
from mutransfer._sweep.target_run import RunningTarget, on_one_actor, resolve_use_gpu
from mutransfer._tracking.runs import logged_steps

#: state.json's key of the trained target's outcome (its run: ``target_run_id``, named before it trains)
TARGET_KEY = "target_outcome"


def first_line(exc: BaseException) -> str:
    """The type and last non-empty line of an exception (Ray wraps causes in long messages)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:300]


class TargetWatch:
    """Called by run_target while the target trains: reads the evaluations rank 0 appended to
    ``<storage_dir>/target/progress.jsonl``, shows the latest (epoch, train loss, test error, ETA) and,
    given a ``run_id``, logs them to that MLflow run at most every ``log_interval_s`` seconds.

    Best effort: a failure here is said once and the watch stops; the training is not disturbed.
    """

    log_interval_s = 1.0

    def __init__(self, session: Session, storage_dir, *, run_id: str | None = None, label: str = "target"):
        self.session, self.run_id = session, run_id
        self.path = Path(storage_dir) / "target" / PROGRESS_FILE
        self.offset = self.path.stat().st_size if self.path.exists() else 0  # an earlier session's epochs are not news
        self.display = TargetProgress(session.study.target.epochs, mode=for_options(session.options), label=label)
        self.logged: set[int] = logged_steps(session.tracker.client, run_id) if run_id else set()
        self.pending: list = []
        self.flushed = 0.0
        self.broken = False

    def __call__(self) -> None:
        if self.broken:
            return
        try:
            self._poll()
        except Exception as exc:  # never let the display stop the training
            self.broken = True
            self.session.say(f"note: the target's live progress stopped ({first_line(exc)}); training goes on")

    def _poll(self) -> None:
        records, self.offset = read_progress(self.path, self.offset)
        if records:
            last = records[-1]
            self.display.show(last.epoch, train_loss=last.train_loss, test_error=last.test_error)
            self.pending += records
        if self.run_id and self.pending and time.time() - self.flushed >= self.log_interval_s:
            self.logged.update(self.session.tracker.log_epochs(self.run_id, self.pending, skip=self.logged))
            self.pending, self.flushed = [], time.time()

    def close(self) -> None:
        self.display.close()


def _runs_on(session: Session, early: bool, use_gpu: bool) -> str:
    if session.executor.name not in ON_RAY:
        return "in this process"
    on = "a Ray actor" if on_one_actor(session.study.target.num_workers, use_gpu) else "Ray Train"
    return f"{on}, started while the last proxies trained" if early else on


def _early_outcome(session: Session, early: RunningTarget, job: TargetJob, watch: TargetWatch) -> TargetOutcome:
    """The target trained by the run started early, given its order; if that run fails (its node was lost while it
    waited, and its run's retries found the node not yet marked dead), the target is trained by a run started as
    usual, which resumes from the early run's last checkpoint: an early start saves time, it never fails a study."""
    try:
        early.order(job.hp, job.plan)
        return early.outcome(watch)
    except Exception as exc:  # noqa: BLE001 -- any failure of the early run: the usual run below has its own retries
        session.say(f"note: the target's run started early failed ({first_line(exc)}); a new run trains it")
        return session.executor.inner.target(job, watch)


def train_target(session: Session, made: Made) -> Made:
    """Train the target with the transferred hyperparameters (with ``search.top_k`` > 1 the top-k strategy's
    phase runs instead, mutransfer._sweep.strategies.top_k)."""

    root = session.study_dir.root

    def fit() -> TargetOutcome:
        job = TargetFit(made.transfer, made.transfer.source_key, root, session.state.get("target_run_id"))
        outcome, _ = fit_target(session, job, lambda new: session.update_state(target_run_id=new))
        return outcome

    def load(stored: dict) -> TargetOutcome:
        kept = TargetOutcome.from_dict(stored)
        kept.checkpoint_dir = resolved_path(kept.checkpoint_dir, root)
        return kept

    def dump(outcome: TargetOutcome) -> dict:  # the checkpoint kept relative to the study folder
        return dict(outcome.as_dict(), checkpoint_dir=stored_path(outcome.checkpoint_dir, root))

    # trained once per transferred configuration: a resumed study (interrupted later, e.g. during --verify) reads it
    inputs = {"hp": made.transfer.hp, "source": made.transfer.source_key}
    outcome = remembered(session, Memo(TARGET_KEY, load, dump), inputs, fit)
    return replace(made, trained=TrainedTarget(outcome, session.state["target_run_id"]))


@dataclass(frozen=True)
class TargetFit:
    """One training of the target's model, a value :func:`fit_target` runs: at ``transfer``'s hyperparameters (the
    transferred proxy ``proxy_trial_id``'s), in ``storage_dir/target``, logged to MLflow run ``run_id`` where it still
    exists (else to a new target run, ``tags`` added), named ``label`` on the console. The study's target is one; top-k
    trains one per candidate (mutransfer._sweep.topk)."""

    transfer: TransferResult
    proxy_trial_id: str
    storage_dir: Path
    run_id: str | None
    tags: Mapping[str, str] = field(default_factory=dict)
    label: str = "target"


def fit_target(session: Session, fit: TargetFit, remember_run: Callable[[str], None]) -> tuple[TargetOutcome, str]:
    """Train ``fit`` on the study's executor; a new MLflow run is handed to ``remember_run`` before training starts.
    Returns (the outcome, the run's id); a failure raises SweepError, Ctrl-C KeyboardInterrupt."""
    transfer, proxy_trial_id, storage_dir, run_id, tags, label = (
        fit.transfer, fit.proxy_trial_id, fit.storage_dir, fit.run_id, fit.tags, fit.label,
    )  # fmt: skip
    study, tracker = session.study, session.tracker
    hp, record = transfer.hp, transfer.record
    use_gpu = resolve_use_gpu(study.target.use_gpu, session.executor.resources()[1])
    start_ms = int(time.time() * 1000)
    if run_id and tracker.run_exists(run_id):
        tracker.set_status(run_id, "RUNNING")
    else:
        params = {
            "K": study.target_K,
            "width": study.target_width,
            **{f"hp.{k}": v for k, v in hp.items()},
            "epochs": study.target.epochs,
            "num_workers": study.target.num_workers,
            "use_gpu": use_gpu,
            "transfer.lr_factor": record.get("lr_factor"),
            "transfer.init_variance_factor": record.get("init_variance_factor"),
            "proxy_trial_id": proxy_trial_id,
        }
        run_id = tracker.create_target_run(session.experiment_id, session.parent_id, study.name, params)
        if tags:
            tracker.set_tags(run_id, dict(tags))
        remember_run(run_id)
    plan = session.memory_plan(target=True, device="cuda" if use_gpu else "cpu", workers=study.target.num_workers)
    watch = TargetWatch(session, storage_dir, run_id=run_id, label=label)
    early = session.early.take(storage_dir)  # ordered right below
    session.say(
        f"{label}: {study.model_text(True)}, {study.target.epochs} epochs, {study.target.num_workers} worker(s) x "
        f"{'1 GPU' if use_gpu else f'{study.target.cpus_per_worker} CPU'} ({_runs_on(session, early is not None, use_gpu)}) ...",
    )
    try:
        with keep_sigint_handler():
            job = TargetJob(study, hp, session.data, Path(storage_dir), use_gpu, study.budget.max_failures, plan)
            run = None if early is None else (lambda: _early_outcome(session, early, job, watch))
            outcome = session.executor.target(job, watch, run=run)
    except KeyboardInterrupt:
        tracker.set_tags(run_id, {"mutransfer.status": "interrupted"})
        tracker.set_status(run_id, "KILLED")
        raise
    except Exception as exc:
        tracker.set_tags(run_id, {"mutransfer.status": "failed", "mutransfer.error": first_line(exc)})
        tracker.set_status(run_id, "FAILED")
        raise SweepError(
            f"{label} training failed after {study.budget.max_failures} retries ({first_line(exc)}); "
            f"Ray's logs are in /tmp/ray/session_latest/logs; fix the cause and run again with --resume"
        ) from exc
    finally:
        watch.close()
    tracker.finish_target(run_id, outcome, start_ms=start_ms, logged_epochs=watch.logged)
    return outcome, run_id
