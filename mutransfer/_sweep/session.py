"""The values a sweep's steps pass along: what :func:`prepare` found, the open :class:`Session`, and what was made.

A sweep is a short list of steps (mutransfer._sweep.runner). No step shares a mutable context with another; three
typed values flow through them instead:

- :class:`Prepared`: the validated study, its options, folder and tracking store, and the strategies' records known
  before any compute (a warm start's). Made by ``prepare``, before any lock, data, folder or run exists.
- :class:`Session`: a :class:`Prepared` whose study is open: its data read, its lock held, its executor and its
  MLflow parent run made. Made once, by the runner, with every field set (none is Optional).
- :class:`Made`: what the steps made so far (the proxies' results, the transfer, the target, the report, the
  strategies' records). Frozen: each step returns a new one (``step(session, made) -> made``).

What a study keeps across sessions is its folder's ``state.json``; :attr:`Prepared.state` mirrors it (read on
``--resume``, written by :meth:`Prepared.update_state`), so a resumed sweep skips the steps already done.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from mutransfer._study import Override, Study
from mutransfer._study.memory import Plan, plan_step
from mutransfer._study_folder.state import StudyDir
from mutransfer._sweep._ledger import Booked
from mutransfer._sweep.context import (
    FinalSearch,
    NotMadeYet,
    ProxyResults,
    StrategyRecord,
    StudyData,
    StudyRun,
    SweepOptions,
    TrainedTarget,
    TransferResult,
)
from mutransfer._tracking.runs import Tracker

if TYPE_CHECKING:
    from mutransfer._study_folder.lock import StudyLock
    from mutransfer._sweep.target import TargetOutcome
    from mutransfer._sweep.target_run import RunningTarget
    from mutransfer.data._loading import SplitData
    from mutransfer.data._streaming import StreamingSplit
    from mutransfer.data._validation import SelectionSplit

R = TypeVar("R")


class EarlyStart(Protocol):
    """The target's run started while the last proxies train (mutransfer._sweep.early_target.EarlyTarget), or
    :data:`NO_EARLY_TARGET`."""

    def start(self, live_trials: int) -> None: ...

    def take(self, storage_dir: Path) -> RunningTarget | None: ...

    def cancel(self, timeout: float = ...) -> None: ...

    def trial_retried(self) -> None: ...


class _NoEarlyTarget:
    """A study whose target starts in its own step (``target.start_early: false``, a strategy that trains the target
    otherwise, an in-process executor): nothing starts, nothing is taken."""

    def start(self, live_trials: int) -> None:
        return None

    def take(self, storage_dir: Path) -> RunningTarget | None:
        return None

    def cancel(self, timeout: float = 10.0) -> None:
        return None

    def trial_retried(self) -> None:
        return None


NO_EARLY_TARGET: EarlyStart = _NoEarlyTarget()


def _of_kind(records: Mapping[str, StrategyRecord], name: str, kind: type[R]) -> R | None:
    found = records.get(name)
    return found if isinstance(found, kind) else None


class StateMirror:
    """The study folder's ``state.json`` as this driver last read or wrote it (the one mutable part of a sweep's
    values: the file is what a resume reads)."""

    def __init__(self, current: dict):
        self.current = current


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A validated study, before any compute (mutransfer._sweep.prepare.prepare).

    ``overrides``: the flags applied to the study file; ``source_text``: the YAML the study was read from;
    ``fail_trials``: trials to fail on purpose (fault tests: MUTRANSFER_FAIL_TRIALS); ``records``: the strategies'
    records known before any compute (a warm start's source), by strategy name; ``wall_start``: when this driver
    began (``time.perf_counter``).
    """

    options: SweepOptions
    study: Study
    study_dir: StudyDir
    overrides: tuple[Override, ...]
    tracking_uri: str
    source_text: str
    fail_trials: int
    tracker: Tracker
    store: StateMirror
    records: Mapping[str, StrategyRecord] = field(default_factory=dict)
    wall_start: float = field(default_factory=time.perf_counter)
    #: the memory plans made so far, by (target model?, device kind, workers, data channels): see memory_plan
    plans: dict[tuple[bool, str, int, tuple[int, int]], Plan | None] = field(default_factory=dict, compare=False)

    @property
    def state(self) -> dict:
        """The study folder's ``state.json`` as last read or written ({} for a study not started)."""
        return self.store.current

    def update_state(self, **changes: object) -> None:
        """Write ``changes`` into ``state.json`` (atomically, over what the file holds)."""
        self.store.current = self.study_dir.update_state(**changes)

    def write_state(self, state: dict) -> None:
        """Write ``state`` as the whole ``state.json``."""
        self.study_dir.write_state(state)
        self.store.current = state

    def reload_state(self) -> None:
        """Read ``state.json`` again (what a search or another driver wrote there)."""
        self.store.current = self.study_dir.read_state()

    def record(self, name: str, kind: type[R]) -> R | None:
        """The record of strategy ``name`` known before any compute, if it has one of type ``kind``."""
        return _of_kind(self.records, name, kind)

    def say(self, text: str) -> None:
        """A progress line on stderr (stdout is kept for the report), unless quiet."""
        if not self.options.quiet:
            print(text, file=sys.stderr, flush=True)

    def memory_plan(
        self, *, target: bool, device: str, workers: int = 1, channels: tuple[int, int] = (1, 1)
    ) -> Plan | None:
        """The memory plan of the proxy's or the target's model (mutransfer._study.memory.plan_step), made once.

        The driver checks it against this machine (prepare) and hands the same plan to the trials and target
        workers that train the model, who hold it against their device instead of planning again. ``workers``: the
        Ray Train workers the batch is split over (the target's); ``channels``: the data's (input, output) channels
        ((1, 1) before the data are read: the generated problems' channels, and a lower bound for a data file's).
        A nested search (a ladder rung, the direct baseline) plans its own models (mutransfer._sweep.proxies).
        """
        key = (target, device, workers, channels)
        if key not in self.plans:
            self.plans[key] = plan_step(self.study, target=target, device=device, workers=workers, channels=channels)
        return self.plans[key]


