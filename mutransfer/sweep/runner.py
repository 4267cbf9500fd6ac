"""Orchestration of `mutransfer sweep`: validate → proxies (Ray Tune) → transfer → target (Ray Train) → report.

Everything that can be wrong with the input is checked in :func:`prepare`,
before any compute: no Ray start, no data generation, no MLflow store created.

Resume: the study directory (``<runs dir>/<study name>/``) holds the resolved
study, ``state.json`` (phase, MLflow parent/target run ids, best trial) and the
Tune experiment. ``--resume`` restores the Tune experiment with
``Tuner.restore`` (finished trials are kept, unfinished ones continue from the
trainer checkpoints in ``trials/<id>/``), reuses the MLflow parent run, and
skips phases that are already done. The report is produced once, when the
study completes; resuming a completed study prints the stored report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mutransfer.errors import UserInputError
from mutransfer.study import OVERRIDES, Override, Study, load_study, study_from_yaml_text
from mutransfer.sweep.state import StudyDir, write_atomic

#: how often (s) Tune snapshots the experiment state; small, so a killed driver loses little
TUNE_CHECKPOINT_PERIOD_S = "1"


class SweepError(RuntimeError):
    """The sweep ran but could not produce a result (e.g. every proxy trial failed)."""


@dataclass
class SweepOptions:
    study_path: str | None = None
    overrides: dict = field(default_factory=dict)  # keys of mutransfer.study.OVERRIDES
    address: str | None = None
    resume: bool = False
    runs_dir: str | None = None
    quiet: bool = False
    coord_check: bool = False  # run the coordinate check as a gate before the target


@dataclass
class Prepared:
    study: Study
    study_dir: StudyDir
    overrides: list[Override]
    tracking_uri: str
    source_text: str
    state: dict
    fail_trials: int


def _say(options: SweepOptions, text: str) -> None:
    if not options.quiet:
        print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- prepare (no compute)


def prepare(options: SweepOptions) -> Prepared:
    """Load and validate everything; decide new study vs resume. Starts nothing."""
    from mutransfer.sweep.tracking import resolve_tracking_uri
    from mutransfer.sweep.trial import fail_trials_from_env

    fail_trials = fail_trials_from_env()
    study, applied = load_study(options.study_path, options.overrides)
    if options.coord_check and not study.is_fno:
        raise UserInputError(
            f"--coord-check measures FNO's spectral layers across K; operator.type {study.operator.type} has none, drop the flag"
        )
    if study.problem.data is not None:
        study.problem.data = str(Path(study.problem.data).absolute())
    source_text = _source_text(options.study_path)
    study_dir = StudyDir.for_study(study.name, options.runs_dir)

    if not options.resume:
        if study_dir.exists():
            raise UserInputError(
                f"study directory {study_dir.root} already exists (study {study.name!r} ran here before); "
                f"pass --resume to continue it, or --name NEW to start a new study"
            )
        tracking_uri = resolve_tracking_uri(study.tracking.uri)
        state: dict = {}
    else:
        if not study_dir.study_file.exists():
            raise UserInputError(
                f"--resume: no study {study.name!r} to resume ({study_dir.study_file} not found); run without --resume, "
                "or pass the --name / --study of the study to continue"
            )
        stored = study_from_yaml_text(study_dir.study_file.read_text(), str(study_dir.study_file))
        _check_resume_consistent(stored, study, options, applied)
        state = study_dir.read_state()
        tracking_uri = state.get("tracking_uri") or resolve_tracking_uri(stored.tracking.uri)
        given = options.overrides.get("tracking_uri")
        if given is not None and resolve_tracking_uri(given) != tracking_uri:
            raise UserInputError(
                f"--tracking-uri {given}: the study being resumed logs to {tracking_uri}; drop --tracking-uri or pass a new --name"
            )
        study = stored
        applied = [Override(**o) for o in state.get("overrides", [])] if state.get("overrides") else applied
        source_text = state.get("source_text", source_text)

    _check_resources(study, options.address)
    if options.address is None:
        _check_memory(study)
    return Prepared(study, study_dir, applied, tracking_uri, source_text, state, fail_trials)


def _source_text(path) -> str:
    from mutransfer.study import default_study_text

    if path is None:
        return default_study_text()
    return Path(path).read_text(encoding="utf-8")


def _check_resume_consistent(stored: Study, given: Study, options: SweepOptions, applied: list[Override]) -> None:
    """On --resume, flags and a --study file must agree with the stored study (never silently ignored)."""
    stored_d, given_d = stored.to_dict(), given.to_dict()
    if options.study_path is not None:
        diff = _diff(stored_d, given_d)
        diff = [d for d in diff if d != "tracking.uri"]
        if diff:
            raise UserInputError(
                f"--resume: {options.study_path} differs from the stored study {stored.name!r} in {', '.join(diff[:5])}; "
                "resume without --study, or pass a new --name to start another study"
            )
    for key, value in options.overrides.items():
        if value is None or key in ("name", "tracking_uri"):
            continue
        path, flag = OVERRIDES[key]
        if _get(stored_d, path) != value:
            raise UserInputError(
                f"--resume: {flag} {value} differs from the stored study ({path} = {_get(stored_d, path)}); "
                "drop the flag, or pass a new --name to start another study"
            )


def _diff(a, b, prefix="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def _get(d: dict, path: str):
    for part in path.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def _check_resources(study: Study, address: str | None) -> None:
    """Requests that could never be scheduled on this machine (local runs) fail now, not hang later."""
    if address is not None:
        return
    cpus = os.cpu_count() or 1
    r, t = study.resources, study.target
    if r.cpus_per_trial > cpus:
        raise UserInputError(f"resources.cpus_per_trial: {r.cpus_per_trial} > the {cpus} CPUs of this machine; use <= {cpus}")
    if t.num_workers * t.cpus_per_worker > cpus:
        raise UserInputError(
            f"target.num_workers x target.cpus_per_worker = {t.num_workers * t.cpus_per_worker} > the {cpus} CPUs of this machine; "
            f"lower them (e.g. num_workers: 1, cpus_per_worker: {cpus}) or pass --address of a cluster"
        )
    if r.gpus_per_trial > 0 or t.use_gpu is True:
        import torch

        gpus = torch.cuda.device_count()
        if r.gpus_per_trial > gpus:
            raise UserInputError(f"resources.gpus_per_trial: {r.gpus_per_trial} but this machine has {gpus} GPU(s); use 0 or pass --address")
        if t.use_gpu is True and t.num_workers > gpus:
            raise UserInputError(
                f"target.use_gpu: true needs {t.num_workers} GPU(s), this machine has {gpus}; use auto/false or pass --address"
            )


def _check_memory(study: Study) -> None:
    """Proxy and target must fit this machine's devices (mutransfer.sweep.memory), before anything starts."""
    import torch

    from mutransfer.sweep.memory import check_study_memory
    from mutransfer.sweep.search import max_concurrent

    gpus = torch.cuda.device_count()
    check_study_memory(study, max_concurrent(study, os.cpu_count() or 1, gpus), gpus=gpus)


