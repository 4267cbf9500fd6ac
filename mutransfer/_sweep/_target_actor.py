"""A target of one CPU worker on Ray, trained by one Ray actor instead of a Ray Train run.

Ray Train's run of one worker starts, besides the worker, a controller and six helper actors (placement-group
cleaner, synchronisation, dataset manager, preemption watcher, autoscaling coordinator, and the early start's order
queue): about 22 CPU-s of process start-ups and imports per run on this project's CI machine, before the target
trains an epoch (docs/architecture.md, "The suite's time"). One CPU worker needs none of them: no torch process
group, no device placement, nothing to synchronise. :class:`ActorTargetRun` trains it in one actor with the
in-process executor's target (:func:`mutransfer._sweep._target_here.train_target_here`: the same trainer, the same
folder layout, ``epoch_NNNNN/`` and ``final/``, the same progress file), and keeps what the Ray Train run does:

- **early start**: the actor starts and takes the data while the last proxies train; its order (or the call-off)
  is a method call, no queue actor;
- **retries**: a worker that dies or fails is replaced by a new actor, up to ``budget.max_failures`` times, which
  resumes from the newest checkpoint in the folder;
- **Ctrl-C**: the driver asks the actor to stop at its next epoch (the stop file), waits up to
  :data:`~mutransfer._sweep.target.STOP_WAIT_S`, then kills it (its checkpoints are whole folders renamed into
  place); the resume continues from the last one;
- **a killed driver**: the actor looks at every epoch, before it writes anything (:func:`driver_gone`), and Ray
  ends the actors a dead driver owned.

Several workers or a GPU keep Ray Train (:func:`mutransfer._sweep.target_run.start_target`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import torch

from mutransfer._study.memory import Plan
from mutransfer._sweep._target_here import TargetJob, train_target_here
from mutransfer._sweep.target import (
    CANCELLED,
    STOP_FILE,
    STOP_WAIT_S,
    TargetOrder,
    TargetOutcome,
    TargetSummary,
    ask_to_stop,
    clear_stop,
    driver_gone,
    driver_identity,
    outcome_of,
)
from mutransfer._training import EpochRecord

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

    from mutransfer._study import Study
    from mutransfer.data._loading import SplitData
    from mutransfer.data._streaming import StreamingSplit


class _Stopped(Exception):
    """Raised in the actor's training when the driver asked it to stop (the stop file)."""


class TargetWorker:
    """The Ray actor (``ray.remote(TargetWorker)``): holds the study's data from its start, trains on its order."""

    def __init__(self, threads: int) -> None:
        torch.set_num_threads(max(1, threads))
        self._job: TargetJob | None = None
        self._driver: dict | None = None

    def prepare(self, job: TargetJob, data: SplitData | StreamingSplit | None, driver: dict) -> bool:
        """Take the job and its data (an object Ray's store passed on) and import what the first training step
        would (``torch._dynamo``, which the first optimizer of a process imports), so that an early start hides it."""
        import torch._dynamo  # noqa: F401, PLC0415 -- deferred: the warm-up, in the actor only

        self._job, self._driver = replace(job, data=data), driver
        return True

    def train(self, order: TargetOrder) -> tuple[dict, str]:
        """Train the prepared job with ``order`` (resumed from its folder's newest checkpoint): (summary, folder)."""
        assert self._job is not None, "prepare() comes first"
        job = replace(self._job, hp=order.hp, plan=order.plan)
        stop = Path(job.storage_dir) / "target" / STOP_FILE
        driver = self._driver

        def look(event: object) -> None:
            # before anything of this epoch is written: a killed driver (Ray would end this actor seconds later) or
            # an interrupted one (its stop file) ends the training here, the scratch folder removed on the way out
            if isinstance(event, EpochRecord) and (driver_gone(driver) or stop.exists()):
                raise _Stopped

        try:
            summary, folder = train_target_here(job, None, look=look)
        except _Stopped:
            return TargetSummary(status=CANCELLED).as_dict(), ""
        return summary.as_dict(), str(folder)


class _Call(Protocol):
    """An actor method as the driver calls it."""

    def remote(self, *args: object) -> ObjectRef: ...


class _Worker(Protocol):
    """A :class:`TargetWorker` actor's handle as the driver calls it (each method's ``.remote``)."""

    prepare: _Call
    train: _Call


