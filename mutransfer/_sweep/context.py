"""The records a sweep's phases pass along, and the context that carries them.

A sweep is a short list of phases over one :class:`SweepContext`
(mutransfer._sweep.runner): each phase reads what earlier phases left on the
context and sets its own typed record (``proxies``, ``transfer``, ``target``,
``report``); the search strategies (mutransfer._sweep.strategies: a ladder, top-k,
a warm start, the verification, the direct baseline) keep theirs in ``records``, one
slot per strategy. The study directory's ``state.json`` keeps those records (as their
``as_dict()``), so a resumed sweep skips the phases already done.

A record is read through a property that is never None (``ctx.data``, ``ctx.parent_id``, ``ctx.proxies``,
``ctx.transfer``, ``ctx.target``): the record, or :class:`NotMadeYet` naming the step that makes it (a phase placed
before that step). The fields they read (``loaded``, ``run``, ``made_proxies``, ``made_transfer``, ``trained``) are
for the few places that may find none.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from mutransfer._config.checks import VERIFY_POINTS, VERIFY_SEEDS
from mutransfer._config.executors import chosen_executor
from mutransfer._study import Override, Study
from mutransfer._study.memory import Plan, plan_step
from mutransfer._study_folder.records import TrialRecord
from mutransfer._study_folder.state import REBUILD_HINT, StudyDir
from mutransfer._sweep._executor_names import executor_for
from mutransfer._sweep._executors import TrialCallback
from mutransfer._sweep._ledger import Booked, Ledger
from mutransfer._tracking.runs import Tracker
from mutransfer.errors import UserInputError

if TYPE_CHECKING:
    import optuna

    from mutransfer._study_folder.lock import StudyLock
    from mutransfer._sweep.target import TargetOutcome
    from mutransfer._sweep.target_run import RunningTarget
    from mutransfer.data._loading import SplitData
    from mutransfer.data._streaming import StreamingSplit
    from mutransfer.data._validation import SelectionSplit


class EarlyTarget(Protocol):
    """The target's run started while the last proxies train (mutransfer._sweep.early_target.EarlyTarget)."""

    def start(self, live_trials: int) -> None: ...

    def take(self, storage_dir: Path) -> RunningTarget | None: ...

    def cancel(self, timeout: float = ...) -> None: ...

    def trial_retried(self) -> None: ...


class SweepError(RuntimeError):
    """The sweep ran but could not produce a result (e.g. every proxy trial failed)."""


@dataclass
class SweepOptions:
    study_path: str | None = None
    overrides: dict = field(default_factory=dict)  # keys of mutransfer._study.OVERRIDES
    address: str | None = None
    resume: bool = False
    #: with resume: rebuild a lost or damaged state.json from the trials' files (mutransfer._sweep._rebuild_state)
    rebuild_state: bool = False
    runs_dir: str | None = None
    quiet: bool = False
    json: bool = (
        False  # the report goes to stdout as JSON: the console shows lines, not a live bar (mutransfer._sweep.progress)
    )
    coord_check: bool = False  # run the coordinate check as a gate before the target
    verify: bool = False  # train the target on an LR grid around the transferred LR (sweep --verify)
    verify_points: int = VERIFY_POINTS
    verify_seeds: int = VERIFY_SEEDS
    baseline: str | None = None  # "direct": the same search run at the target's size (sweep --baseline direct)
    register: str | None = None  # register the target in MLflow's model registry under this name (sweep --register)
    warm_start: str | None = None  # a study folder or name whose best trials seed this search (sweep --warm-start)
    warm_start_top: int | None = None  # how many (None: max(1, num_trials // 4))
    warm_start_any: bool = False  # accept a source of another problem or operator
    #: where the trainings run: one of mutransfer._config.executors.EXECUTORS (mutransfer._sweep._executor_names);
    #: None: the study's ``resources.executor`` (set by mutransfer._sweep.prepare.prepare)
    executor: str | None = None
    #: an Optuna sampler object in place of the study's search.algorithm (mutransfer.create_study(sampler=...))
    sampler: optuna.samplers.BaseSampler | None = None
    #: the study's YAML text, given instead of study_path (mutransfer.StudySpec; study_path then only labels it)
    study_text: str | None = None
    #: with study_text: the folder of the file it was read from (its relative problem.data and a factory's module are
    #: found beside it, as --study's; mutransfer.StudySpec.path)
    study_folder: str | None = None
    #: more observers of each search's trials (the Python API's callbacks: mutransfer._sweep._executors.TrialCallback)
    trial_callbacks: tuple[TrialCallback, ...] = ()


