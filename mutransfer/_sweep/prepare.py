"""The sweep's first phase: everything that can be wrong with the input, checked before any compute.

No Ray start, no data generation, no study folder or MLflow run created: the study
is loaded and validated, a resume is checked against the stored study, the resources
and memory it asks for are checked against this machine (or, after Ray starts,
against the cluster: :func:`check_cluster_fits`), and the tracking store, the Ray
address and the data file are checked to answer (mutransfer._sweep.endpoints). Last,
the study's lock is taken (:func:`take_lock`; mutransfer._study_folder.lock: one driver per study). Returns the
:class:`~mutransfer._sweep.session.Prepared` study the runner opens.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from mutransfer._config import smoke
from mutransfer._config.checks import check_verify_points
from mutransfer._config.executors import EXECUTORS, ON_RAY, POPULATION, chosen_executor
from mutransfer._study import OVERRIDES, Override, Study, default_study_text, load_study
from mutransfer._study.inputs import check_address_form, check_folder
from mutransfer._study.memory import check_study_memory, check_study_padding, check_target_size_memory, local_devices
from mutransfer._study_folder.lock import StudyLock, refuse_if_locked
from mutransfer._study_folder.portable import read_study_file, study_tracking_uri
from mutransfer._study_folder.state import StudyDir
from mutransfer._sweep._rebuild_journal import check_rebuild_source, journal_lost
from mutransfer._sweep._rebuild_state import check_state_runs, refuse_lost_state, refuse_needless_rebuild
from mutransfer._sweep.asked import with_asked, with_finished_grid
from mutransfer._sweep.context import SweepOptions
from mutransfer._sweep.endpoints import check_endpoints
from mutransfer._sweep.model_log import check_registry_store
from mutransfer._sweep.plan import check_trial_files
from mutransfer._sweep.search import max_concurrent
from mutransfer._sweep.session import Prepared, StateMirror
from mutransfer._sweep.strategies import prepare_strategies
from mutransfer._sweep.trial import fail_trials_from_env
from mutransfer._tracking._sqlite_file import is_sqlite_database, sqlite_path
from mutransfer._tracking.runs import Tracker, resolve_tracking_uri
from mutransfer.errors import UserInputError


def prepare(options: SweepOptions) -> Prepared:
    """Load and validate everything; decide new study vs resume. Starts nothing (the lock: :func:`take_lock`)."""

    fail_trials = fail_trials_from_env()
    study, applied = load_study(
        options.study_path, options.overrides, text=options.study_text, folder=options.study_folder
    )
    given_executor = options.executor  # None: the study's resources.executor (on --resume, the stored study's)
    options = dataclasses.replace(
        options, executor=chosen_executor(given_executor, study.resources.executor, options.address)
    )
    _check_coord_check(options, study)
    _check_verification_options(options)
    if options.rebuild_state and not options.resume:
        raise UserInputError("--rebuild-state rebuilds the state of a study being resumed; add --resume")
    _check_objectives(options, study)
    if study.problem.data is not None:
        study.problem.data = os.path.normpath(Path(study.problem.data).absolute())
    source_text = options.study_text if options.study_text is not None else _source_text(options.study_path)
    check_address_form(options.address)
    check_folder("--runs-dir", options.runs_dir)
    study_dir = StudyDir.for_study(study.name, options.runs_dir)

    if not options.resume and study_dir.exists() and _finished_with(study_dir, study):
        # the same command again on a finished study: its report again, as --resume would (nothing runs)
        options = dataclasses.replace(options, resume=True)
    if not options.resume:
        if study_dir.exists():
            refuse_if_locked(study_dir)  # a driver runs it now: say who
            differs = _differences(study_dir, study)
            if differs and _made_by_a_smoke_run(study_dir) and not smoke.smoke():
                raise UserInputError(
                    f"study directory {study_dir.root} was made by a smoke run (MUTRANSFER_SMOKE=1: "
                    f"{', '.join(differs[:3])}); delete it (rm -r {study_dir.root}) to run {study.name!r} for real "
                    "here, or pass --name NEW"
                )
            if differs:
                raise UserInputError(
                    f"study directory {study_dir.root} already exists: study {study.name!r} ran to the end here with "
                    f"other settings ({', '.join(differs[:4])}); pass --name NEW to start a new study"
                )
            raise UserInputError(
                f"study directory {study_dir.root} already exists (study {study.name!r} ran here before); "
                f"pass --resume to continue it, or --name NEW to start a new study"
            )
        tracking_uri = resolve_tracking_uri(study.tracking.uri)
        state: dict = {}
        notes: list[str] = []
    else:
        if not study_dir.study_file.exists():
            raise UserInputError(
                f"--resume: no study {study.name!r} to resume ({study_dir.study_file} not found); run without --resume, "
                "or pass the --name / --study of the study to continue"
            )
        stored = read_study_file(study_dir)
        _check_resume_consistent(stored, study, options)
        if stored.operator.type == study.operator.type:  # a factory's module: where this command found it
            stored.operator.factory_dir = study.operator.factory_dir
        if options.rebuild_state:  # from the journal of trials and the store's runs (mutransfer._sweep._rebuild_state)
            refuse_needless_rebuild(study_dir, stored.name, _resumed_tracking(options, study, {}, study_dir))
            state = {}
        else:
            state = study_dir.read_state()
            refuse_lost_state(study_dir, state)
        tracking_uri = _resumed_tracking(options, study, state, study_dir)
        study = stored
        options = dataclasses.replace(
            options, executor=chosen_executor(given_executor, study.resources.executor, options.address)
        )
        applied = [Override(**o) for o in state.get("overrides", [])] if state.get("overrides") else applied
        source_text = state.get("source_text", source_text)
        options, notes = with_asked(options, state)  # what it was started to measure
        options, finished = with_finished_grid(options, state)  # a finished verification: as it ran
        notes += finished

    check_registry_store(tracking_uri, options.register)
    _check_verification_options(options)  # again: what the study was started with (state.json's asked) too
    _check_objectives(options, study)  # again: a resumed study's stored objectives and executor
    _check_coord_check(options, study)

    check_study_padding(study)  # FNO padding against the grid, as `train` checks it
    _check_resources(study, options.address)
    check_endpoints(tracking_uri, options.address, study.problem.data)  # before any folder, run or lock exists
    if options.resume and options.rebuild_state and journal_lost(study_dir.trials_dir, study.name):
        check_rebuild_source(study, study_dir, tracking_uri)  # its trials' runs, to rebuild the journal from
    elif options.resume:
        check_trial_files(study, study_dir.trials_dir)  # the trials as the sweep wrote them
    check_state_runs(study.name, state, tracking_uri)  # a resumed state's parent run is in the store
    prepared = Prepared(
        options=options,
        study=study,
        study_dir=study_dir,
        overrides=tuple(applied),
        tracking_uri=tracking_uri,
        source_text=source_text,
        fail_trials=fail_trials,
        tracker=Tracker(tracking_uri),
        store=StateMirror(state),
    )
    if options.executor != (given_executor or study.resources.executor):  # the study's, taken to the cluster
        notes.append(
            f"resources.executor {study.resources.executor}: on the cluster of --address its trainings run as "
            f"--executor {options.executor}"
        )
    for note in notes:
        prepared.say(note)
    check_memory(prepared)
    # e.g. a warm start's source is read (or the stored one taken) now
    return dataclasses.replace(prepared, records=prepare_strategies(prepared))


def take_lock(study: Prepared) -> StudyLock:
    """The study's lock; then what an earlier driver may have written is read again (it could have finished meanwhile)."""
    lock = StudyLock(study.study_dir, study.tracking_uri, say=study.say).acquire()
    try:
        if not study.options.resume and study.study_dir.exists():
            raise UserInputError(
                f"study directory {study.study_dir.root} was just created by another driver; pass --resume to continue "
                "it, or --name NEW to start a new study"
            )
        if study.options.resume and not study.options.rebuild_state:  # a rebuild starts from no state
            study.reload_state()
    except BaseException:
        lock.release()
        raise
    return lock