class ActorTargetRun:
    """The target of one CPU worker trained by a Ray actor (Ray must be initialised); what
    :class:`~mutransfer._sweep.target_run.TargetRun` is for a Ray Train run, with the same methods."""

    def __init__(
        self,
        study: Study,
        data: SplitData | StreamingSplit | None,
        storage_dir: Path,
        *,
        max_failures: int,
        order: TargetOrder | None,
    ) -> None:
        import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs

        self.started = time.perf_counter()  # the devices count from here, the put of the data included
        self._study, self._max_failures = study, max_failures
        self._folder = Path(storage_dir) / "target"
        clear_stop(self._folder)  # a stop asked for by an interrupted earlier session
        self._job = TargetJob(study, {}, None, Path(storage_dir), False, max_failures)  # the data: by reference
        # on the caller's thread (for an early start, Tune's loop): a split in memory is copied into Ray's store
        # once here, as Ray Train's run put it in its own thread; a streamed split travels as its path and rows
        self._data_ref = ray.put(data)
        self._driver = driver_identity()
        self._failures = 0
        self._order: TargetOrder | None = None
        self._train_ref: ObjectRef | None = None
        self._called_off = False
        self.ordered: float | None = None
        self._actor, self._prepared = self._start()
        if order is not None:
            self.order(order.hp, order.plan)
            self.ordered = self.started

    def _start(self) -> tuple[_Worker, ObjectRef]:
        import ray  # noqa: PLC0415 -- deferred: as above

        threads = int(self._study.target.cpus_per_worker)
        actor = cast(_Worker, ray.remote(TargetWorker).options(num_cpus=threads, max_restarts=0).remote(threads))
        return actor, actor.prepare.remote(self._job, self._data_ref, self._driver)

    def finished(self) -> bool:
        """Whether the run has ended: its training returned, or an actor started early failed to start."""
        import ray  # noqa: PLC0415 -- deferred: as above

        if self._called_off:
            return True
        ref = self._train_ref if self._train_ref is not None else self._prepared
        done, _ = ray.wait([ref], timeout=0)
        if not done:
            return False
        if self._train_ref is not None:
            return True
        try:
            ray.get(ref)
        except Exception:
            return True
        return False

    def order(self, hp: dict, plan: Plan | None = None) -> None:
        """Train now with ``hp`` (a run started early; a run started with its order gives it at once)."""
        if self._order is not None or self._called_off:
            raise RuntimeError("this target run already has its order")
        self._order = TargetOrder(hp, plan)
        self._train_ref = self._actor.train.remote(self._order)
        self.ordered = time.perf_counter()

    def _kill(self) -> None:
        import ray  # noqa: PLC0415 -- deferred: as above

        try:
            ray.kill(cast("ActorHandle", self._actor))
        except Exception:  # Ray is already going away, or the actor is gone
            pass

    def cancel(self, timeout: float = 0.0) -> None:
        """Call the run off: wait up to ``timeout`` seconds for a training asked to stop to return (the stop file),
        then end the actor. A run called off before its order trained nothing; either way :meth:`finished` is then
        True and :meth:`outcome` says CANCELLED."""
        import ray  # noqa: PLC0415 -- deferred: as above

        if self.ordered is None:
            self.ordered = time.perf_counter()
        self._called_off = True
        if self._train_ref is not None and timeout > 0:
            try:
                ray.wait([self._train_ref], timeout=timeout)
            except Exception:  # Ray is already going away
                pass
        self._kill()

    def _result(self, on_poll: Callable[[], None] | None) -> tuple[dict, str]:
        """Wait for the training (``on_poll()`` about every 0.2 s); a failed actor is replaced, up to the budget, and
        the last one ended before the failure is raised (its CPUs go back to the cluster)."""
        import ray  # noqa: PLC0415 -- deferred: as above

        assert self._order is not None and self._train_ref is not None, "order() comes first"
        while True:
            while not ray.wait([self._train_ref], timeout=0.2)[0]:
                if on_poll is not None:
                    on_poll()
            try:
                return ray.get(self._train_ref)
            except Exception:
                self._kill()
                self._failures += 1
                if 0 <= self._max_failures < self._failures:
                    raise
                self._actor, self._prepared = self._start()
                self._train_ref = self._actor.train.remote(self._order)

    def outcome(self, on_poll: Callable[[], None] | None = None) -> TargetOutcome:
        """Wait for the training and return what it trained. Ctrl-C asks the actor to stop at its next epoch, waits
        up to :data:`STOP_WAIT_S` (a second Ctrl-C waits no more), ends it, and is raised."""
        if self._called_off:  # called off: it trained nothing the study keeps
            raw, folder = TargetSummary(status=CANCELLED).as_dict(), ""
        else:
            try:
                raw, folder = self._result(on_poll)
            except KeyboardInterrupt:
                ask_to_stop(self._folder)
                try:
                    self.cancel(STOP_WAIT_S)
                except KeyboardInterrupt:
                    self._kill()
                raise
        if on_poll is not None:
            on_poll()
        summary = TargetSummary.from_dict(raw)
        end = time.perf_counter()
        ordered = self.ordered if self.ordered is not None else end
        return outcome_of(
            summary,
            self._study.target,
            workers=1,
            use_gpu=False,
            checkpoint_dir=folder or None,
            wall_seconds=end - ordered,
            held_seconds=end - self.started,
        )