def ranked(trials: list[TrialRecord]) -> list[TrialRecord]:
    """Trials with an error, best first: those that ran the full budget by final test error, then the others
    (pruned or diverged) by theirs. Failed trials and trials without an error are left out."""

    def by_error(statuses):
        return sorted(
            (t for t in trials if t.status in statuses and t.val_error is not None),
            key=lambda t: (t.val_error, t.index),
        )

    return by_error(("completed",)) + by_error(("pruned", "diverged"))


def pick_best(trials: list[TrialRecord]) -> TrialRecord | None:
    """Lowest final test error among trials that ran the full budget; else among any that reported."""
    order = ranked(trials)
    return order[0] if order else None


@dataclass
class ProxyResults:
    """The proxy phase's outcome: every trial, the best one, and how many ran at once."""

    trials: list[TrialRecord]
    best: TrialRecord
    concurrency: int
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {
            "trials": [t.as_dict() for t in self.trials],
            "best": self.best.summary(),
            "concurrency": self.concurrency,
            "proxy_phase_seconds": self.seconds,
        }

    @classmethod
    def from_state(cls, state: dict) -> ProxyResults:
        """The records state.json keeps once the proxies are done (its entries' shapes: study_folder.state.check_state);
        a state past the proxies without them is a one-line UserInputError."""
        trials = [TrialRecord.from_dict(t) for t in state.get("trials") or []]
        best_id = (state.get("best") or {}).get("trial_id")
        best = next((t for t in trials if t.trial_id == best_id), None)
        if best is None:
            raise UserInputError(
                f"state.json: phase {state.get('phase')!r} says the proxies are done, but it holds no trials and best "
                f"trial; {REBUILD_HINT}"
            )
        return cls(trials, best, int(state.get("concurrency", 1)), float(state.get("proxy_phase_seconds", 0.0)))


@dataclass
class TransferResult:
    """The transfer phase's outcome: the record (operators.transfer, as a dict) and the target's hyperparameters.

    ``source``: the trial it transferred (the best proxy, or the last ladder rung's best), ``source_key`` its name
    (``r<n>-<key>`` for a rung's trial): computed once by the transfer phase and carried to the target and top-k.
    """

    record: dict
    hp: dict
    source: TrialRecord | None
    source_key: str


@dataclass
class FinalSearch:
    """The search whose best trials go to the target: the proxies, or a model-size ladder's last rung.

    ``study``: the study whose proxy→target step a transfer of these trials takes (with a ladder: the last
    rung's size → the target); ``prefix`` names the trials apart from the proxies' (``r2-``: rung keys restart).
    """

    trials: list[TrialRecord]
    best: TrialRecord
    study: Study
    prefix: str = ""

    def key(self, trial: TrialRecord) -> str:
        """The name of ``trial`` as the target's runs and top-k's candidates carry it."""
        return f"{self.prefix}{trial.trial_id}"


def final_search(ctx: SweepContext) -> FinalSearch:
    """The search the target draws from: ``ctx.final_search`` (set by a ladder), else the proxies."""
    if ctx.final_search is not None:
        return ctx.final_search
    return FinalSearch(ctx.proxies.trials, ctx.proxies.best, ctx.study)


@dataclass(frozen=True)
class StudyData:
    """The study's data, read once before any lock, folder or run (mutransfer._sweep.runner._load_data).

    ``fit``: trains on n_train - n_val samples, evaluates the validation and the test split (the final models);
    ``selection``: the same training samples, the validation samples held out, no test rows (every search);
    ``proxy``: the selection split on the proxy's grid (``proxy_resolution``; the selection split itself without one);
    ``path``: the HDF5 file they were read from.
    """

    fit: SplitData | StreamingSplit
    selection: SelectionSplit
    proxy: SelectionSplit
    path: Path

    @property
    def channels(self) -> tuple[int, int]:
        """The (input, output) channels of the data, read from the fit split's tensors."""
        return int(self.fit.train_x.shape[-1]), int(self.fit.train_y.shape[-1])