def _alive_nodes() -> list[dict]:
    import ray

    return [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]


def check_cluster_fits(study: Study, nodes: list[dict]) -> None:
    """On a cluster, a trial or a target worker that fits on no single node would wait forever: fail now.

    ``nodes`` holds each live node's resources ({"CPU": 4.0, "GPU": 1.0, ...}).
    """
    most_cpus = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
    most_gpus = max((n.get("GPU", 0.0) for n in nodes), default=0.0)
    r, t = study.resources, study.target
    if r.cpus_per_trial > most_cpus:
        raise UserInputError(
            f"resources.cpus_per_trial: {r.cpus_per_trial} but the largest node of the cluster has {most_cpus:g} CPUs; "
            f"use <= {most_cpus:g}"
        )
    if r.gpus_per_trial > most_gpus:
        raise UserInputError(
            f"resources.gpus_per_trial: {r.gpus_per_trial} but the largest node of the cluster has {most_gpus:g} GPUs; "
            f"use <= {most_gpus:g}"
        )
    if t.cpus_per_worker > most_cpus:
        raise UserInputError(
            f"target.cpus_per_worker: {t.cpus_per_worker} but the largest node of the cluster has {most_cpus:g} CPUs; "
            f"use <= {most_cpus:g}"
        )
    if t.use_gpu is True and most_gpus < 1:
        raise UserInputError("target.use_gpu: true but the cluster has no GPU node; use auto or false")