def _source_text(path) -> str:
    if path is None:
        return default_study_text()
    return Path(path).read_text(encoding="utf-8")


def _finished_with(study_dir: StudyDir, study: Study) -> bool:
    """Whether ``study_dir`` holds a finished study with exactly ``study``'s settings (the tracking URI aside)."""
    return _differences(study_dir, study) == []


def _made_by_a_smoke_run(study_dir: StudyDir) -> bool:
    """Whether the folder's first session ran under MUTRANSFER_SMOKE (only the refusal's words depend on it)."""
    try:
        return bool(study_dir.read_state().get("smoke"))
    except Exception:  # noqa: BLE001 - an unreadable state is refused with its own message elsewhere
        return False


def _differences(study_dir: StudyDir, study: Study) -> list[str] | None:
    """The fields in which the finished study of ``study_dir`` differs from ``study`` ([] : none, the tracking URI
    aside); None when the folder holds no finished study (or one that cannot be read)."""
    try:
        state = study_dir.read_state()
        if state.get("phase") != "done" or not state.get("report"):
            return None
        stored = read_study_file(study_dir)
    except (UserInputError, OSError, ValueError):
        return None
    return [d for d in _diff(stored.to_dict(), study.to_dict()) if d != "tracking.uri"]


def _resumed_tracking(options: SweepOptions, given: Study, state: dict, study_dir: StudyDir) -> str:
    """The store a resumed study logs to: the one this command names (--tracking-uri, else the --study file's
    ``tracking.uri``, else ./mlflow.db), checked as a flag is. The study folder's state only confirms it: a folder
    cannot send the study's runs, or the user's MLflow credentials, anywhere the command did not name (docs/robustness.md).
    One exception keeps a moved or copied folder working when the command names no store (the default): an existing
    SQLite store inside the folder that holds the runs directory (the layout ``mlflow.db`` beside
    ``mutransfer-runs/``), which reaches no server and creates no file."""
    flag = options.overrides.get("tracking_uri")
    from_file = options.study_path is not None or options.study_text is not None
    chosen = flag if flag is not None else (given.tracking.uri if from_file else None)
    if flag is not None:
        how = f"--tracking-uri {flag}"
    elif chosen is not None:
        how = f"{options.study_path or 'the study spec'}'s tracking.uri"
    else:
        how = "the default ./mlflow.db"
    named = resolve_tracking_uri(chosen)
    stored = study_tracking_uri(state, study_dir.root)
    if stored is None or _same_store(stored, named):
        return named
    local = sqlite_path(stored)
    home = study_dir.root.absolute().parents[1]
    beside = local is not None and local.is_relative_to(home) and is_sqlite_database(local)
    if beside and chosen is None:
        return resolve_tracking_uri(stored)
    raise UserInputError(
        f"--resume: study {study_dir.root.name!r} logs to {stored}, but this command names {named} ({how}); "
        f"pass --tracking-uri {stored} to continue it there, or --name NEW to start a new study"
    )