@dataclass(frozen=True, kw_only=True)
class Session(Prepared):
    """An open study (mutransfer._sweep.runner): made once its data are read, its lock held, Ray (or the in-process
    executor) started and its MLflow parent run opened; every field set.

    ``study_data``: the study's data (:class:`StudyData`); ``lock``: the study's lock; ``executor``: where its
    trainings run, each booked in the study's cost ledger (mutransfer._sweep._ledger); ``run``: the MLflow experiment
    and parent run its trainings log under; ``early``: the target's run started while the last proxies train
    (:data:`NO_EARLY_TARGET`: none); ``prior_wall``: wall seconds of earlier sessions of the study;
    ``setup_seconds``: from the driver's start to the open session.
    """

    study_data: StudyData
    lock: StudyLock
    executor: Booked
    run: StudyRun
    early: EarlyStart = NO_EARLY_TARGET
    prior_wall: float = 0.0
    setup_seconds: float = 0.0

    @classmethod
    def of(
        cls,
        p: Prepared,
        *,
        study_data: StudyData,
        lock: StudyLock,
        executor: Booked,
        run: StudyRun,
        early: EarlyStart = NO_EARLY_TARGET,
        prior_wall: float = 0.0,
        setup_seconds: float = 0.0,
    ) -> Session:
        """The open session of the prepared study ``p`` (the same study, folder, tracker, state and plans)."""
        return cls(
            options=p.options,
            study=p.study,
            study_dir=p.study_dir,
            overrides=p.overrides,
            tracking_uri=p.tracking_uri,
            source_text=p.source_text,
            fail_trials=p.fail_trials,
            tracker=p.tracker,
            store=p.store,
            records=p.records,
            wall_start=p.wall_start,
            plans=p.plans,
            study_data=study_data,
            lock=lock,
            executor=executor,
            run=run,
            early=early,
            prior_wall=prior_wall,
            setup_seconds=setup_seconds,
        )

    @property
    def data(self) -> SplitData | StreamingSplit:
        """The fit split (:attr:`StudyData.fit`): the final models train on it and report on its test rows."""
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
    def experiment_id(self) -> str:
        return self.run.experiment_id

    @property
    def parent_id(self) -> str:
        return self.run.parent_id

    def memory_plan(
        self, *, target: bool, device: str, workers: int = 1, channels: tuple[int, int] | None = None
    ) -> Plan | None:
        """:meth:`Prepared.memory_plan` for the channels of the study's data."""
        return super().memory_plan(
            target=target, device=device, workers=workers, channels=channels or self.study_data.channels
        )

    @property
    def wall_seconds(self) -> float:
        """Wall time of the study so far, across resumed sessions."""
        return self.prior_wall + time.perf_counter() - self.wall_start


