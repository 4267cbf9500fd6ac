"""The driver's side of the target's run on Ray: start it (with its order, or early, waiting for it), wait for it.

One CPU worker: one Ray actor (mutransfer._sweep._target_actor); several workers or a GPU: a Ray Train run.

:func:`run_target` trains the target with its hyperparameters; :func:`start_target` without an order starts the run
early (mutransfer._sweep.early_target), and :class:`TargetRun` gives the order, calls the run off, or waits for its
:class:`~mutransfer._sweep.target.TargetOutcome`. The workers' side (the loop each Ray Train worker runs, the summary
they return, the progress file) is mutransfer._sweep.target.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from mutransfer._study.memory import Plan
from mutransfer._sweep._target_actor import ActorTargetRun
from mutransfer._sweep.target import (
    PROGRESS_FILE,
    STOP_WAIT_S,
    SUMMARY_FILE,
    TargetOrder,
    TargetOutcome,
    TargetSummary,
    ask_to_stop,
    clear_stop,
    driver_identity,
    outcome_of,
    target_loop,
)


class RunningTarget(Protocol):
    """A target's run on Ray as the driver holds it: a Ray Train run (:class:`TargetRun`) or, for one CPU worker, a
    Ray actor (:class:`mutransfer._sweep._target_actor.ActorTargetRun`)."""

    #: when the run was started, and when its order was given (None until then), in ``time.perf_counter()`` seconds
    started: float
    ordered: float | None

    def finished(self) -> bool: ...

    def order(self, hp: dict, plan: Plan | None = None) -> None: ...

    def cancel(self, timeout: float = ...) -> None: ...

    def outcome(self, on_poll: Callable[[], None] | None = None) -> TargetOutcome: ...


def on_one_actor(workers: int, use_gpu: bool) -> bool:
    """Whether a target of ``workers`` workers (on a GPU or not) trains in one Ray actor (one CPU worker: no process
    group to start, nothing to place on a device) rather than a Ray Train run (DDP's all-reduce, or the device
    placement TorchTrainer does)."""
    return workers == 1 and not use_gpu


def _on_this_node():
    """Ray's scheduling strategy that places an actor on the driver's node: the early target's order queue lives and
    dies with the driver, not with a worker node the cluster may lose while the run waits."""
    import ray  # noqa: PLC0415 -- deferred: as in start_target
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415 -- deferred: as above

    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)


def resolve_use_gpu(setting, cluster_gpus: float) -> bool:
    if setting == "auto":
        return cluster_gpus >= 1
    return bool(setting)


def run_target(
    study,
    hp: dict,
    data,
    storage_dir: Path,
    *,
    use_gpu: bool,
    max_failures: int,
    on_poll=None,
    plan: Plan | None = None,
    ray_train: bool = False,
) -> TargetOutcome:
    """Train the target on Ray (Ray must be initialised): :func:`start_target` with its order, then its outcome.
    Resumes from ``storage_dir/target``.

    ``plan``: the target's memory plan per worker, made by the driver (Session.memory_plan);
    each worker holds it against its device (None: each worker plans the model itself).

    Rank 0 appends each evaluation to ``storage_dir/target/progress.jsonl`` (:func:`read_progress`);
    ``on_poll()`` is called about every 0.2 s while the target trains (the driver's live display).

    One CPU worker trains in one Ray actor, without Ray Train (mutransfer._sweep._target_actor: the same trainer,
    folder and checkpoints, equal results: tests/sweep/test_target_startup.py); several workers or a GPU with Ray
    Train's TorchTrainer, torch's process group started on loopback. ``ray_train``: TorchTrainer whatever the workers
    (the tests compare the two on one worker).
    """
    run = start_target(
        study, data, storage_dir, use_gpu=use_gpu, max_failures=max_failures, ray_train=ray_train,
        order=TargetOrder(hp, plan),
    )  # fmt: skip
    return run.outcome(on_poll)


def start_target(
    study,
    data,
    storage_dir: Path,
    *,
    use_gpu: bool,
    max_failures: int,
    order: TargetOrder | None,
    ray_train: bool = False,
) -> RunningTarget:
    """Start the target's run (:class:`RunningTarget`); ``run_target`` is this and its outcome.

    One CPU worker (:func:`on_one_actor`; unless ``ray_train``): a Ray actor
    (:class:`~mutransfer._sweep._target_actor.ActorTargetRun`); otherwise Ray Train's ``fit()`` in a thread
    (:class:`TargetRun`), torch's process group on loopback (mutransfer._sweep.loopback_group).

    ``order`` None starts it early: the workers start, load the data and wait for :meth:`TargetRun.order`
    (or :meth:`TargetRun.cancel`), so the start-up (Ray Train's controller and helper actors, the worker's process
    and imports: mutransfer._sweep.early_target) can run while the last proxies train.
    """
    t = study.target
    if not ray_train and on_one_actor(t.num_workers, use_gpu):
        return ActorTargetRun(study, data, storage_dir, max_failures=max_failures, order=order)
    import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)
    from ray.util.queue import Queue  # noqa: PLC0415 -- deferred: as above

    # The Train controller polls its workers at this interval (Ray's default 2 s); every report (a checkpoint) and the
    # end of the run wait for a poll: measured on a 60-epoch toy target (docs/sweep.md), a report cost 0.5 s at 0.5 s
    # and 0.12 s at 0.1 s, and the training itself was no slower.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
    resources = {"CPU": t.cpus_per_worker}
    if use_gpu:
        resources["GPU"] = 1
    clear_stop(Path(storage_dir) / "target")  # a stop asked for by an interrupted earlier session
    orders = None if order is not None else Queue(actor_options={"num_cpus": 0, "scheduling_strategy": _on_this_node()})
    driver = driver_identity()

    def make_trainer():
        # in the run's thread: importing Ray Train (1.7 s in a driver that has imported Ray Tune) and putting the data
        # in Ray's store do not hold up the caller (for an early start, Tune's loop)
        from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig  # noqa: PLC0415 -- deferred: as above
        from ray.train.torch import TorchTrainer  # noqa: PLC0415 -- deferred: as above

        from mutransfer._sweep.loopback_group import LoopbackTorchConfig  # noqa: PLC0415 -- deferred: imports Ray

        return TorchTrainer(
            target_loop,
            train_loop_config={
                "study": study,
                "order": order,
                "orders": orders,
                "epochs": t.epochs,
                "threads": t.cpus_per_worker,
                "data_ref": ray.put(data),
                "progress_file": str(Path(storage_dir) / "target" / PROGRESS_FILE),
                "driver": driver,
            },
            scaling_config=ScalingConfig(num_workers=t.num_workers, use_gpu=use_gpu, resources_per_worker=resources),
            torch_config=LoopbackTorchConfig(backend="nccl" if use_gpu else "gloo"),  # the rendezvous on 127.0.0.1
            run_config=RunConfig(
                name="target",
                storage_path=str(storage_dir),
                failure_config=FailureConfig(max_failures=max_failures),
                checkpoint_config=CheckpointConfig(num_to_keep=2),
            ),
        )

    return TargetRun(make_trainer, orders, study.target, use_gpu, Path(storage_dir) / "target")


class TargetRun:
    """A target's Ray Train ``fit()`` running in a thread of the driver.

    Off the main thread Ray Train installs no SIGINT handler (on the main thread its handler ends
    the process, exit 1, without letting the driver record the interruption), so Ctrl-C raises
    KeyboardInterrupt in :meth:`outcome`; the run's workers are asked to stop at their next epoch (the driver waits
    up to :data:`STOP_WAIT_S`, or until a second Ctrl-C), then the driver marks the runs KILLED and shuts Ray down.
    """

    def __init__(self, make_trainer, orders, target, use_gpu: bool, folder: Path):
        self._orders, self._target, self._use_gpu, self._folder = orders, target, use_gpu, folder
        self._box: dict = {}
        self.started = time.perf_counter()
        #: when the order was given (the start for a run started with its order)
        self.ordered = self.started if orders is None else None
        # Set when fit() has returned. Not Thread.is_alive(): a Thread.join() that Ctrl-C interrupts marks the thread
        # as ended while fit() still runs (CPython 3.11's bpo-45274 handling), and Ray must not shut down under it.
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._fit, args=(make_trainer,), name="mutransfer-target-fit", daemon=True
        )
        self._thread.start()

    def _fit(self, make_trainer) -> None:
        try:
            self._box["result"] = make_trainer().fit()
        except BaseException as exc:  # re-raised on the main thread
            self._box["error"] = exc
        finally:
            self._done.set()

    def finished(self) -> bool:
        """Whether Ray Train's run has ended (a run started early that ended before its order failed to start)."""
        return self._done.is_set()

    def _tell(self, order: TargetOrder | None) -> None:
        if self._orders is None or self.ordered is not None:
            raise RuntimeError("this target run already has its order")
        for _ in range(self._target.num_workers):  # each worker reads one (and puts it back for a restarted worker)
            self._orders.put(order)

    def order(self, hp: dict, plan: Plan | None = None) -> None:
        """A run started early: train now with ``hp`` (each worker receives the order)."""
        self._tell(TargetOrder(hp, plan))
        self.ordered = time.perf_counter()

    def cancel(self, timeout: float = 10.0) -> None:
        """A run started early that will not train: its workers return without training; waits up to ``timeout``
        seconds for Ray Train to finish (``ray.shutdown`` ends whatever is left)."""
        if self.ordered is None:
            try:
                self._tell(None)
            except Exception:  # Ray is already going away: nothing is waiting
                pass
            self.ordered = time.perf_counter()
        self._done.wait(timeout)

    def _stop(self) -> None:
        """Interrupted: ask the workers to stop and wait for Ray Train's run to end (a second Ctrl-C waits no more)."""
        ask_to_stop(self._folder)
        try:
            self.cancel(STOP_WAIT_S)  # a run still waiting for its order is called off; then the wait
        except KeyboardInterrupt:
            pass

    def outcome(self, on_poll=None) -> TargetOutcome:
        """Wait for the run (``on_poll()`` about every 0.2 s, and once after) and return what it trained.

        ``wall_seconds`` counts from the order (what the study waits for); ``device_seconds`` from the run's start
        (the workers' devices were held while they waited); ``head_start_seconds`` is the difference.
        """
        try:
            while not self._done.wait(0.2):
                if on_poll is not None:
                    on_poll()
        except KeyboardInterrupt:
            self._stop()
            raise
        if on_poll is not None:
            on_poll()
        if "error" in self._box:
            raise self._box["error"]
        end = time.perf_counter()
        ordered = self.ordered if self.ordered is not None else end
        result = self._box["result"]
        if result.return_value is None and result.error is None:
            # Ray Train's own Ctrl-C handler aborts the run and returns without a result.
            raise KeyboardInterrupt("target training was aborted")
        raw = result.return_value or {}
        checkpoint_dir = None
        if result.checkpoint is not None:
            checkpoint_dir = result.checkpoint.path
        if not raw and checkpoint_dir and (Path(checkpoint_dir) / SUMMARY_FILE).exists():
            raw = json.loads((Path(checkpoint_dir) / SUMMARY_FILE).read_text())
        summary = TargetSummary.from_dict(raw)
        if summary.test_error is None and result.metrics:
            summary.test_error = result.metrics.get("test_error")
        t = self._target
        return outcome_of(
            summary, t, workers=t.num_workers, use_gpu=self._use_gpu, checkpoint_dir=checkpoint_dir,
            wall_seconds=end - ordered, held_seconds=end - self.started,
        )  # fmt: skip
