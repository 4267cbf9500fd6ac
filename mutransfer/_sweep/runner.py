"""Orchestration of `mutransfer sweep`: the steps in order, typed values flowing from one to the next.

    prepare → Prepared (the validated study; no compute)
            → data (StudyData), the study's lock, its folder, Ray and the MLflow parent run → Session (made once)
            → proxies → ladder rungs (ladder) → transfer → gate (--coord-check) → target → verify (--verify)
            → direct baseline (--baseline direct) → report

Each step after the session opens is a function ``step(session, made) -> made``
(mutransfer._sweep.{proxies, rescale, gate, train_target, model_log, finish}): it reads the open study
(:class:`~mutransfer._sweep.session.Session`) and what earlier steps made
(:class:`~mutransfer._sweep.session.Made`, frozen), and returns what it made besides. Adding a step is one function
and one line in :data:`PHASES`; the search strategies (a ladder, top-k, --verify, --baseline direct, --warm-start)
bring their own steps and place them (mutransfer._sweep.strategies).

Everything that can be wrong with the input is checked in :func:`prepare`, before
any compute. Resume: the study directory (``<runs dir>/<study name>/``) holds the
resolved study, ``state.json`` (phase, MLflow run ids, the proxy records) and each
trial's JSON files (mutransfer._sweep.plan); ``--resume`` rebuilds the search from those
files (finished trials are kept, unfinished ones continue from their checkpoints; no
pickle is read, Tune's own experiment state is never restored), reuses the MLflow
parent run and skips the phases already done. Resuming a completed study prints its
report. A driver killed in any phase (SIGKILL included) resumes without re-running a
finished trial, creating a second parent or child run, or logging the report twice.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator, Iterator
from dataclasses import asdict
from pathlib import Path

from mutransfer._config import smoke
from mutransfer._config.executors import POPULATION, chosen_executor
from mutransfer._diagnostics.k_exponent import resolve_k_exponent
from mutransfer._study import _UNSET
from mutransfer._study.data import load_study_data
from mutransfer._study.models import proxy_split
from mutransfer._study_folder.lock import StudyLock
from mutransfer._study_folder.portable import stored_tracking, write_study_file
from mutransfer._sweep import strategies
from mutransfer._sweep._executor_names import executor_for
from mutransfer._sweep._ledger import Booked, Ledger
from mutransfer._sweep._rebuild_journal import journal_lost, no_rebuild_source, rebuild_journal
from mutransfer._sweep._rebuild_state import reattach_parent, refuse_missing_parent
from mutransfer._sweep.asked import ASKED_KEY, asked
from mutransfer._sweep.context import (
    COST_KEY,
    K_RULE_KEY,
    StudyData,
    StudyRun,
    SweepError,
    SweepOptions,
)
from mutransfer._sweep.cost_estimate import estimate_proxy_cost
from mutransfer._sweep.early_target import EarlyTarget
from mutransfer._sweep.finish import write_report
from mutransfer._sweep.gate import coord_check_gate
from mutransfer._sweep.holds import hold_if_asked
from mutransfer._sweep.model_log import log_model_phase, register_completed
from mutransfer._sweep.parent_run import create_parent, tag_study_view
from mutransfer._sweep.plan import write_journal
from mutransfer._sweep.prepare import check_cluster_fits, check_memory, prepare, take_lock
from mutransfer._sweep.proxies import run_proxies
from mutransfer._sweep.rescale import transfer, transfer_phase
from mutransfer._sweep.session import NO_EARLY_TARGET, EarlyStart, Made, Prepared, Session
from mutransfer._sweep.strategies.base import Phase
from mutransfer._sweep.train_target import train_target
from mutransfer._tracking.runs import Tracker
from mutransfer.data._validation import carve_validation
from mutransfer.errors import UserInputError
from operators.factory import module_paths

__all__ = [
    "COMPLETE",
    "PHASES",
    "SweepError",
    "SweepOptions",
    "check_cluster_fits",
    "prepare",
    "run_sweep",
    "sweep_steps",
    "transfer",
]

#: the core phases after the start, in order; the search strategies (mutransfer._sweep.strategies) place theirs
#: after one of them (a ladder after run_proxies, --verify and --baseline direct after log_model_phase) or instead
#: of one (top-k instead of train_target)
PHASES = (run_proxies, transfer_phase, coord_check_gate, train_target, log_model_phase, write_report)


def run_sweep(options: SweepOptions) -> dict:
    """Run (or resume) a study end to end and return the transfer report."""
    report = None
    for _, _, made in sweep_steps(options):
        report = made.report
    assert report is not None
    return report


#: the step :func:`sweep_steps` yields for a study that was complete before it started
COMPLETE = "complete"


def sweep_steps(options: SweepOptions) -> Generator[tuple[str, Prepared, Made], None, None]:
    """Run (or resume) a study one step at a time: yields (the step's name, the study, what the steps made so far)
    after each step, with the study's lock, Ray and the MLflow parent run held in between (the Python API's ``Study``
    advances it step by step; :func:`run_sweep` to the end). The study is the open :class:`Session` while its steps
    run. A study that was complete yields :data:`COMPLETE` once, its report in what was made. Closing the generator
    early releases everything; the study's parent run is marked KILLED, and a resume continues it."""
    prepared = prepare(options)
    data = None
    if prepared.state.get("phase") != "done":
        data = _load_data(prepared)  # bad data (NaN/Inf, shapes) is refused before any lock, folder or run exists
        if data.channels != (1, 1):  # a data file of several channels: its models are planned again, and checked
            check_memory(prepared, data.channels)
    with take_lock(prepared) as lock:  # one driver per study (mutransfer._study_folder.lock): held until this
        # returns, raises or is interrupted
        if prepared.state.get("phase") == "done" and prepared.state.get("report"):
            yield COMPLETE, prepared, _complete(prepared)
            return
        assert data is not None  # not done when prepared (a done study holds its report: check_state): data read then
        yield from _drive(prepared, data, lock)


