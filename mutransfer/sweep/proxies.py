"""The proxy phase: the search over proxy models with Ray Tune (TPE/random/grid + ASHA).

Sets ``ctx.proxies`` (:class:`ProxyResults`): one :class:`TrialRecord` per trial,
the best one, the concurrency. Trials are logged to MLflow as child runs by
:class:`~mutransfer.sweep.tracking.TrialLogger` while they run; after the search,
any trial that finished before a driver kill and missed its child run is logged
from Tune's result. A resumed study whose proxy phase finished reads the records
back from ``state.json`` instead.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path

from mutransfer.sweep.context import ProxyResults, SweepContext, SweepError, TrialRecord, pick_best

#: how often (s) Tune snapshots the experiment state; small, so a killed driver loses little
TUNE_CHECKPOINT_PERIOD_S = "1"


@contextlib.contextmanager
def keep_sigint_handler():
    """Restore the SIGINT handler after Tune / Ray Train, which install their own and leave it behind."""
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread() and previous is not None:
            signal.signal(signal.SIGINT, previous)


def run_proxies(ctx: SweepContext) -> None:
    """Run (or restore) the Tune experiment and set ``ctx.proxies``."""
    if ctx.state.get("phase") != "proxies":
        ctx.proxies = ProxyResults.from_state(ctx.state)
        return
    start = time.perf_counter()
    tuner, logger, concurrency = _tuner(ctx)
    with keep_sigint_handler():
        grid = tuner.fit()
    from mutransfer.sweep.search import total_trials

    if grid.num_terminated + grid.num_errors < len(grid) or len(grid) < total_trials(ctx.study):
        raise KeyboardInterrupt("the Tune experiment was interrupted")
    trials = collect_trials(ctx.study, grid, logger)
    seconds = float(ctx.state.get("proxy_phase_seconds", 0.0)) + time.perf_counter() - start
    ctx.proxies = ProxyResults(trials, next(t for t in trials if t.best), concurrency, seconds)
    ctx.update_state(phase="target", **ctx.proxies.as_dict())


def trial_dirname(trial) -> str:
    """A trial's directory is its id (trials/<id>/ holds its checkpoints and history)."""
    return trial.trial_id


