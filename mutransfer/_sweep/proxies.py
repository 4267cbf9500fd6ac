"""The proxy phase: the search over proxy models with Ray Tune (TPE/random/grid + ASHA).

Makes ``made.proxies`` (:class:`ProxyResults`): one :class:`TrialRecord` per trial (by
key, ``t0000`` …), the best one, the concurrency. The configurations, the ASHA
decisions and the trials' outcomes go through a :class:`~mutransfer._sweep.plan.SearchPlan`
kept in the search's Optuna journal (``<study dir>/optuna.journal``). Trials are
logged to MLflow as child runs by :class:`~mutransfer._sweep.trial_logger.TrialLogger`
while they run; after the search, any trial that finished before a driver kill and
missed its child run is logged from the journal and its history.json.

Resume never restores Tune's own experiment (``Tuner.restore`` would unpickle files of
the study folder): each session runs a fresh Tune experiment in ``tune/run-<n>/`` over
the plan rebuilt from the JSON files, so finished trials are not run again and
unfinished ones continue from their own checkpoints (loaded with ``weights_only=True``).
Nothing Tune writes under ``tune/`` is ever read. A resumed study whose proxy phase
finished reads the records back from ``state.json`` instead.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mutransfer._study.memory import plan_step
from mutransfer._study.models import merge_hyperparameters
from mutransfer._study.search_space import typed
from mutransfer._study_folder.records import TrialRecord
from mutransfer._study_folder.state import StudyDir
from mutransfer._sweep import progress
from mutransfer._sweep._executors import SearchRun
from mutransfer._sweep.context import ProxyResults, StudyRun, SweepError, pick_best
from mutransfer._sweep.parent_run import WINDOW_TAG
from mutransfer._sweep.plan import SearchPlan, trial_key
from mutransfer._sweep.search import lanes
from mutransfer._sweep.session import NO_EARLY_TARGET, Made, Session
from mutransfer._sweep.trial_logger import TrialLogger
from mutransfer._tracking.runs import SUPERSEDED_TAG, TRIAL_ID_TAG, Tracker

if TYPE_CHECKING:
    from mutransfer._study import Study
    from mutransfer.data._validation import SelectionSplit

#: the MLflow tag of a trial's ladder rung (mutransfer._sweep.ladder; 0: the study's own proxies)
RUNG_TAG = "mutransfer.rung"


@contextlib.contextmanager
def keep_sigint_handler():
    """Restore the SIGINT handler after Tune / Ray Train, which install their own and leave it behind."""

    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread() and previous is not None:
            signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class SearchScope:
    """Which search the phase's machinery trains: the study's own (its proxies: :func:`own_search`) or one nested in
    it (the direct baseline, a ladder's rung: mutransfer._sweep.nested.run_search).

    ``study``: the study at the search's size; ``folder``: where its trials and ``state.json`` are (a resume continues
    it from there); ``run``: the MLflow run its trials are children of; ``nested``: it trains its study's target-sized
    model on the selection split at the target's grid (no warm start, no early target, no injected faults, no API
    callbacks: those are the study's own search's); ``preset``: the configurations it runs instead of sampling,
    without ASHA; ``label``: how the console names it; ``trial_tags``: on each trial's MLflow run."""

    study: Study
    folder: StudyDir
    run: StudyRun
    nested: bool = False
    preset: tuple[Mapping[str, object], ...] | None = None
    label: str = "proxies"
    trial_tags: Mapping[str, str] = field(default_factory=dict)


def own_search(session: Session) -> SearchScope:
    """The study's own search: its proxies, in its folder, under its parent run (a ladder's first rung: rung 0)."""
    return SearchScope(
        session.study, session.study_dir, session.run, trial_tags={RUNG_TAG: "0"} if session.study.ladder else {}
    )


def run_proxies(session: Session, made: Made) -> Made:
    """The proxy phase: run (or continue) the study's own search; ``made`` with its results (``made.proxies``)."""
    found = run_scope(session, own_search(session))
    session.reload_state()  # what the search wrote there
    return replace(made, made_proxies=found)