# --------------------------------------------------------------------------- run


def run_sweep(options: SweepOptions) -> dict:
    """Run (or resume) a study end to end and return the transfer report."""
    prepared = prepare(options)
    study, sdir, state = prepared.study, prepared.study_dir, prepared.state
    if state.get("phase") == "done" and state.get("report"):
        _say(options, f"study {study.name!r} is already complete; its report:")
        report = dict(state["report"], already_complete=True)
        return report

    wall_start = time.perf_counter()
    prior_wall = float(state.get("wall_seconds", 0.0))
    if not state:
        sdir.root.mkdir(parents=True, exist_ok=True)
        sdir.study_file.write_text(study.to_yaml())
        state = {
            "study": study.name,
            "phase": "proxies",
            "tracking_uri": prepared.tracking_uri,
            "overrides": [asdict(o) | {"previous": None if _unset(o.previous) else o.previous} for o in prepared.overrides],
            "source_text": prepared.source_text,
            "created": time.time(),
        }
        sdir.write_state(state)
    for o in prepared.overrides:
        _say(options, f"override: {o.describe()}")

    from mutransfer.sweep.data import load_study_data

    _say(options, f"study {study.name}: loading data ({study.problem.name}, generated and cached on first use) ...")
    data, data_path = load_study_data(study, progress=not options.quiet)

    started_ray = _init_ray(options.address)
    if options.address is not None:
        try:
            check_cluster_fits(study, _alive_nodes())
        except UserInputError:
            if started_ray:
                import ray

                ray.shutdown()
            raise
    tracker = None
    parent_id = state.get("parent_run_id")
    target_run_id = None
    try:
        from mutransfer.sweep.tracking import Tracker

        tracker = Tracker(prepared.tracking_uri)
        experiment_id = state.get("experiment_id") or tracker.ensure_experiment(study.tracking.experiment)
        if parent_id and tracker.run_exists(parent_id):
            tracker.set_status(parent_id, "RUNNING")
            _say(options, f"resuming study {study.name!r} (MLflow parent run {parent_id})")
        else:
            parent_id = _create_parent(tracker, experiment_id, study, prepared, data_path)
        state = sdir.update_state(experiment_id=experiment_id, parent_run_id=parent_id)

        # ---- proxies ----
        setup_seconds = time.perf_counter() - wall_start
        if state.get("phase") == "proxies":
            proxy_start = time.perf_counter()
            trials, best, concurrency = _run_proxies(study, sdir, data, prepared, experiment_id, parent_id, options)
            proxy_phase = float(state.get("proxy_phase_seconds", 0.0)) + time.perf_counter() - proxy_start
            state = sdir.update_state(
                phase="target", trials=trials, best=best, concurrency=concurrency, proxy_phase_seconds=proxy_phase
            )
        trials, best = state["trials"], state["best"]

        # ---- transfer ----
        transfer_record, target_hp = transfer(study, best)

        # ---- optional gate: the coordinate check across K, before spending target compute ----
        if options.coord_check and not state.get("coord_check_passed"):
            _coord_check_gate(study, data, target_hp, sdir, tracker, parent_id, options)
            state = sdir.update_state(coord_check_passed=True)

        # ---- target ----
        import ray

        from mutransfer.sweep.target import resolve_use_gpu, run_target

        use_gpu = resolve_use_gpu(study.target.use_gpu, ray.cluster_resources().get("GPU", 0.0))
        target_run_id = state.get("target_run_id")
        start_ms = int(time.time() * 1000)
        if target_run_id and tracker.run_exists(target_run_id):
            tracker.set_status(target_run_id, "RUNNING")
        else:
            params = {
                "K": study.target_K,
                "width": study.target_width,
                **{f"hp.{k}": v for k, v in target_hp.items()},
                "epochs": study.target.epochs,
                "num_workers": study.target.num_workers,
                "use_gpu": use_gpu,
                "transfer.lr_factor": transfer_record.get("lr_factor"),
                "transfer.init_variance_factor": transfer_record.get("init_variance_factor"),
                "proxy_trial_id": best["trial_id"],
            }
            target_run_id = tracker.create_target_run(experiment_id, parent_id, study.name, params)
            state = sdir.update_state(target_run_id=target_run_id)
        _say(
            options,
            f"target: {study.model_text(True)}, {study.target.epochs} epochs, {study.target.num_workers} worker(s) x "
            f"{'1 GPU' if use_gpu else f'{study.target.cpus_per_worker} CPU'} (Ray Train) ...",
        )
        try:
            with _keep_sigint_handler():
                outcome = run_target(study, target_hp, data, sdir.root, use_gpu=use_gpu, max_failures=study.budget.max_failures)
        except KeyboardInterrupt:
            tracker.set_tags(target_run_id, {"mutransfer.status": "interrupted"})
            tracker.set_status(target_run_id, "KILLED")
            raise
        except Exception as exc:
            tracker.set_tags(target_run_id, {"mutransfer.status": "failed", "mutransfer.error": _first_line(exc)})
            tracker.set_status(target_run_id, "FAILED")
            raise SweepError(
                f"target training failed after {study.budget.max_failures} retries ({_first_line(exc)}); "
                f"Ray's logs are in /tmp/ray/session_latest/logs; fix the cause and run again with --resume"
            ) from exc
        tracker.finish_target(target_run_id, outcome, start_ms=start_ms)

        # ---- report ----
        wall = prior_wall + (time.perf_counter() - wall_start)
        phases = {
            "setup_seconds": setup_seconds,
            "proxy_phase_seconds": float(state.get("proxy_phase_seconds", 0.0)),
            "concurrency": int(state.get("concurrency", 1)),
            "input_shape": list(data.train_x.shape[1:]),
        }
        report = _finish(
            study, sdir, tracker, experiment_id, parent_id, target_run_id, trials, best, transfer_record, target_hp, outcome, wall,
            prepared, phases,
        )
        state = sdir.update_state(phase="done", report=report, wall_seconds=wall)
        return report
    except KeyboardInterrupt:
        _mark(tracker, parent_id, "KILLED")
        sdir.update_state(wall_seconds=prior_wall + (time.perf_counter() - wall_start))
        raise
    except BaseException:
        _mark(tracker, parent_id, "FAILED")
        raise
    finally:
        if started_ray:
            import ray

            ray.shutdown()


