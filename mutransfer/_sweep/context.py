"""The typed records a sweep's steps make and pass along (mutransfer._sweep.session carries them), and its options.

:class:`SweepOptions`: what the command line (or the Python API) asked for; :class:`ProxyResults`,
:class:`TransferResult`, :class:`FinalSearch`, :class:`TrainedTarget`: what the proxy, transfer and target steps
make; :class:`StudyData` and :class:`StudyRun`: the study's data and MLflow runs, as an open session holds them. The
study directory's ``state.json`` keeps the records (as their ``as_dict()``), so a resumed sweep skips the steps
already done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mutransfer._config.checks import VERIFY_POINTS, VERIFY_SEEDS
from mutransfer._study import Study
from mutransfer._study_folder.records import TrialRecord
from mutransfer._study_folder.state import REBUILD_HINT
from mutransfer._sweep._executors import TrialCallback
from mutransfer.errors import UserInputError

if TYPE_CHECKING:
    import optuna

    from mutransfer._sweep.target import TargetOutcome
    from mutransfer.data._loading import SplitData
    from mutransfer.data._streaming import StreamingSplit
    from mutransfer.data._validation import SelectionSplit


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
    #: an Optuna pruner object in place of the study's ASHA (mutransfer.create_study(pruner=...); mutransfer._sweep._asha)
    pruner: optuna.pruners.BasePruner | None = None
    #: fixed parameters of trials enqueued before the study's journal existed (mutransfer.Study.enqueue_trial), run
    #: first by its own search (mutransfer._sweep.plan.SearchPlan)
    enqueued: tuple[dict, ...] = ()
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
    """What a search strategy (mutransfer._sweep.strategies) keeps (mutransfer._sweep.session.Made.records): a record ``state.json`` can hold."""

    def as_dict(self) -> dict: ...


#: state.json's (and the report's) record of the K rule's exponent measured from the data (operator.k_exponent:
#: data; mutransfer._diagnostics.k_exponent.KExponentEstimate.as_dict)
K_RULE_KEY = "k_rule"
#: state.json's record of the cost estimate said before training (mutransfer._sweep.cost_estimate.ProxyCost.as_dict)
COST_KEY = "cost_estimate"
