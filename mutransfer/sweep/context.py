"""The records a sweep's phases pass along, and the context that carries them.

A sweep is a short list of phases over one :class:`SweepContext`
(mutransfer.sweep.runner): each phase reads what earlier phases left on the
context and sets its own typed record (``proxies``, ``transfer``, ``target``,
``report``). The study directory's ``state.json`` keeps those records (as their
``as_dict()``), so a resumed sweep skips the phases already done.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

from mutransfer.study import Override, Study
from mutransfer.study_folder.records import TrialRecord
from mutransfer.study_folder.state import StudyDir


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
    json: bool = False  # the report goes to stdout as JSON: the console shows lines, not a live bar (mutransfer.sweep.progress)
    coord_check: bool = False  # run the coordinate check as a gate before the target
    verify: bool = False  # train the target on an LR grid around the transferred LR (sweep --verify)
    verify_points: int = 5
    verify_seeds: int = 3
    baseline: str | None = None  # "direct": the same search run at the target's size (sweep --baseline direct)
    register: str | None = None  # register the target in MLflow's model registry under this name (sweep --register)
    warm_start: str | None = None  # a study folder or name whose best trials seed this search (sweep --warm-start)
    warm_start_top: int | None = None  # how many (None: max(1, num_trials // 4))
    warm_start_any: bool = False  # accept a source of another problem or operator


def ranked(trials: list[TrialRecord]) -> list[TrialRecord]:
    """Trials with an error, best first: those that ran the full budget by final test error, then the others
    (pruned or diverged) by theirs. Failed trials and trials without an error are left out."""
    def by_error(statuses):
        return sorted((t for t in trials if t.status in statuses and t.test_error is not None),
                      key=lambda t: (t.test_error, t.index))

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
        return {"trials": [t.as_dict() for t in self.trials], "best": self.best.summary(),
                "concurrency": self.concurrency, "proxy_phase_seconds": self.seconds}

    @classmethod
    def from_state(cls, state: dict) -> "ProxyResults":
        trials = [TrialRecord.from_dict(t) for t in state["trials"]]
        best = next(t for t in trials if t.trial_id == state["best"]["trial_id"])
        return cls(trials, best, int(state.get("concurrency", 1)), float(state.get("proxy_phase_seconds", 0.0)))


@dataclass
class TransferResult:
    """The transfer phase's outcome: the record (operators.transfer, as a dict) and the target's hyperparameters."""

    record: dict
    hp: dict


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
    #: the study's lock (mutransfer.study_folder.lock.StudyLock), taken by prepare, released when run_sweep ends
    lock: Any = None
    # set by the phases, in order
    data: Any = None
    data_path: Any = None
    started_ray: bool = False
    tracker: Any = None
    experiment_id: str | None = None
    parent_id: str | None = None
    setup_seconds: float = 0.0
    proxies: ProxyResults | None = None
    transfer: TransferResult | None = None
    target: Any = None  # mutransfer.sweep.target.TargetOutcome
    target_run_id: str | None = None
    top_k: list | None = None  # mutransfer.sweep.topk.Candidate, best proxy first (search.top_k > 1)
    report: dict | None = None
    verification: dict | None = None  # mutransfer.sweep.verify.Verification.as_dict()
    direct_baseline: dict | None = None  # mutransfer.sweep.baseline
    #: the search trains the target's model (the direct-tuning baseline's and a ladder rung's sub-context)
    search_at_target: bool = False
    #: the configurations a nested search runs instead of sampling, without ASHA (a ladder rung's promoted trials)
    preset: list[dict] | None = None
    #: what the search is called on the console ("proxies", "direct search", "rung 1")
    label: str | None = None
    #: tags every trial's MLflow run carries (a ladder: mutransfer.rung)
    trial_tags: dict = field(default_factory=dict)
    ladder: Any = None  # mutransfer.sweep.ladder.LadderResults (a study with a ladder)

    @property
    def search_name(self) -> str:
        return self.label or ("direct search" if self.search_at_target else "proxies")
    #: the warm start (mutransfer.sweep.warm_plan.WarmStart), set by prepare; None for a cold study
    warm_start: Any = None

    def say(self, text: str) -> None:
        """A progress line on stderr (stdout is kept for the report), unless quiet."""
        if not self.options.quiet:
            import sys

            print(text, file=sys.stderr, flush=True)

    def update_state(self, **changes) -> None:
        self.state = self.study_dir.update_state(**changes)

    @property
    def wall_seconds(self) -> float:
        """Wall time of the study so far, across resumed sessions."""
        return self.prior_wall + time.perf_counter() - self.wall_start


def finite_or_none(value) -> float | None:
    """A float, or None for missing/non-finite values (JSON-safe)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None