def _coord_check_gate(study: Study, data, hp: dict, sdir: StudyDir, tracker, parent_id: str, options: SweepOptions) -> None:
    """Coordinate check at K_proxy, their geometric mean and K_target; SweepError if the spectral sizes are not flat."""
    from mutransfer.diagnostics.coord_check import coord_check, plot_coord_check

    modes = sorted({study.proxy_K, round(math.sqrt(study.proxy_K * study.target_K)), study.target_K})
    _say(options, f"coordinate check ({study.parametrization}) at K = {modes} before the target ...")
    result = coord_check(
        data, dim=study.dim, modes=modes, parametrizations=(study.parametrization,), width=study.operator.width,
        layers=study.operator.layers, padding=study.padding, lr=hp["lr"], clip_value=hp["clip_value"],
        batch_size=min(10, int(study.problem.n_train)), seeds=3,
    )
    json_path, png_path = sdir.root / "coord_check.json", sdir.root / "coord_check.png"
    write_atomic(json_path, json.dumps(result.as_dict(), indent=2))
    plot_coord_check(result, png_path)
    tracker.client.log_artifact(parent_id, str(json_path), "coord_check")
    tracker.client.log_artifact(parent_id, str(png_path), "coord_check")
    if not result.passed(study.parametrization):
        worst = max((c for c in result.curves if c.gated), key=lambda c: abs(c.slope))
        raise SweepError(
            f"coordinate check flagged {study.parametrization}: {worst.kind} of {worst.layer} has log-log slope "
            f"{worst.slope:+.2f} in K (tolerance {result.tolerance}); see {png_path}. The proxy results are kept: "
            f"use parametrization mup, or run again with --resume and without --coord-check to train the target anyway"
        )
    _say(options, "coordinate check passed: spectral sizes are flat in K")


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:300]