@dataclass(frozen=True)
class Made:
    """What the sweep's steps made so far; each step returns a new one (``dataclasses.replace``).

    A record is read through a property that is never None (``proxies``, ``transfer``, ``target``): the record, or
    :class:`NotMadeYet` naming the step that makes it (a step placed before it). The fields they read
    (``made_proxies``, ``made_transfer``, ``trained``) are for the few places that may find none.
    ``records``: the search strategies' records (mutransfer._sweep.strategies: "ladder", "top_k", "warm_start",
    "verification", "direct_baseline"), by name; a strategy that is not active has none.
    """

    records: Mapping[str, StrategyRecord] = field(default_factory=dict)
    made_proxies: ProxyResults | None = None
    #: the search the target draws from when it is not the proxies (a ladder's last rung, mutransfer._sweep.ladder)
    final_search: FinalSearch | None = None
    made_transfer: TransferResult | None = None
    #: the target's outcome and the MLflow run it was trained in (the target step, or top-k's)
    trained: TrainedTarget | None = None
    report: dict | None = None

    @property
    def proxies(self) -> ProxyResults:
        """The proxy search's results; :class:`NotMadeYet` before the proxy step."""
        if self.made_proxies is None:
            raise NotMadeYet("the proxies' results", "the proxy phase (run_proxies)")
        return self.made_proxies

    @property
    def transfer(self) -> TransferResult:
        """The transfer's record and the target's hyperparameters; :class:`NotMadeYet` before the transfer."""
        if self.made_transfer is None:
            raise NotMadeYet("the transfer", "the transfer phase (transfer_phase, or top-k's)")
        return self.made_transfer

    @property
    def target_trained(self) -> TrainedTarget:
        if self.trained is None:
            raise NotMadeYet("the target", "the target phase (train_target, or top-k's)")
        return self.trained

    @property
    def target(self) -> TargetOutcome:
        """The trained target; :class:`NotMadeYet` before the target step."""
        return self.target_trained.outcome

    @property
    def target_run_id(self) -> str:
        """The MLflow run the target was trained in."""
        return self.target_trained.run_id

    def record(self, name: str, kind: type[R]) -> R | None:
        """The record of strategy ``name`` if it has one of type ``kind`` (None when the strategy is not active)."""
        return _of_kind(self.records, name, kind)

    def with_record(self, name: str, record: StrategyRecord) -> Made:
        """This value with strategy ``name``'s record set to ``record``."""
        return dataclasses.replace(self, records={**self.records, name: record})

    def final(self, study: Study) -> FinalSearch:
        """The search the target draws from: a ladder's last rung (``final_search``), else the proxies."""
        if self.final_search is not None:
            return self.final_search
        return FinalSearch(self.proxies.trials, self.proxies.best, study)