def run_scope(session: Session, scope: SearchScope) -> ProxyResults:
    """Run (or continue) the search ``scope`` through the study's executor and return its results, kept in its
    folder's ``state.json`` (a search already done there is read back, not run again)."""
    state = scope.folder.read_state()
    if state.get("phase") != "proxies":
        return ProxyResults.from_state(state)
    start = time.perf_counter()
    window, concurrency = session.executor.search_shape(scope.study)
    at_once = lanes(scope.study, concurrency, *session.executor.resources())  # said, and what the report divides by
    plan = _plan(session, scope, state, window)
    logger = _logger(session, scope, plan.total)
    _announce(session, scope, plan, at_once)
    note = session.executor.search_note(window)
    if note:
        session.say(note)
    if not plan.finished():
        try:
            with keep_sigint_handler():
                session.executor.search(_search_run(session, scope, plan, logger, concurrency))
            if not plan.finished():
                raise KeyboardInterrupt("the Tune experiment was interrupted")
            summary = session.executor.search_summary()  # a population executor: how this session's trials trained
            if summary:
                session.say(summary if scope.label == "proxies" else f"{scope.label}: {summary}")
                scope.folder.update_state(search_summary=summary)
        except BaseException:
            logger.close(timeout=INTERRUPTED_WRITES_S)  # before the study marks its open runs ended
            raise
    _drain(session, logger)
    trials = collect_trials(scope.study, plan, logger)
    seconds = float(state.get("proxy_phase_seconds", 0.0)) + time.perf_counter() - start
    results = ProxyResults(trials, next(t for t in trials if t.best), at_once, seconds)
    scope.folder.update_state(phase="target", **results.as_dict())
    return results


#: seconds the end of a search waits on its queued trial writes before it says that it waits
QUIET_DRAIN_S = 2.0
#: seconds an interrupted search gives the trial writes still queued (the rest is logged by --resume)
INTERRUPTED_WRITES_S = 10.0


def _drain(session: Session, logger: TrialLogger) -> None:
    """Wait for the trials' MLflow writes the search queued (a tracking server that was down gets them now)."""
    try:
        logger.drain(timeout=QUIET_DRAIN_S)
    except TimeoutError:  # the store is slow or away: say what the study is waiting for
        session.say(f"mlflow: sending {logger.pending()} queued trial writes to {session.tracking_uri} ...")
    for failure in logger.drain():
        session.say(f"warning: an MLflow write failed ({failure}); the trial's run is written again from its files")
    logger.close()


def _plan(session: Session, scope: SearchScope, state: dict, first_window: int) -> SearchPlan:
    """The search's plan; its window is the first session's (kept in state.json), so a resume samples alike."""

    window = state.get("search_window")
    if not isinstance(window, int) or window < 1:
        window = first_window
        scope.folder.update_state(search_window=window)
    session.tracker.set_tags(
        scope.run.parent_id, {WINDOW_TAG: str(window)}
    )  # kept on the run: a rebuilt state takes it

    # deferred: cycle (importing the strategies package runs its __init__: the ladder's strategy imports this module)
    from mutransfer._sweep.strategies import registry as strategies  # noqa: PLC0415

    return SearchPlan(
        scope.study,
        scope.folder.trials_dir,
        window,
        seeds=[] if scope.nested else strategies.seed_trials(session),  # a warm start seeds the study's own search
        preset=None if scope.preset is None else [dict(c) for c in scope.preset],
        sampler=session.options.sampler,
        pruner=session.options.pruner,
        enqueued=() if scope.nested else session.options.enqueued,
    )


def _search_data(session: Session, scope: SearchScope) -> SelectionSplit:
    """What the search trains and selects on: the selection split on the grid of the models it trains (the proxy's,
    or the target's for a nested search)."""
    return session.selection_data if scope.nested else session.proxy_data