def _unset(value) -> bool:
    from mutransfer.study import _UNSET

    return value is _UNSET


def _mark(tracker, run_id, status: str) -> None:
    if tracker is None or not run_id:
        return
    try:
        tracker.set_tags(run_id, {"mutransfer.status": "interrupted" if status == "KILLED" else "failed"})
        tracker.set_status(run_id, status)
    except Exception:  # never mask the original error
        pass


def _init_ray(address: str | None) -> bool:
    """Start a local Ray (or connect to ``address``); False if Ray was already initialised by the caller."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    # Worker stdout/stderr stay in Ray's session logs (/tmp/ray/session_latest/logs): Ray Train's
    # controller is chatty. Trial and worker errors still reach the driver as exceptions.
    if address is None:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    return True


def _git_commit() -> str | None:
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _create_parent(tracker, experiment_id: str, study: Study, prepared: Prepared, data_path) -> str:
    from mutransfer import __version__
    from mutransfer.sweep.search import total_trials

    commit = _git_commit()
    params = {
        "study": study.name,
        "problem": study.problem.name,
        "dim": study.dim,
        **study.scaling(),
        "layers": study.operator.layers,
        "resolution": study.problem.resolution,
        "n_train": study.problem.n_train,
        "n_test": study.problem.n_test,
        "data": str(data_path),
        "search.algorithm": study.search.algorithm,
        "search.num_trials": total_trials(study),
        "search.space": {k: v.to_dict() for k, v in study.search_space.items()},
        "budget.epochs": study.budget.epochs,
        "target.epochs": study.target.epochs,
        "target.num_workers": study.target.num_workers,
        "device_kind": "gpu" if study.resources.gpus_per_trial > 0 else "cpu",
        "mutransfer_version": __version__,
        "git_commit": commit or "unknown",
        "overrides": [o.describe() for o in prepared.overrides] or "none",
    }
    tags = {"mutransfer.study_dir": str(prepared.study_dir.root)}
    if commit:
        tags["mlflow.source.git.commit"] = commit
    files = {"study/study.yaml": study.to_yaml(), "study/source.yaml": prepared.source_text}
    return tracker.create_parent(experiment_id, study, params=params, tags=tags, files=files)


@contextlib.contextmanager
def _keep_sigint_handler():
    """Restore the SIGINT handler after Tune / Ray Train, which install their own and leave it behind."""
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread() and previous is not None:
            signal.signal(signal.SIGINT, previous)


def _trial_dirname(trial) -> str:
    return trial.trial_id


def _run_proxies(study: Study, sdir: StudyDir, data, prepared: Prepared, experiment_id: str, parent_id: str, options: SweepOptions):
    import ray
    from ray import tune

    from mutransfer.sweep import search
    from mutransfer.sweep.hparams import fixed_hyperparameters
    from mutransfer.sweep.tracking import TrialLogger, as_tune_callback
    from mutransfer.sweep.trial import proxy_trial

    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", TUNE_CHECKPOINT_PERIOD_S)
    # Tune's default ("new") console output ignores verbose=0; the classic reporter honours it.
    # Progress comes from TrialLogger instead (one line per finished trial).
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
            data=data,
            study=study,
            options={
                "study_dir": str(sdir.root),
                "threads": r.cpus_per_trial,
                "device": "cuda" if uses_gpu else "cpu",
                "fail_trials": prepared.fail_trials,
            },
        ),
        {"cpu": r.cpus_per_trial, "gpu": r.gpus_per_trial},
    )
    logger = TrialLogger(
        uri=prepared.tracking_uri,
        experiment_id=experiment_id,
        parent_run_id=parent_id,
        study_name=study.name,
        proxy_K=study.proxy_K,
        proxy_width=study.operator.width,
        budget_epochs=study.budget.epochs,
        fixed=fixed_hyperparameters(study),
        searched=list(study.search_space),
        total_trials=total,
        device_kind="gpu" if uses_gpu else "cpu",
        devices_per_trial=r.gpus_per_trial if uses_gpu else r.cpus_per_trial,
        quiet=options.quiet,
    )
    if study.budget.grace_period >= study.budget.epochs:
        _say(options, f"note: budget.grace_period {study.budget.grace_period} >= budget.epochs {study.budget.epochs}: ASHA cannot stop trials early")
    if study.search.algorithm == "grid" and study.search.num_trials != total:
        _say(options, f"note: grid search runs all {total} combinations (search.num_trials {study.search.num_trials} does not apply)")
    _say(
        options,
        f"proxies: {total} trials, {study.model_text(False)} ({study.search.algorithm}, ASHA), {study.budget.epochs} epochs each, "
        f"{concurrency} at a time x {r.cpus_per_trial} CPU{' + ' + str(r.gpus_per_trial) + ' GPU' if uses_gpu else ''} ...",
    )
    if tune.Tuner.can_restore(str(sdir.tune_dir)):
        _say(options, "continuing the Tune experiment (finished trials are kept)")
        tuner = tune.Tuner.restore(
            str(sdir.tune_dir), trainable=trainable, resume_unfinished=True, resume_errored=False, restart_errored=False
        )
    else:
        cfg = search.tune_config(study, concurrency=concurrency)
        cfg.trial_dirname_creator = _trial_dirname
        tuner = tune.Tuner(
            trainable,
            param_space=search.param_space(study),
            tune_config=cfg,
            run_config=tune.RunConfig(
                name=sdir.tune_dir.name,
                storage_path=str(sdir.root),
                callbacks=[as_tune_callback(logger)],
                failure_config=tune.FailureConfig(max_failures=study.budget.max_failures),
                verbose=0,
            ),
        )
    with _keep_sigint_handler():
        grid = tuner.fit()
    if grid.num_terminated + grid.num_errors < len(grid) or len(grid) < total:
        raise KeyboardInterrupt("the Tune experiment was interrupted")
    trials, best = _collect_trials(study, grid, logger)
    return trials, best, concurrency


def _collect_trials(study: Study, grid, logger) -> tuple[list[dict], dict]:
    """Trial table from Tune's results + the MLflow child runs; log any trial MLflow has not seen."""
    from mutransfer.sweep.tracking import STATUS_TAG, TRIAL_ID_TAG, Tracker

    tracker = Tracker(logger.uri)
    results = {Path(r.path).name: r for r in grid}
    logger.logged_trial_ids()  # drops child runs a killed driver left half-written
    children = {c.data.tags.get(TRIAL_ID_TAG): c for c in tracker.children(logger.experiment_id, logger.parent_run_id, "proxy_trial")}
    for tid, result in results.items():
        if tid not in children:  # finished before a driver kill, after the callback's last chance to log it
            logger.log_from_result(tid, result)
    children = {c.data.tags.get(TRIAL_ID_TAG): c for c in tracker.children(logger.experiment_id, logger.parent_run_id, "proxy_trial")}
    for tid, child in children.items():
        if tid not in results and child.data.tags.get("mutransfer.superseded") != "true":
            tracker.set_tags(child.info.run_id, {"mutransfer.superseded": "true"})

    trials = []
    def index_of(tid):
        child = children.get(tid)
        try:
            return int(child.data.tags.get("mutransfer.trial_index", 0)) if child else 0
        except ValueError:
            return 0

    for tid in sorted(results, key=lambda t: (index_of(t), t)):
        child = children.get(tid)
        result = results[tid]
        config = {k: result.config[k] for k in study.search_space if k in (result.config or {})}
        m = child.data.metrics if child else {}
        status = child.data.tags.get(STATUS_TAG, "failed") if child else ("failed" if result.error else "completed")
        test_error = m.get("final_test_error")
        trials.append(
            {
                "trial_id": tid,
                "index": index_of(tid),
                "status": status,
                "config": {k: (int(v) if k == "batch_size" else float(v)) for k, v in config.items()},
                "hp": dict(logger.fixed, **config),
                "test_error": None if test_error is None or not math.isfinite(test_error) else float(test_error),
                "epochs": int(m.get("epochs", 0)),
                "trainer_seconds": float(m.get("trainer_seconds", 0.0)),
                "wall_seconds": float(m.get("wall_seconds", 0.0)),
                "device_seconds": float(m.get("device_seconds", 0.0)),
                "spectral_lr": float(child.data.params["spectral_lr"]) if child and "spectral_lr" in child.data.params else None,
                "mlflow_run_id": child.info.run_id if child else None,
            }
        )
    best = _pick_best(trials)
    if best is None:
        failed = sum(1 for t in trials if t["status"] == "failed")
        raise SweepError(
            f"no proxy trial produced a result ({failed} of {len(trials)} failed); see the failed MLflow child runs "
            f"(tag mutransfer.error) and the Ray logs, fix the cause and run again with --resume"
        )
    for t in trials:
        t["best"] = t["trial_id"] == best["trial_id"]
    return trials, best