def _same_store(a: str, b: str) -> bool:
    pa, pb = sqlite_path(a), sqlite_path(b)
    if pa is not None and pb is not None:
        return os.path.normpath(pa.absolute()) == os.path.normpath(pb.absolute())
    return a.rstrip("/") == b.rstrip("/")


def _check_resume_consistent(stored: Study, given: Study, options: SweepOptions) -> None:
    """On --resume, flags and a --study file must agree with the stored study (never silently ignored)."""
    stored_d, given_d = stored.to_dict(), given.to_dict()
    if options.study_path is not None or options.study_text is not None:
        # a study made before validation splits (n_val 0) resumes as it started, whatever the file's default
        legacy = {"problem.n_val"} if stored.problem.n_val == 0 else set()
        diff = [d for d in _diff(stored_d, given_d) if d != "tracking.uri" and d not in legacy]
        if diff and options.study_path is None:  # a spec given in Python (mutransfer.create_study / load_study)
            raise UserInputError(
                f"study {stored.name!r} was made with other settings ({', '.join(diff[:5])}): continue it with "
                f"mt.load_study({stored.name!r}) as it is, or give this spec another name (spec.replace({{'name': ...}}))"
            )
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


def _get(d: object, path: str) -> object:
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
        raise UserInputError(
            f"resources.cpus_per_trial: {r.cpus_per_trial} > the {cpus} CPUs of this machine; use <= {cpus}"
        )
    if t.num_workers * t.cpus_per_worker > cpus:
        raise UserInputError(
            f"target.num_workers x target.cpus_per_worker = {t.num_workers * t.cpus_per_worker} > the {cpus} CPUs of this machine; "
            f"lower them (e.g. num_workers: 1, cpus_per_worker: {cpus}) or pass --address of a cluster"
        )
    if r.gpus_per_trial > 0 or t.use_gpu is True:
        gpus = torch.cuda.device_count()
        if r.gpus_per_trial > gpus:
            raise UserInputError(
                f"resources.gpus_per_trial: {r.gpus_per_trial} but this machine has {gpus} GPU(s); use 0 or pass --address"
            )
        if t.use_gpu is True and t.num_workers > gpus:
            raise UserInputError(
                f"target.use_gpu: true needs {t.num_workers} GPU(s), this machine has {gpus}; use auto/false or pass --address"
            )