def _complete(prepared: Prepared) -> Made:
    """A study that was complete before this command: its report, as the folder and store are now."""
    _check_nothing_new_asked(prepared)
    register_completed(prepared)
    write_journal(prepared.study, prepared.study_dir.trials_dir)  # a study finished before the journal: Optuna opens it
    prepared.say(f"study {prepared.study.name!r} is already complete; its report (--name NEW runs a new study):")
    report = prepared.state["report"]  # where the study and its store are now (the folder may have moved)
    mlflow = dict(report.get("mlflow") or {}, tracking_uri=prepared.tracking_uri)
    return Made(
        records=prepared.records,
        report=dict(
            report,
            already_complete=True,
            model=prepared.state.get("model"),
            study_dir=str(prepared.study_dir.root),
            mlflow=mlflow,
        ),
    )


def _drive(prepared: Prepared, data: StudyData, lock: StudyLock) -> Generator[tuple[str, Prepared, Made], None, None]:
    _start_study_dir(prepared)
    options, study = prepared.options, prepared.study
    name = chosen_executor(options.executor, study.resources.executor, options.address)
    executor = Booked(executor_for(name), Ledger(prepared.study_dir.root))
    _resolve_k_rule(prepared, data)
    _say_cost(prepared, data, executor)
    phases = strategies.ordered_phases(PHASES, prepared)
    early = (
        executor.name == "ray"
        and prepared.study.target.start_early
        and target_follows_proxies(strategies.ordered_phases(PHASES, prepared, only_active=True))
    )  # Ray Train's workers start while the last proxies train (an in-process study trains one thing at a time)
    with _session(prepared, data, lock, executor, early=early) as session:
        made = Made(records=prepared.records)
        for name, phase in phases:
            hold_if_asked(session.study_dir.root, name)  # fault tests only (MUTRANSFER_HOLD_AT)
            made = phase(session, made)
            yield name, session, made


#: the phases that may run between the proxies and the target while the target's workers wait (they train nothing
#: on the cluster, so the waiting workers hold no resources another phase needs)
_WHILE_WAITING = (transfer_phase.__name__, coord_check_gate.__name__)


def target_follows_proxies(phases: list[tuple[str, Phase]]) -> bool:
    """Whether the core target phase trains the target right after the proxies (only the transfer and the gate
    between): then the target's workers can start while the last proxies train (mutransfer._sweep.early_target).
    Not where a strategy trains the target otherwise (top-k) or trains more searches first (a ladder's rungs)."""
    names = [name for name, _ in phases]
    if run_proxies.__name__ not in names or train_target.__name__ not in names:
        return False
    between = names[names.index(run_proxies.__name__) + 1 : names.index(train_target.__name__)]
    target = phases[names.index(train_target.__name__)][1]
    return target is train_target and all(name in _WHILE_WAITING for name in between)