def _pick_best(trials: list[dict]) -> dict | None:
    """Lowest final test error among trials that ran the full budget; else among any that reported."""
    full = [t for t in trials if t["status"] == "completed" and t["test_error"] is not None]
    pool = full or [t for t in trials if t["status"] in ("pruned", "diverged") and t["test_error"] is not None]
    if not pool:
        return None
    b = min(pool, key=lambda t: t["test_error"])
    return {k: b[k] for k in ("trial_id", "index", "status", "config", "hp", "test_error", "epochs", "spectral_lr", "mlflow_run_id")}


def transfer(study: Study, best: dict) -> tuple[dict, dict]:
    """Rescale the best proxy to the target (K and/or width): (transfer record as a dict, target hyperparameters).

    The models apply every multiplier themselves (c(K) on spectral weights, m0/m
    on hidden weights under width-muP), so the target hyperparameters are the
    proxy's; the record states the effective values each rule produces.
    """
    from operators.parametrization import spectral_lr_multiplier, transfer_lr_factor
    from operators.transfer import RescaledQuantity, TransferRecord, width_transfer_rows
    from operators.width_mup import hidden_lr_multiplier

    from mutransfer.study import FNO_ONLY_HPARAMS
    from mutransfer.sweep.hparams import effective_spectral_init_std

    hp = dict(best["hp"])
    lr = hp["lr"]
    w0, w1 = study.operator.width, study.target_width
    width_mup = study.width_parametrization == "mup"
    width_factor = hidden_lr_multiplier(w1, w0) if width_mup else 1.0
    skip = ("lr",) if study.is_fno else ("lr", *FNO_ONLY_HPARAMS)
    unchanged = {k: v for k, v in hp.items() if k not in skip and v is not None}
    rows = [RescaledQuantity("master_lr", lr, lr, 1.0, "unchanged: the model applies its multipliers itself")]
    notes = []
    lr_factor, var_factor = width_factor, 1.0
    init_std = target_init_std = None
    if study.is_fno:
        kp, kt, d, param = study.proxy_K, study.target_K, study.dim, study.parametrization
        c0, c1 = spectral_lr_multiplier(kp, d, param), spectral_lr_multiplier(kt, d, param)
        k_lr = transfer_lr_factor(kp, kt) if param == "mup" else 1.0
        lr_factor = k_lr * width_factor
        init_std = effective_spectral_init_std(study, kp, hp["init_scale"], width=w0)
        target_init_std = effective_spectral_init_std(study, kt, hp["init_scale"], width=w1)
        var_factor = (target_init_std / init_std) ** 2
        k_rule = "x sqrt(log Kp / log Kt)" if param == "mup" and kp != kt else "unchanged in K"
        if param == "standard":
            k_rule = "standard parametrization: unchanged in K"
        w_rule = " x m0/m" if width_mup and study.scales_width else ""
        rows += [
            RescaledQuantity("spectral_lr", c0 * lr, c1 * lr * width_factor, lr_factor, k_rule + w_rule),
            RescaledQuantity("spectral_init_std", init_std, target_init_std, target_init_std / init_std,
                             k_rule + (" x sqrt(m0/m)" if w_rule else "")),
            RescaledQuantity("spectral_init_variance", init_std**2, target_init_std**2, var_factor,
                             "the square of the std's factor"),
        ]
        if kp != kt:
            notes.append(
                "muP in K: the master LR carries over; the model applies c(K) = 1/sqrt(d log K) to the spectral weights"
                if param == "mup" else "standard parametrization in K: copied unchanged; the optimum may drift with K"
            )
    if study.scales_width:
        rows += width_transfer_rows(w0, w1, lr, study.width_parametrization, study.operator.type in ("galerkin", "ono"))
        notes.append(
            f"width-muP (base width {w0}): hidden weights train at LR x m0/m, readouts are scaled by m0/m"
            if width_mup else "standard width parametrization: copied unchanged; the optimum may drift with width"
        )
    rows += [RescaledQuantity(k, v, v, 1.0, "unchanged") for k, v in unchanged.items()]
    record = TransferRecord(
        study.dim, study.proxy_K, study.target_K, tuple(rows),
        proxy_width=w0 if study.scales_width else None, target_width=w1 if study.scales_width else None,
    )
    out = record.as_dict()
    out.update(
        table=record.format_table(),
        lr_factor=lr_factor,
        init_variance_factor=var_factor,
        proxy_spectral_init_std=init_std,
        target_spectral_init_std=target_init_std,
        note="; ".join(notes),
    )
    return out, hp