def _logger(session: Session, scope: SearchScope, total: int) -> TrialLogger:
    from mutransfer._sweep.strategies import registry as strategies  # noqa: PLC0415 -- deferred: cycle, as in _plan

    study, at_target, r, data = scope.study, scope.nested, scope.study.resources, _search_data(session, scope)
    uses_gpu = r.gpus_per_trial > 0
    return TrialLogger(
        uri=session.tracking_uri,
        experiment_id=scope.run.experiment_id,
        parent_run_id=scope.run.parent_id,
        study_name=study.name,
        proxy_K=study.target_K if at_target else study.proxy_K,
        proxy_width=(study.target_width or study.operator.width) if at_target else study.operator.width,
        grid=None if study.point_problem or data is None else "x".join(map(str, data.grid_shape)),
        budget_epochs=study.budget.epochs,
        hyperparameters=functools.partial(merge_hyperparameters, study),
        total_trials=total,
        device_kind="gpu" if uses_gpu else "cpu",
        devices_per_trial=r.gpus_per_trial if uses_gpu else r.cpus_per_trial,
        quiet=session.options.quiet,
        trials_dir=str(scope.folder.trials_dir),
        tags=dict(scope.trial_tags),
        key_tags={} if scope.nested else strategies.trial_tags(session),
        background=True,  # Tune never waits on the store: the trials train on through a server outage
    )


def _announce(session: Session, scope: SearchScope, plan: SearchPlan, concurrency: int) -> None:
    study, at_target, r = scope.study, scope.nested, scope.study.resources
    total = plan.total
    if study.budget.grace_period >= study.budget.epochs and scope.preset is None:
        session.say(
            f"note: budget.grace_period {study.budget.grace_period} >= budget.epochs {study.budget.epochs}: ASHA cannot stop trials early"
        )
    if study.search.algorithm == "grid" and study.search.num_trials != total and scope.preset is None:
        session.say(
            f"note: grid search runs all {total} combinations (search.num_trials {study.search.num_trials} does not apply)"
        )
    gpu = f" + {r.gpus_per_trial} GPU" if r.gpus_per_trial > 0 else ""
    session.say(
        f"{scope.label}: {total} trials, {study.model_text(at_target)} "
        f"({'promoted, no ASHA' if scope.preset is not None else study.search.algorithm + ', ASHA'}), "
        f"{study.budget.epochs} epochs each, {concurrency} at a time x {r.cpus_per_trial} CPU{gpu} ...",
    )
    if plan.outcomes or plan.configs:
        session.say(
            f"continuing the search: {len(plan.outcomes)} of {total} trials finished (kept), "
            f"{len(plan.configs) - len(plan.outcomes)} continue from their checkpoints"
        )


def _search_run(
    session: Session, scope: SearchScope, plan: SearchPlan, logger: TrialLogger, concurrency: int
) -> SearchRun:
    """The plan's remaining trials as the executor runs them (on Ray: a fresh Tune experiment, tune/run-<n>)."""
    study, r = scope.study, scope.study.resources
    uses_gpu = r.gpus_per_trial > 0
    device = "cuda" if uses_gpu else "cpu"
    tune_callbacks = []
    if (
        session.early is not NO_EARLY_TARGET and not scope.nested
    ):  # the target's workers start while the last trials run
        from mutransfer._sweep.tune_callback import WhenHandedOut  # noqa: PLC0415 -- deferred: imports Ray

        tune_callbacks.append(WhenHandedOut(plan, session.early.start, session.early.trial_retried))
    # the driver's plan of this search's model: the trials hold it against their device
    memory = (
        plan_step(study, target=True, device=device, channels=session.study_data.channels)
        if scope.nested
        else session.memory_plan(target=False, device=device)
    )
    return SearchRun(
        plan=plan,
        study=study,
        data=_search_data(session, scope),  # validation rows held out, no test rows: nothing a search picks read them
        options={
            "study_dir": str(scope.folder.root),
            "threads": r.cpus_per_trial,
            "device": device,
            "fail_trials": 0 if scope.nested else session.fail_trials,
            "target_size": scope.nested,
            "plan": memory,
        },
        concurrency=concurrency,
        # the Python API's callbacks watch the study's own search (not a ladder rung's or the direct baseline's)
        callbacks=[logger, progress.proxy_callback(session.options, study, scope.label, plan.total, len(plan.outcomes))]
        + ([] if scope.nested else list(session.options.trial_callbacks)),
        max_failures=study.budget.max_failures,
        tune_dir=scope.folder.tune_dir,
        tune_callbacks=tune_callbacks,
    )