def _check_nothing_new_asked(prepared: Prepared) -> None:
    """A completed study cannot grow a strategy asked for by a flag (a verification, a baseline): those are asked for
    when it starts."""

    for flag in strategies.asked_but_missing(prepared, prepared.state["report"]):
        raise UserInputError(
            f"{flag}: study {prepared.study.name!r} is already complete without it; run a new study with {flag} and "
            "--name NEW"
        )


def _start_study_dir(prepared: Prepared) -> None:
    """A new study gets its directory, its resolved study file and its first state; overrides are reported."""
    if not prepared.state:
        prepared.study_dir.root.mkdir(parents=True, exist_ok=True)
        write_study_file(prepared.study_dir, prepared.study)
        prepared.write_state(
            {
                "study": prepared.study.name,
                "phase": "proxies",
                **stored_tracking(prepared.tracking_uri, prepared.study_dir.root),
                "overrides": [
                    asdict(o) | {"previous": None if o.previous is _UNSET else o.previous} for o in prepared.overrides
                ],
                "source_text": prepared.source_text,
                "created": time.time(),
                "smoke": smoke.smoke(),  # MUTRANSFER_SMOKE: a later real run of the same name is told so
                ASKED_KEY: asked(prepared.options),  # what it measures besides its search: a shorter resume runs it too
                # the strategies' records known from the start (a warm start), kept so a resume without the flag runs
                # alike
                **{name: record.as_dict() for name, record in prepared.records.items()},
            }
        )
    elif prepared.state.get(ASKED_KEY) != asked(prepared.options):  # a resume that asked for more: kept for the next
        prepared.update_state(**{ASKED_KEY: asked(prepared.options)})
    for o in prepared.overrides:
        prepared.say(f"override: {o.describe()}")
    for note in prepared.study.notes:
        prepared.say(f"note: {note}")


def _say_cost(prepared: Prepared, data: StudyData, executor: Booked) -> None:
    """The proxy's cost against the target's and what the search should cost against tuning the target directly,
    before any training (mutransfer._sweep.cost_estimate); measured once, kept in state.json for the report."""
    if COST_KEY not in prepared.state:
        fit = data.fit
        cost = estimate_proxy_cost(prepared.study, tuple(fit.train_x.shape[1:]), int(fit.train_y.shape[-1]))
        prepared.update_state(**{COST_KEY: cost.as_dict()})
        together = executor.name in POPULATION and cost.time_ratio is not None
        prepared.say(
            cost.line() + ("; the step measured is one proxy's alone: populations cost less" if together else "")
        )


def _resolve_k_rule(prepared: Prepared, data: StudyData) -> None:
    """``operator.k_exponent: data``: the K rule's exponent, measured once on the fit samples before the search and
    kept in state.json (a resumed study builds the models it started with)."""
    estimate = resolve_k_exponent(prepared.study, data.selection, prepared.state.get(K_RULE_KEY))
    if estimate is None:
        return
    if K_RULE_KEY not in prepared.state:
        prepared.update_state(**{K_RULE_KEY: estimate.as_dict()})
    prepared.say(estimate.describe())


def _load_data(prepared: Prepared) -> StudyData:
    study = prepared.study
    if study.problem.data is None:  # a data file loads without a word: its errors stay one line
        prepared.say(f"study {study.name}: loading data ({study.problem.name}, generated and cached on first use) ...")
    split, path = load_study_data(study, progress=not prepared.options.quiet)
    # selections read the validation split only; the final models report on the test split
    fit, selection = carve_validation(split, int(study.problem.n_val or 0))
    return StudyData(fit, selection, proxy_split(study, selection), path)  # proxy: on its grid