def _tuner(ctx: SweepContext):
    import ray
    from ray import tune

    from mutransfer.sweep import progress, search
    from mutransfer.sweep.hparams import fixed_hyperparameters
    from mutransfer.sweep.trial_logger import TrialLogger, as_tune_callback
    from mutransfer.sweep.trial import proxy_trial

    study, sdir, at_target = ctx.study, ctx.study_dir, ctx.search_at_target
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", TUNE_CHECKPOINT_PERIOD_S)
    # Tune's default ("new") console output ignores verbose=0; the classic reporter honours it.
    # Progress comes from mutransfer.sweep.progress instead (a live bar, or one line per finished trial).
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Ctrl-C raises KeyboardInterrupt here (the study is resumable: Tune snapshots its state every
    # second and trials are idempotent) instead of Tune's handler, which ends the run quietly and
    # would let the driver carry on to the target with an unfinished sweep.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    import warnings

    # A trial replayed after --resume re-reports its last epoch; Optuna warns about the duplicate step.
    warnings.filterwarnings("ignore", message="The reported value is ignored because this `step", category=UserWarning)
    r = study.resources
    uses_gpu = r.gpus_per_trial > 0
    resources = ray.cluster_resources()
    concurrency = search.max_concurrent(study, resources.get("CPU", 1.0), resources.get("GPU", 0.0))
    total = search.total_trials(study)
    trainable = tune.with_resources(
        tune.with_parameters(
            proxy_trial,
            data=ctx.data,
            study=study,
            options={"study_dir": str(sdir.root), "threads": r.cpus_per_trial, "device": "cuda" if uses_gpu else "cpu",
                     "fail_trials": ctx.fail_trials, "target_size": at_target},
        ),
        {"cpu": r.cpus_per_trial, "gpu": r.gpus_per_trial},
    )
    logger = TrialLogger(
        uri=ctx.tracking_uri, experiment_id=ctx.experiment_id, parent_run_id=ctx.parent_id, study_name=study.name,
        proxy_K=study.target_K if at_target else study.proxy_K,
        proxy_width=(study.target_width or study.operator.width) if at_target else study.operator.width,
        budget_epochs=study.budget.epochs,
        fixed=fixed_hyperparameters(study), searched=list(study.search_space), total_trials=total,
        device_kind="gpu" if uses_gpu else "cpu", devices_per_trial=r.gpus_per_trial if uses_gpu else r.cpus_per_trial,
        quiet=ctx.options.quiet, trials_dir=str(sdir.trials_dir), trial_key=trial_dirname,
    )
    if study.budget.grace_period >= study.budget.epochs:
        ctx.say(f"note: budget.grace_period {study.budget.grace_period} >= budget.epochs {study.budget.epochs}: ASHA cannot stop trials early")
    if study.search.algorithm == "grid" and study.search.num_trials != total:
        ctx.say(f"note: grid search runs all {total} combinations (search.num_trials {study.search.num_trials} does not apply)")
    ctx.say(
        f"{'direct search' if at_target else 'proxies'}: {total} trials, {study.model_text(at_target)} ({study.search.algorithm}, ASHA), {study.budget.epochs} epochs each, "
        f"{concurrency} at a time x {r.cpus_per_trial} CPU{' + ' + str(r.gpus_per_trial) + ' GPU' if uses_gpu else ''} ...",
    )
    if tune.Tuner.can_restore(str(sdir.tune_dir)):
        ctx.say("continuing the Tune experiment (finished trials are kept)")
        tuner = tune.Tuner.restore(
            str(sdir.tune_dir), trainable=trainable, resume_unfinished=True, resume_errored=False, restart_errored=False
        )
        return tuner, logger, concurrency
    cfg = search.tune_config(study, concurrency=concurrency)
    cfg.trial_dirname_creator = trial_dirname
    tuner = tune.Tuner(
        trainable,
        param_space=search.param_space(study),
        tune_config=cfg,
        run_config=tune.RunConfig(
            name=sdir.tune_dir.name,
            storage_path=str(sdir.root),
            callbacks=[as_tune_callback(logger), progress.proxy_callback(ctx, total)],
            failure_config=tune.FailureConfig(max_failures=study.budget.max_failures),
            verbose=0,
        ),
    )
    return tuner, logger, concurrency


def collect_trials(study, grid, logger) -> list[TrialRecord]:
    """Trial records from Tune's results and the MLflow child runs (the best marked); logs any trial MLflow missed."""
    from mutransfer.sweep.tracking import TRIAL_ID_TAG, Tracker

    tracker = Tracker(logger.uri)
    results = {Path(r.path).name: r for r in grid}
    for tid, result in results.items():
        if tid not in logger.logged_trial_ids():  # finished before a driver kill, after the callback's last chance to finish its run
            logger.log_from_result(tid, result)
    children = {c.data.tags.get(TRIAL_ID_TAG): c for c in tracker.children(logger.experiment_id, logger.parent_run_id, "proxy_trial")}
    for tid, child in children.items():
        if tid not in results and child.data.tags.get("mutransfer.superseded") != "true":
            tracker.set_tags(child.info.run_id, {"mutransfer.superseded": "true"})
        if tid not in results and child.info.status == "RUNNING":  # started by a driver that died; Tune lost the trial
            tracker.set_status(child.info.run_id, "KILLED")

    def index_of(tid):
        child = children.get(tid)
        try:
            return int(child.data.tags.get("mutransfer.trial_index", 0)) if child else 0
        except ValueError:
            return 0

    trials = [_record(study, tid, results[tid], children.get(tid), index_of(tid), logger.fixed)
              for tid in sorted(results, key=lambda t: (index_of(t), t))]
    best = pick_best(trials)
    if best is None:
        failed = sum(1 for t in trials if t.status == "failed")
        raise SweepError(
            f"no proxy trial produced a result ({failed} of {len(trials)} failed); see the failed MLflow child runs "
            f"(tag mutransfer.error) and the Ray logs, fix the cause and run again with --resume"
        )
    best.best = True
    return trials


def _record(study, tid: str, result, child, index: int, fixed: dict) -> TrialRecord:
    from mutransfer.sweep.tracking import STATUS_TAG

    config = {k: result.config[k] for k in study.search_space if k in (result.config or {})}
    m = child.data.metrics if child else {}
    status = child.data.tags.get(STATUS_TAG, "failed") if child else ("failed" if result.error else "completed")
    test_error = m.get("final_test_error")
    return TrialRecord(
        trial_id=tid,
        index=index,
        status=status,
        config={k: (int(v) if k == "batch_size" else float(v)) for k, v in config.items()},
        hp=dict(fixed, **config),
        test_error=None if test_error is None or not math.isfinite(test_error) else float(test_error),
        epochs=int(m.get("epochs", 0)),
        trainer_seconds=float(m.get("trainer_seconds", 0.0)),
        wall_seconds=float(m.get("wall_seconds", 0.0)),
        device_seconds=float(m.get("device_seconds", 0.0)),
        spectral_lr=float(child.data.params["spectral_lr"]) if child and "spectral_lr" in child.data.params else None,
        mlflow_run_id=child.info.run_id if child else None,
    )