def collect_trials(study, plan, logger) -> list[TrialRecord]:
    """Trial records, by key, from the plan's JSON files and the MLflow child runs (the best marked).

    Logs any trial that MLflow missed (it finished just before a driver kill); child runs of
    keys that are not this study's trials (left by an older version) are tagged superseded.
    """

    tracker = Tracker(logger.uri)
    keys = [trial_key(i) for i in range(plan.total)]
    for i, key in enumerate(keys):
        if key not in logger.logged_trial_ids():
            logger.log_from_journal(key, plan.configs[i], plan.outcomes[i])
    every = tracker.children(logger.experiment_id, logger.parent_run_id, "proxy_trial")
    for child in every:
        tid = child.data.tags.get(TRIAL_ID_TAG)
        if tid not in keys and child.data.tags.get(SUPERSEDED_TAG) != "true":
            tracker.set_tags(child.info.run_id, {SUPERSEDED_TAG: "true"})
        if tid not in keys and child.info.status == "RUNNING":  # started by a driver that died; its trial is gone
            tracker.set_status(child.info.run_id, "KILLED")
    children = {  # a key's run: not one set aside when its key was handed out again (mutransfer._sweep._rebuild_journal)
        c.data.tags.get(TRIAL_ID_TAG): c for c in every if c.data.tags.get(SUPERSEDED_TAG) != "true"
    }
    trials = [_record(study, i, key, plan, children.get(key)) for i, key in enumerate(keys)]
    best = pick_best(trials)
    if best is None:
        raise SweepError(all_failed_message(study, plan))
    best.best = True
    return trials


def _record(study, index: int, key: str, plan, child) -> TrialRecord:
    outcome, config = plan.outcomes[index], plan.configs[index]
    m = child.data.metrics if child else {}
    val_error = outcome.value
    config = {k: typed(k, v) for k, v in config.items() if k in study.search_space}
    spectral = outcome.metrics.get("spectral_lr0")
    return TrialRecord(
        trial_id=key,
        index=index + 1,
        status=outcome.status,
        config=config,
        hp=merge_hyperparameters(study, config),
        val_error=None if val_error is None or not math.isfinite(val_error) else float(val_error),
        epochs=int(outcome.metrics.get("epoch", 0) or 0),
        trainer_seconds=float(m.get("trainer_seconds", outcome.metrics.get("trainer_seconds", 0.0)) or 0.0),
        wall_seconds=float(m.get("wall_seconds", 0.0)),
        device_seconds=float(m.get("device_seconds", 0.0)),
        span_seconds=float(m.get("span_seconds", 0.0)),
        spectral_lr=None if spectral is None else float(spectral),
        mlflow_run_id=child.info.run_id if child else None,
    )


#: (pattern in a trial's error, what to try), first match wins
_ADVICE = (
    (r"MUTRANSFER_FAIL_TRIALS", "unset MUTRANSFER_FAIL_TRIALS (it injects failures for testing)"),
    (
        r"out of memory|MemoryError",
        "a smaller batch_size, fewer trials at once (search.max_concurrent) or a smaller proxy (operator.width, proxy_K)",
    ),
    (r"\b(nan|inf)\b|overflow|non-finite", "a lower LR range (search_space.lr)"),
)


def all_failed_message(study, plan) -> str:
    """What to say when no trial produced a result: the first trial's error and what to try."""

    first = plan.outcomes[0]
    config = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in plan.configs[0].items())
    error = first.error or "unknown error"
    advice = next((a for pattern, a in _ADVICE if re.search(pattern, error, re.IGNORECASE)), None)
    if advice is None:
        lr = study.search_space.get("lr")
        lr_text = (
            f" or a lower LR range (search_space.lr is {lr.low:g}..{lr.high:g})"
            if lr is not None and lr.low is not None
            else ""
        )
        advice = (
            f"run that trial alone with `mutransfer train` at its hyperparameters for the full traceback "
            f"(Ray's logs: /tmp/ray/session_latest/logs){lr_text}"
        )
    return (
        f"no proxy trial produced a result: all {plan.total} failed, each after {study.budget.max_failures} "
        f"retries; the first ({trial_key(0)}: {config}) failed with: {error}. Try {advice}; failed trials are final, "
        f"so after the fix start a new study (--name NEW or a new study name): --resume of this one would report the same failures"
    )