@contextlib.contextmanager
def _session(
    prepared: Prepared, data: StudyData, lock: StudyLock, executor: Booked, *, early: bool
) -> Iterator[Session]:
    """The open study: Ray (or the in-process executor) and the MLflow parent run around the steps; an interruption
    or failure is recorded on the parent. ``early``: the target's run may start while the last proxies train."""
    started = executor.session(
        prepared.options.address, module_paths(prepared.study.operator.type, prepared.study.operator.factory_dir)
    )
    try:
        started.__enter__()
    except Exception as exc:  # e.g. "The current node timed out during startup" on an overloaded machine
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise SweepError(
            f"Ray could not start ({type(exc).__name__}: {lines[-1] if lines else ''}); nothing was trained: "
            f"run again with --resume (Ray's logs: /tmp/ray/session_latest/logs)"
        ) from exc
    run: StudyRun | None = None
    waiting: EarlyStart = NO_EARLY_TARGET
    prior_wall = float(prepared.state.get("wall_seconds", 0.0))
    try:
        if prepared.options.address is not None:
            import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)

            check_cluster_fits(prepared.study, [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")])
        run = _open_parent_run(prepared, data.path)
        if early:
            waiting = EarlyTarget(prepared.study, data.fit, prepared.study_dir.root, prepared.say)
        yield Session.of(
            prepared,
            study_data=data,
            lock=lock,
            executor=executor,
            run=run,
            early=waiting,
            prior_wall=prior_wall,
            setup_seconds=time.perf_counter() - prepared.wall_start,
        )
    except (KeyboardInterrupt, GeneratorExit):  # Ctrl-C, or a Python API study closed before its end
        _mark(prepared.tracker, run, "KILLED")
        prepared.update_state(wall_seconds=prior_wall + time.perf_counter() - prepared.wall_start)
        raise
    except BaseException:
        _mark(prepared.tracker, run, "FAILED")
        raise
    finally:
        waiting.cancel()  # started, and the study stopped before its target step took it
        started.__exit__(None, None, None)  # Ray shut down if the study started it


def _open_parent_run(prepared: Prepared, data_path: Path) -> StudyRun:
    """The study's MLflow experiment and parent run: made for a new study, reopened for a resumed one."""
    study, tracker = prepared.study, prepared.tracker
    known = prepared.state.get("experiment_id")
    if known and not tracker.reopen_experiment(known):  # never start afresh in silence (a second parent run)
        raise UserInputError(
            f"study {study.name!r}: its state.json names MLflow experiment {known[:40]!r}, which the store "
            f"{prepared.tracking_uri} does not hold (replaced, or its experiment removed for good); restore the store "
            "from a copy, or run the study afresh under --name NEW"
        )
    experiment_id = known or tracker.ensure_experiment(study.tracking.experiment)
    tag_study_view(prepared, experiment_id)  # new and resumed studies: the MLflow UI opens on the study's runs
    parent = prepared.state.get("parent_run_id")
    if parent and tracker.run_exists(parent):
        tracker.set_status(parent, "RUNNING")
        prepared.say(f"resuming study {study.name!r} (MLflow parent run {parent})")
    elif parent:  # never a second parent run in silence
        raise refuse_missing_parent(study.name, parent, prepared.tracking_uri)
    elif prepared.options.rebuild_state and (
        found := reattach_parent(tracker, experiment_id, study.name, prepared.study_dir)
    ):
        parent = found.pop("parent_run_id")
        prepared.update_state(**{k: v for k, v in found.items() if v is not None})
        prepared.say(
            f"rebuilding the state of study {study.name!r} from its {prepared.study_dir.trial_count()} trial(s): "
            f"MLflow parent run {parent} reused"
        )
        if journal_lost(prepared.study_dir.trials_dir, study.name):  # damaged or missing: its trials from their runs
            prepared.say(rebuild_journal(tracker, experiment_id, parent, study, prepared.study_dir.trials_dir))
    elif prepared.options.rebuild_state and journal_lost(prepared.study_dir.trials_dir, study.name):
        raise no_rebuild_source(study.name, prepared.study_dir, prepared.tracking_uri)  # checked first in prepare
    else:
        parent = create_parent(prepared, data_path, experiment_id)
    prepared.update_state(experiment_id=experiment_id, parent_run_id=parent)
    return StudyRun(experiment_id, parent)


def _mark(tracker: Tracker, run: StudyRun | None, status: str) -> None:
    """Best effort: record the parent run's end state, and its running children's (never masks the original error);
    nothing before the parent run is opened."""
    if run is None:
        return
    run_id = run.parent_id
    try:
        tracker.set_tags(run_id, {"mutransfer.status": "interrupted" if status == "KILLED" else "failed"})
        tracker.set_status(run_id, status)
        tracker.end_open_children(run_id, status)  # the proxy trials it was running
    except Exception:  # never mask the original error
        pass