def check_memory(prepared: Prepared, channels: tuple[int, int] = (1, 1)) -> None:
    """Proxy and target must fit this machine's devices (mutransfer._study.memory), before anything starts (on a
    cluster, its nodes' devices are not known here: nothing is checked).

    The plans checked are the study's, the ones the trials and the target's workers get: made for the data's
    ``channels`` once they are loaded (the runner checks again then), for 1 and 1 before.
    """
    if prepared.options.address is not None:
        return
    study = prepared.study
    gpus = torch.cuda.device_count()
    proxy_device, target_device = local_devices(study, gpus)
    plans = (
        prepared.memory_plan(target=False, device=proxy_device, channels=channels),
        prepared.memory_plan(target=True, device=target_device, workers=study.target.num_workers, channels=channels),
    )
    check_study_memory(study, max_concurrent(study, os.cpu_count() or 1, gpus), gpus=gpus, plans=plans)
    if prepared.options.verify or prepared.options.baseline or study.ladder:  # rungs train up to the target's size
        concurrency = max_concurrent(study, os.cpu_count() or 1, 0)
        check_target_size_memory(study, concurrency, channels=channels)


def _check_objectives(options: SweepOptions, study: Study) -> None:
    if options.executor in POPULATION and study.search.objectives != "error":
        raise UserInputError(
            f"executor {options.executor} (--executor, resources.executor) books each trial a share of its "
            "population's seconds, which search.objectives error+seconds would read as the configuration's cost; use "
            "--executor inprocess or ray"
        )


def _check_coord_check(options: SweepOptions, study: Study) -> None:
    """--coord-check only where it measures something: a family with a K axis, its facts under mup, K transferred."""
    if options.coord_check and not study.family.coord_checkable:
        raise UserInputError(
            f"--coord-check measures the spectral layers' update across K; operator.type {study.operator.type} has no "
            "K axis, drop the flag (--verify measures whether the transferred LR is the target's optimum)"
        )
    if options.coord_check and study.family.facts_on_parameters and study.parametrization != "mup":
        raise UserInputError(
            f"--coord-check on operator.type {study.operator.type} measures its muP facts across K, and this study "
            f"trains it under parametrization {study.parametrization}: drop the flag or set parametrization: mup"
        )
    if options.coord_check and not study.scales_K:
        raise UserInputError(
            f"--coord-check measures the update across K; this study keeps K = {study.proxy_K} (proxy_K = target_K), "
            "drop the flag or give a larger target_K"
        )


def _check_verification_options(options: SweepOptions) -> None:
    check_verify_points(options.verify_points)
    if options.verify_seeds < 1:
        raise UserInputError(f"--verify-seeds {options.verify_seeds}: must be at least 1 (2 or more give a CI)")
    if options.baseline not in (None, "direct"):
        raise UserInputError(f"--baseline {options.baseline}: the one baseline is 'direct'")
    if options.executor not in EXECUTORS:
        raise UserInputError(f"--executor {options.executor}: one of {', '.join(EXECUTORS)}")
    if options.executor not in ON_RAY and options.address is not None:
        raise UserInputError(
            f"executor {options.executor} (--executor, resources.executor) trains in this process; drop --address "
            f"{options.address} or use --executor {' or '.join(ON_RAY)}"
        )


def check_cluster_fits(study: Study, nodes: list[dict]) -> None:
    """On a cluster, a trial or a target worker that fits on no single node would wait forever: fail now.

    ``nodes`` holds each live node's resources ({"CPU": 4.0, "GPU": 1.0, ...}).
    """
    most_cpus = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
    most_gpus = max((n.get("GPU", 0.0) for n in nodes), default=0.0)
    r, t = study.resources, study.target
    for field, asked, most, unit in (
        ("resources.cpus_per_trial", r.cpus_per_trial, most_cpus, "CPUs"),
        ("resources.gpus_per_trial", r.gpus_per_trial, most_gpus, "GPUs"),
        ("target.cpus_per_worker", t.cpus_per_worker, most_cpus, "CPUs"),
    ):
        if asked > most:
            raise UserInputError(
                f"{field}: {asked} but the largest node of the cluster has {most:g} {unit}; use <= {most:g}"
            )
    if t.use_gpu is True and most_gpus < 1:
        raise UserInputError("target.use_gpu: true but the cluster has no GPU node; use auto or false")