@dataclass(frozen=True)
class StudyRun:
    """Where a search logs in MLflow: the study's experiment and the run its trials are children of (the study's
    parent run; a nested search's own run under it)."""

    experiment_id: str
    parent_id: str


@dataclass(frozen=True)
class TrainedTarget:
    """The target phase's outcome (or top-k's winner) and the id of the MLflow run it was trained in."""

    outcome: TargetOutcome
    run_id: str


class NotMadeYet(SweepError):
    """A phase read a record an earlier step makes before that step ran: a phase placed out of order."""

    def __init__(self, what: str, made_by: str) -> None:
        super().__init__(f"{what} is read before {made_by} made it: a phase placed out of order")


class StrategyRecord(Protocol):
    """What a search strategy (mutransfer._sweep.strategies) keeps on the context: a record ``state.json`` can hold."""

    def as_dict(self) -> dict: ...


#: state.json's (and the report's) record of the K rule's exponent measured from the data (operator.k_exponent:
#: data; mutransfer._diagnostics.k_exponent.KExponentEstimate.as_dict)
K_RULE_KEY = "k_rule"
#: state.json's record of the cost estimate said before training (mutransfer._sweep.cost_estimate.ProxyCost.as_dict)
COST_KEY = "cost_estimate"

R = TypeVar("R")