def _finish(
    study, sdir, tracker, experiment_id, parent_id, target_run_id, trials, best, transfer_record, target_hp, outcome, wall, prepared, phases
):
    from mutransfer.sweep.report import build_report, format_report, plot_trials
    from mutransfer.sweep.tracking import log_batch
    from mutransfer.sweep.state import write_atomic

    target = asdict(outcome)
    target.pop("history", None)
    target["mlflow_run_id"] = target_run_id
    report = build_report(
        study=study,
        trials=trials,
        best=best,
        transfer=transfer_record,
        target_hp=target_hp,
        target=target,
        proxy_device="gpu" if study.resources.gpus_per_trial > 0 else "cpu",
        wall_seconds=wall,
        mlflow={"tracking_uri": prepared.tracking_uri, "experiment_id": experiment_id, "parent_run_id": parent_id, "target_run_id": target_run_id},
        study_dir=str(sdir.root),
        overrides=[o.describe() for o in prepared.overrides],
        phases=phases,
    )
    text = format_report(report)
    write_atomic(sdir.root / "report.json", json.dumps(report, indent=2, default=str))
    write_atomic(sdir.root / "report.txt", text + "\n")
    plot_path = sdir.root / "proxy_trials.png"
    plot_trials(trials, plot_path, searched_lr="lr" in study.search_space, title=f"{study.name}: proxies, {study.model_text(False)}")

    c = report["compute"]
    now = int(time.time() * 1000)
    metrics = [
        ("best_proxy_test_error", best["test_error"], now, 0),
        ("target_test_error", outcome.test_error, now, 0),
        ("proxy_device_seconds", c["proxy_device_seconds"], now, 0),
        ("target_device_seconds", c["target_device_seconds"], now, 0),
        ("proxy_trainer_seconds", c["proxy_trainer_seconds"], now, 0),
        ("target_trainer_seconds", c["target_trainer_seconds"], now, 0),
        ("sweep_wall_seconds", wall, now, 0),
        ("trials_total", report["trials"]["total"], now, 0),
        *[(f"trials_{k}", report["trials"][k], now, 0) for k in ("completed", "pruned", "diverged", "failed")],
        *[(key, c[key], now, 0) for key in ("proxy_flops", "target_flops", "direct_sweep_flops",
                                            "mutransfer_vs_direct_flops", "mutransfer_vs_direct_device_seconds")
          if c.get(key) is not None],
    ]
    params = {
        "transfer.lr_factor": transfer_record["lr_factor"],
        "transfer.init_variance_factor": transfer_record["init_variance_factor"],
        "best_trial_id": best["trial_id"],
    }
    params.update({f"best.{k}": v for k, v in best["config"].items()})
    log_batch(tracker.client, parent_id, metrics=metrics, params=params, tags={"mutransfer.status": "done"})
    tracker.client.log_artifact(parent_id, str(sdir.root / "report.json"), "report")
    tracker.client.log_artifact(parent_id, str(sdir.root / "report.txt"), "report")
    tracker.client.log_artifact(parent_id, str(plot_path), "report")
    tracker.set_status(parent_id, "FINISHED")
    return report
