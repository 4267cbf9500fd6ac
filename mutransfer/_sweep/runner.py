"""Orchestration of `mutransfer sweep`: the phases in order over one :class:`SweepContext`.

    prepare → start (study directory, data, Ray, MLflow parent run)
            → proxies → ladder rungs (ladder) → transfer → gate (--coord-check) → target → verify (--verify)
            → direct baseline (--baseline direct) → report

Each phase is a function of the context (mutransfer._sweep.{proxies, rescale, gate,
train_target, finish}); it reads what earlier phases left there and sets its own
typed record. Adding a phase is one function and one line in :data:`PHASES`; the search
strategies (a ladder, top-k, --verify, --baseline direct, --warm-start) bring their own phases
and place them (mutransfer._sweep.strategies).

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
from collections.abc import Generator
from dataclasses import asdict

from mutransfer._config import smoke
from mutransfer._config.executors import POPULATION
from mutransfer._diagnostics.k_exponent import resolve_k_exponent
from mutransfer._study import _UNSET
from mutransfer._study.data import load_study_data
from mutransfer._study.models import proxy_split
from mutransfer._study_folder.portable import stored_tracking, write_study_file
from mutransfer._sweep import strategies
from mutransfer._sweep._rebuild_state import reattach_parent, refuse_missing_parent
from mutransfer._sweep.asked import ASKED_KEY, asked
from mutransfer._sweep.context import (
    COST_KEY,
    K_RULE_KEY,
    StudyData,
    StudyRun,
    SweepContext,
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
    for _, ctx in sweep_steps(options):
        report = ctx.report
    assert report is not None
    return report


#: the step :func:`sweep_steps` yields for a study that was complete before it started
COMPLETE = "complete"


def sweep_steps(options: SweepOptions) -> Generator[tuple[str, SweepContext], None, None]:
    """Run (or resume) a study one phase at a time: yields (the phase's name, the context) after each phase, with the
    study's lock, Ray and the MLflow parent run held in between (the Python API's ``Study`` advances it step by step;
    :func:`run_sweep` to the end). A study that was complete yields :data:`COMPLETE` once, its report on the context.
    Closing the generator early releases everything; the study's parent run is marked KILLED, and a resume continues
    it."""
    ctx = prepare(options)
    if ctx.state.get("phase") != "done":
        _load_data(ctx)  # bad data (NaN/Inf, shapes) is refused before any lock, folder or run exists
        if ctx.data_channels != (1, 1):  # a data file of several channels: its models are planned again, and checked
            check_memory(ctx)
    ctx.lock = take_lock(ctx)
    with (
        ctx.lock
    ):  # one driver per study (mutransfer._study_folder.lock): held until this returns, raises or is interrupted
        yield from _drive(ctx)


def _drive(ctx: SweepContext) -> Generator[tuple[str, SweepContext], None, None]:
    if ctx.state.get("phase") == "done" and ctx.state.get("report"):
        _check_nothing_new_asked(ctx)
        register_completed(ctx)
        write_journal(ctx.study, ctx.study_dir.trials_dir)  # a study finished before the journal: Optuna opens it
        ctx.say(f"study {ctx.study.name!r} is already complete; its report (--name NEW runs a new study):")
        report = ctx.state["report"]  # where the study and its store are now (the folder may have moved)
        mlflow = dict(report.get("mlflow") or {}, tracking_uri=ctx.tracking_uri)
        ctx.report = dict(
            report,
            already_complete=True,
            model=ctx.state.get("model"),
            study_dir=str(ctx.study_dir.root),
            mlflow=mlflow,
        )
        yield COMPLETE, ctx
        return
    _start_study_dir(ctx)
    _resolve_k_rule(ctx)
    _say_cost(ctx)
    phases = strategies.ordered_phases(PHASES, ctx)
    if (
        ctx.executor.name == "ray"
        and ctx.study.target.start_early
        and target_follows_proxies(strategies.ordered_phases(PHASES, ctx, only_active=True))
    ):  # Ray Train's workers start while the last proxies train (an in-process study trains one thing at a time)
        ctx.early_target = EarlyTarget(ctx)
    with _session(ctx):
        for name, phase in phases:
            hold_if_asked(ctx.study_dir.root, name)  # fault tests only (MUTRANSFER_HOLD_AT)
            phase(ctx)
            yield name, ctx


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


def _check_nothing_new_asked(ctx: SweepContext) -> None:
    """A completed study cannot grow a strategy asked for by a flag (a verification, a baseline): those are asked for
    when it starts."""

    for flag in strategies.asked_but_missing(ctx, ctx.state["report"]):
        raise UserInputError(
            f"{flag}: study {ctx.study.name!r} is already complete without it; run a new study with {flag} and --name NEW"
        )


def _start_study_dir(ctx: SweepContext) -> None:
    """A new study gets its directory, its resolved study file and its first state; overrides are reported."""
    if not ctx.state:
        ctx.study_dir.root.mkdir(parents=True, exist_ok=True)
        write_study_file(ctx.study_dir, ctx.study)
        ctx.state = {
            "study": ctx.study.name,
            "phase": "proxies",
            **stored_tracking(ctx.tracking_uri, ctx.study_dir.root),
            "overrides": [
                asdict(o) | {"previous": None if o.previous is _UNSET else o.previous} for o in ctx.overrides
            ],
            "source_text": ctx.source_text,
            "created": time.time(),
            "smoke": smoke.smoke(),  # MUTRANSFER_SMOKE: a later real run of the same name is told so
            ASKED_KEY: asked(ctx.options),  # what it measures besides its search: a shorter resume runs it too
            # the strategies' records known from the start (a warm start), kept so a resume without the flag runs alike
            **{name: record.as_dict() for name, record in ctx.records.items()},
        }
        ctx.study_dir.write_state(ctx.state)
    elif ctx.state.get(ASKED_KEY) != asked(ctx.options):  # a resume that asked for more: kept for the next
        ctx.update_state(**{ASKED_KEY: asked(ctx.options)})
    for o in ctx.overrides:
        ctx.say(f"override: {o.describe()}")
    for note in ctx.study.notes:
        ctx.say(f"note: {note}")


def _say_cost(ctx: SweepContext) -> None:
    """The proxy's cost against the target's and what the search should cost against tuning the target directly,
    before any training (mutransfer._sweep.cost_estimate); measured once, kept in state.json for the report."""
    if COST_KEY not in ctx.state:
        data = ctx.data
        cost = estimate_proxy_cost(ctx.study, tuple(data.train_x.shape[1:]), int(data.train_y.shape[-1]))
        ctx.state[COST_KEY] = cost.as_dict()
        ctx.study_dir.write_state(ctx.state)
        together = ctx.executor.name in POPULATION and cost.time_ratio is not None
        ctx.say(cost.line() + ("; the step measured is one proxy's alone: populations cost less" if together else ""))


def _resolve_k_rule(ctx: SweepContext) -> None:
    """``operator.k_exponent: data``: the K rule's exponent, measured once on the fit samples before the search and
    kept in state.json (a resumed study builds the models it started with)."""
    estimate = resolve_k_exponent(ctx.study, ctx.selection_data, ctx.state.get(K_RULE_KEY))
    if estimate is None:
        return
    if K_RULE_KEY not in ctx.state:
        ctx.state[K_RULE_KEY] = estimate.as_dict()
        ctx.study_dir.write_state(ctx.state)
    ctx.say(estimate.describe())


def _load_data(ctx: SweepContext) -> None:
    if ctx.study.problem.data is None:  # a data file loads without a word: its errors stay one line
        ctx.say(
            f"study {ctx.study.name}: loading data ({ctx.study.problem.name}, generated and cached on first use) ..."
        )
    split, path = load_study_data(ctx.study, progress=not ctx.options.quiet)
    # selections read the validation split only; the final models report on the test split
    fit, selection = carve_validation(split, int(ctx.study.problem.n_val or 0))
    ctx.loaded = StudyData(fit, selection, proxy_split(ctx.study, selection), path)  # proxy: on its grid


@contextlib.contextmanager
def _session(ctx: SweepContext):
    """Ray and the MLflow parent run around the phases; an interruption or failure is recorded on the parent."""
    session = ctx.executor.session(
        ctx.options.address, module_paths(ctx.study.operator.type, ctx.study.operator.factory_dir)
    )
    try:
        ctx.started_ray = session.__enter__()
    except Exception as exc:  # e.g. "The current node timed out during startup" on an overloaded machine
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise SweepError(
            f"Ray could not start ({type(exc).__name__}: {lines[-1] if lines else ''}); nothing was trained: "
            f"run again with --resume (Ray's logs: /tmp/ray/session_latest/logs)"
        ) from exc
    try:
        if ctx.options.address is not None:
            import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)

            check_cluster_fits(ctx.study, [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")])
        _open_parent_run(ctx)
        ctx.setup_seconds = time.perf_counter() - ctx.wall_start
        yield
    except (KeyboardInterrupt, GeneratorExit):  # Ctrl-C, or a Python API study closed before its end
        _mark(ctx.tracker, ctx.run, "KILLED")
        ctx.update_state(wall_seconds=ctx.wall_seconds)
        raise
    except BaseException:
        _mark(ctx.tracker, ctx.run, "FAILED")
        raise
    finally:
        if ctx.early_target is not None:  # started, and the study stopped before its target phase took it
            ctx.early_target.cancel()
        session.__exit__(None, None, None)  # Ray shut down if the study started it


def _open_parent_run(ctx: SweepContext) -> None:
    known = ctx.state.get("experiment_id")
    if known and not ctx.tracker.reopen_experiment(known):  # never start afresh in silence (a second parent run)
        raise UserInputError(
            f"study {ctx.study.name!r}: its state.json names MLflow experiment {known[:40]!r}, which the store "
            f"{ctx.tracking_uri} does not hold (replaced, or its experiment removed for good); restore the store from "
            "a copy, or run the study afresh under --name NEW"
        )
    experiment_id = known or ctx.tracker.ensure_experiment(ctx.study.tracking.experiment)
    tag_study_view(ctx, experiment_id)  # new and resumed studies: the MLflow UI opens on the study's runs
    parent = ctx.state.get("parent_run_id")
    if parent and ctx.tracker.run_exists(parent):
        ctx.tracker.set_status(parent, "RUNNING")
        ctx.say(f"resuming study {ctx.study.name!r} (MLflow parent run {parent})")
    elif parent:  # never a second parent run in silence
        raise refuse_missing_parent(ctx.study.name, parent, ctx.tracking_uri)
    elif ctx.options.rebuild_state and (
        found := reattach_parent(ctx.tracker, experiment_id, ctx.study.name, ctx.study_dir)
    ):
        parent = found.pop("parent_run_id")
        ctx.update_state(**{k: v for k, v in found.items() if v is not None})
        ctx.say(
            f"rebuilding the state of study {ctx.study.name!r} from its {ctx.study_dir.trial_count()} trial(s): "
            f"MLflow parent run {parent} reused"
        )
    else:
        parent = create_parent(ctx, experiment_id)
    ctx.run = StudyRun(experiment_id, parent)
    ctx.update_state(experiment_id=experiment_id, parent_run_id=parent)


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