@dataclass
class SweepContext:
    """Everything a sweep's phases share: the validated study and options, then each phase's record."""

    options: SweepOptions
    study: Study
    study_dir: StudyDir
    overrides: list[Override]
    tracking_uri: str
    source_text: str
    state: dict
    fail_trials: int
    wall_start: float = field(default_factory=time.perf_counter)
    #: wall time of earlier sessions of this study (read once, when the context is made)
    prior_wall: float = 0.0
    #: the study's lock, taken after prepare, released when the study's steps end (runner.sweep_steps)
    lock: StudyLock | None = None
    # set before the first phase: read through the properties below, which say what is missing if asked too early
    #: the study's data (mutransfer._sweep.runner._load_data), read before any lock, folder or run exists
    loaded: StudyData | None = None
    started_ray: bool = False
    #: the study's MLflow store (it connects on first use: the parent run is opened once Ray is up)
    tracker: Tracker = field(init=False)
    #: the runs this search logs under, once the session is open (mutransfer._sweep.runner._open_parent_run)
    run: StudyRun | None = None
    setup_seconds: float = 0.0
    # set by the phases, in order: read through the properties below
    made_proxies: ProxyResults | None = None
    #: the search the target draws from when it is not the proxies (a ladder's last rung, mutransfer._sweep.ladder)
    final_search: FinalSearch | None = None
    made_transfer: TransferResult | None = None
    #: the target's outcome and the MLflow run it was trained in (the target phase, or top-k's)
    trained: TrainedTarget | None = None
    report: dict | None = None
    #: the search strategies' records (mutransfer._sweep.strategies), by strategy name: "ladder", "top_k", "warm_start",
    #: "verification", "direct_baseline"; a strategy that is not active has none
    records: dict[str, StrategyRecord] = field(default_factory=dict)
    #: the target's Ray Train run started while the last proxies train (mutransfer._sweep.early_target); None: the
    #: target starts in its phase (``target.start_early: false``, a strategy that trains the target otherwise)
    early_target: EarlyTarget | None = None

    def __post_init__(self) -> None:
        self.tracker = Tracker(self.tracking_uri)

    @property
    def study_data(self) -> StudyData:
        """The study's data; :class:`NotMadeYet` before they are read."""
        if self.loaded is None:
            raise NotMadeYet("the study's data", "the runner (_load_data)")
        return self.loaded

    @property
    def data(self) -> SplitData | StreamingSplit:
        """The fit split (:attr:`StudyData.fit`)."""
        return self.study_data.fit

    @property
    def selection_data(self) -> SelectionSplit:
        """The selection split (:attr:`StudyData.selection`)."""
        return self.study_data.selection

    @property
    def proxy_data(self) -> SelectionSplit:
        """The selection split on the proxy's grid (:attr:`StudyData.proxy`)."""
        return self.study_data.proxy

    @property
    def data_path(self) -> Path:
        return self.study_data.path

    @property
    def opened(self) -> StudyRun:
        """The runs this search logs under; :class:`NotMadeYet` before the session opened them."""
        if self.run is None:
            raise NotMadeYet("the study's MLflow parent run", "the session (_open_parent_run)")
        return self.run

    @property
    def experiment_id(self) -> str:
        return self.opened.experiment_id

    @property
    def parent_id(self) -> str:
        return self.opened.parent_id

    @property
    def proxies(self) -> ProxyResults:
        """The proxy search's results; :class:`NotMadeYet` before the proxy phase."""
        if self.made_proxies is None:
            raise NotMadeYet("the proxies' results", "the proxy phase (run_proxies)")
        return self.made_proxies

    @proxies.setter
    def proxies(self, value: ProxyResults) -> None:
        self.made_proxies = value

    @property
    def transfer(self) -> TransferResult:
        """The transfer's record and the target's hyperparameters; :class:`NotMadeYet` before the transfer."""
        if self.made_transfer is None:
            raise NotMadeYet("the transfer", "the transfer phase (transfer_phase, or top-k's)")
        return self.made_transfer

    @transfer.setter
    def transfer(self, value: TransferResult) -> None:
        self.made_transfer = value

    @property
    def target(self) -> TargetOutcome:
        """The trained target; :class:`NotMadeYet` before the target phase."""
        return self.target_trained.outcome

    @property
    def target_run_id(self) -> str:
        """The MLflow run the target was trained in."""
        return self.target_trained.run_id

    @property
    def target_trained(self) -> TrainedTarget:
        if self.trained is None:
            raise NotMadeYet("the target", "the target phase (train_target, or top-k's)")
        return self.trained

    #: the memory plans of this context's models, by (target model?, device kind, workers, data channels): see
    #: memory_plan
    plans: dict[tuple[bool, str, int, tuple[int, int]], Plan | None] = field(default_factory=dict)

    #: the study's executor, made on first use (its nested searches train through it: mutransfer._sweep.nested)
    booked: Booked | None = field(default=None, repr=False)

    @property
    def executor(self) -> Booked:
        """Where this study's trainings run (``options.executor``; mutransfer._sweep._executors), each booked in the
        study's cost ledger (mutransfer._sweep._ledger)."""
        if self.booked is None:
            name = chosen_executor(self.options.executor, self.study.resources.executor, self.options.address)
            self.booked = Booked(executor_for(name), Ledger(self.study_dir.root))
        return self.booked

    def memory_plan(self, *, target: bool, device: str, workers: int = 1) -> Plan | None:
        """The memory plan of the proxy's or the target's model (mutransfer._study.memory.plan_step), made once.

        The driver checks it against this machine (prepare) and hands the same plan to the
        trials and target workers that train the model, who hold it against their device
        instead of planning again. ``workers``: the Ray Train workers the batch is split over (the
        target's). A nested search (a ladder rung, the direct baseline) plans its own models
        (mutransfer._sweep.proxies). Planned for the data's channels once the data are loaded (1 and 1 before:
        the generated problems' channels, and a lower bound for a data file's, checked again once read).
        """
        channels = self.data_channels
        key = (target, device, workers, channels)
        if key not in self.plans:
            self.plans[key] = plan_step(self.study, target=target, device=device, workers=workers, channels=channels)
        return self.plans[key]

    @property
    def data_channels(self) -> tuple[int, int]:
        """The (input, output) channels of the study's data: read from the loaded tensors, (1, 1) before."""
        return (1, 1) if self.loaded is None else self.loaded.channels

    def record(self, name: str, kind: type[R]) -> R | None:
        """The record of strategy ``name`` if it has one of type ``kind`` (None when the strategy is not active)."""
        found = self.records.get(name)
        return found if isinstance(found, kind) else None

    def say(self, text: str) -> None:
        """A progress line on stderr (stdout is kept for the report), unless quiet."""
        if not self.options.quiet:
            print(text, file=sys.stderr, flush=True)

    def update_state(self, **changes) -> None:
        self.state = self.study_dir.update_state(**changes)

    @property
    def wall_seconds(self) -> float:
        """Wall time of the study so far, across resumed sessions."""
        return self.prior_wall + time.perf_counter() - self.wall_start
