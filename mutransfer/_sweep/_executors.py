"""Where a study's trainings run: Ray (Ray Tune trials, a Ray Train target or, for one CPU worker, one Ray actor;
Ray tasks) or this process.

An executor is chosen once per study (``SweepOptions.executor``; ``mutransfer sweep --executor``;
``mutransfer.create_study(executor=...)``) and every bulk training of the study goes through it:

- :meth:`Executor.search`: a search's trials (the proxies, a ladder rung, the direct baseline), handed out by the
  study's :class:`~mutransfer._sweep.plan.SearchPlan` (its configurations and its ASHA decisions);
- :meth:`Executor.target`: the target (and each top-k candidate);
- :meth:`Executor.grid`: independent trainings (``--verify``'s LR grids).

:class:`RayExecutor` is the default (locally and on a cluster). :class:`InProcessExecutor` trains one thing at a
time in the calling process, with the same trial function, trainer, plan, files and MLflow runs: no Ray is started.
:class:`~mutransfer._sweep._population_executor.PopulationExecutor` is the in-process one that trains a window's trials of one proxy shape as one batched
model (mutransfer._training._population), each as it would alone.
It hands out trials with the window a local Ray would have (``local_window``), so a seeded study samples the same
configurations and, trained deterministically, gets the same results on either executor
(tests/sweep/test_executors.py compares them).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from mutransfer._sweep._target_here import TargetJob as TargetJob  # re-exported: the executors' target job
from mutransfer._sweep._target_here import train_target_here
from mutransfer._sweep.cost_estimate import local_window
from mutransfer._sweep.plan import DONE, SearchPlan
from mutransfer._sweep.search import max_concurrent, tune_config
from mutransfer._sweep.target import TargetOutcome, outcome_of
from mutransfer._sweep.trial import run_trial

if TYPE_CHECKING:
    from ray.tune import Callback

    from mutransfer._study import Study
    from mutransfer.data._validation import SelectionSplit


class TrialCallback(Protocol):
    """What a search tells its observers (mutransfer._sweep.trial_logger.TrialLogger, mutransfer._sweep.progress):
    the events of Ray Tune's callbacks, with a trial that has Tune's attributes (:class:`LocalTrial`)."""

    def on_trial_start(self, trial) -> None: ...

    def on_trial_result(self, trial, result: dict) -> None: ...

    def on_trial_recover(self, trial) -> None: ...

    def on_trial_complete(self, trial) -> None: ...

    def on_trial_error(self, trial) -> None: ...


@dataclass(frozen=True)
class SearchRun:
    """One search as an executor runs it: the plan, the data its trials train and select on, the trial options
    (mutransfer._sweep.trial.proxy_trial's), the resources a trial holds, the concurrency and the observers."""

    plan: SearchPlan
    study: Study
    data: SelectionSplit | None
    options: dict
    concurrency: int
    callbacks: Sequence[TrialCallback]
    max_failures: int
    #: Ray only: a Tune experiment's folder (``<study dir>/tune``) and extra Tune callbacks (an early target's)
    tune_dir: Path | None = None
    tune_callbacks: Sequence[Callback] = ()


class Executor(Protocol):
    """Where a study's trainings run (see the module docstring)."""

    name: str

    def session(self, address: str | None, code: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[bool]:
        """Around a study's phases: starts what the executor needs (Ray), yields whether it started it. ``code``:
        the user's modules the study imports, shipped to a cluster's nodes (mutransfer._local_ray)."""
        ...

    def resources(self) -> tuple[float, float]:
        """(CPUs, GPUs) the study's trainings may use."""
        ...

    def search_shape(self, study: Study) -> tuple[int, int]:
        """(window, concurrency) of a new search: the plan's window and how many trials run at once."""
        ...

    def search_note(self, window: int) -> str | None:
        """One line the search's announcement adds about how this executor trains its trials (None: nothing)."""
        ...

    def search_summary(self) -> str | None:
        """One line on how the last search's trials were trained (populations: how many in them, and why the
        others trained alone), said when it ends and kept in the report (None: nothing to say)."""
        ...

    def search(self, run: SearchRun) -> None:
        """Run the plan's remaining trials (its outcomes are recorded in the plan); Ctrl-C raises KeyboardInterrupt."""
        ...

    def target(self, job: TargetJob, on_poll: Callable[[], None] | None) -> TargetOutcome:
        """Train the target (resuming from ``<storage_dir>/target``); ``on_poll`` is called while it trains."""
        ...

    def grid(
        self, fn: Callable[..., dict], jobs: Sequence[tuple], *, threads: int, gpus: float, retries: int
    ) -> Iterator[tuple[int, dict]]:
        """``fn(*job)`` for each job, as they finish: (the job's index, its record); a job that failed after
        ``retries`` retries raises :class:`JobFailed`."""
        ...

    def held_cpus(self, jobs: int, threads: int) -> float:
        """The CPUs ``jobs`` grid jobs of ``threads`` threads each hold while they run (their device-seconds' rate)."""
        ...


class JobFailed(Exception):
    """A grid job failed after its retries: its index in the jobs, and the cause."""

    def __init__(self, index: int, cause: BaseException):
        super().__init__(f"job {index} failed: {cause}")
        self.index, self.cause = index, cause


class RayExecutor:
    """Ray Tune for searches, Ray Train for the target (one Ray actor for one CPU worker), Ray tasks for grids:
    locally (127.0.0.1) or on a cluster."""

    name = "ray"

    @contextlib.contextmanager
    def session(self, address: str | None, code: tuple[str, ...] = ()) -> Iterator[bool]:
        from mutransfer._local_ray import start_ray  # noqa: PLC0415 -- deferred: imports nothing heavy, but only a Ray study needs it

        started = start_ray(address, code)
        try:
            yield started
        finally:
            if started:
                import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)

                ray.shutdown()

    def resources(self) -> tuple[float, float]:
        import ray  # noqa: PLC0415 -- deferred: as above

        r = ray.cluster_resources()
        return float(r.get("CPU", 1.0)), float(r.get("GPU", 0.0))

    def search_shape(self, study: Study) -> tuple[int, int]:
        cpus, gpus = self.resources()
        concurrency = max_concurrent(study, cpus, gpus)  # Tune's limit: more than the cluster holds asks it to grow
        return concurrency, concurrency

    def search_note(self, window: int) -> str | None:
        return None

    def search_summary(self) -> str | None:
        return None

    def search(self, run: SearchRun) -> None:
        from ray import tune  # noqa: PLC0415 -- deferred: as above

        from mutransfer._sweep.trial import proxy_trial  # noqa: PLC0415 -- deferred: kept beside the import of tune
        from mutransfer._sweep.tune_callback import MlflowTrialCallback  # noqa: PLC0415 -- deferred: imports Ray

        assert run.tune_dir is not None, "a Ray search keeps its Tune experiments in <study dir>/tune"
        # Tune's default ("new") console output ignores verbose=0; the classic reporter honours it.
        # Progress comes from mutransfer._sweep.progress instead (a live bar, or one line per finished trial).
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        # Ctrl-C raises KeyboardInterrupt here (the study is resumable from its JSON files and trials
        # are idempotent) instead of Tune's handler, which ends the run quietly and would let the
        # driver carry on to the target with an unfinished sweep.
        os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
        r = run.study.resources
        trainable = tune.with_resources(
            tune.with_parameters(proxy_trial, data=run.data, study=run.study, options=run.options),
            {"cpu": r.cpus_per_trial, "gpu": r.gpus_per_trial},
        )
        run.tune_dir.mkdir(parents=True, exist_ok=True)
        n = 1
        while (run.tune_dir / f"run-{n}").exists():
            n += 1
        tuner = tune.Tuner(
            trainable,
            tune_config=tune_config(run.plan, concurrency=run.concurrency),
            run_config=tune.RunConfig(
                name=f"run-{n}",
                storage_path=str(run.tune_dir),
                callbacks=[*(MlflowTrialCallback(c) for c in run.callbacks), *run.tune_callbacks],
                failure_config=tune.FailureConfig(max_failures=run.max_failures),
                verbose=0,
            ),
        )
        tuner.fit()

    def target(self, job: TargetJob, on_poll: Callable[[], None] | None) -> TargetOutcome:
        from mutransfer._sweep.target_run import run_target  # noqa: PLC0415 -- deferred: imports Ray at call time only

        return run_target(
            job.study, job.hp, job.data, job.storage_dir, use_gpu=job.use_gpu, max_failures=job.max_failures,
            on_poll=on_poll, plan=job.plan,
        )  # fmt: skip

    def grid(
        self, fn: Callable[..., dict], jobs: Sequence[tuple], *, threads: int, gpus: float, retries: int
    ) -> Iterator[tuple[int, dict]]:
        import ray  # noqa: PLC0415 -- deferred: as above

        remote = ray.remote(num_cpus=threads, num_gpus=gpus, max_retries=retries)(fn)
        refs: dict[int, object] = {}  # data shared by several jobs is put in Ray's store once
        pending = {}
        for i, job in enumerate(jobs):
            for a in job:
                if _large(a) and id(a) not in refs:
                    refs[id(a)] = ray.put(a)
            args = [refs[id(a)] if _large(a) else a for a in job]
            pending[remote.remote(*args)] = i
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(done[0])
            try:
                record = ray.get(done[0])
            except Exception as exc:
                raise JobFailed(i, exc) from exc
            yield i, record

    def held_cpus(self, jobs: int, threads: int) -> float:
        return min(self.resources()[0], float(jobs * threads))


def _large(value: object) -> bool:
    """Data splits (anything with ``train_x``) travel through Ray's object store, once."""
    return hasattr(value, "train_x")


class Pruned(Exception):
    """Raised by an in-process trial's report where ASHA stops it (Tune ends its trial at that report)."""


@dataclass
class LocalTrial:
    """An in-process trial as the search's observers read Tune's trials: id, configuration, last result, failures,
    error."""

    trial_id: str
    config: dict
    last_result: dict = field(default_factory=dict)
    num_failures: int = 0
    status: str = "PENDING"
    path: str | None = None
    error_file: str | None = None
    error: str | None = None

    def get_error(self) -> str | None:
        return self.error


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for one training, then put back (the caller's process goes on)."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


class InProcessExecutor:
    """Every training in the calling process, one at a time (notebooks, tests, a machine without Ray)."""

    name = "inprocess"

    @contextlib.contextmanager
    def session(self, address: str | None, code: tuple[str, ...] = ()) -> Iterator[bool]:
        yield False

    def resources(self) -> tuple[float, float]:
        return float(os.cpu_count() or 1), float(torch.cuda.device_count())

    def search_shape(self, study: Study) -> tuple[int, int]:
        return local_window(study), 1

    def search_note(self, window: int) -> str | None:
        return None

    def search_summary(self) -> str | None:
        return None

    def search(self, run: SearchRun) -> None:
        plan = run.plan
        while True:
            nxt = plan.next_trial()
            if nxt == DONE or nxt is None:  # one at a time: every earlier trial has its outcome, so never None
                return
            assert not isinstance(nxt, str)
            key, config = nxt
            self._trial(run, key, config)

    def _trial(self, run: SearchRun, key: str, config: dict, trial: LocalTrial | None = None) -> None:
        """Train trial ``key`` alone, with the plan's retries; ``trial``: its record when its start was already
        told (a population member that trains alone after its population failed)."""
        if trial is None:
            trial = LocalTrial(key, dict(config, trial_key=key))
            for c in run.callbacks:
                c.on_trial_start(trial)
        while True:
            trial.status, start = "RUNNING", time.perf_counter()

            def report(metrics: dict, trial: LocalTrial = trial, start: float = start) -> None:
                if tell_trial(run, trial, start, metrics):
                    raise Pruned

            try:
                with _threads(int(run.options.get("threads", 1))):
                    run_trial(key, config, run.data, run.study, run.options, report)
            except Pruned:
                pass
            except Exception as exc:
                if trial_failed(run, trial, exc):
                    continue
                return
            complete_trial(run, trial)
            return

    def target(self, job: TargetJob, on_poll: Callable[[], None] | None) -> TargetOutcome:
        start = time.perf_counter()
        attempts = 0
        while True:
            try:
                with _threads(int(job.study.target.cpus_per_worker)):
                    summary, folder = train_target_here(job, on_poll)
                break
            except Exception:
                attempts += 1
                if 0 <= job.max_failures < attempts:
                    raise
        if on_poll is not None:
            on_poll()
        wall = time.perf_counter() - start
        return outcome_of(
            summary, job.study.target, workers=1, use_gpu=job.use_gpu, checkpoint_dir=str(folder), wall_seconds=wall,
            held_seconds=wall,
        )  # fmt: skip

    def grid(
        self, fn: Callable[..., dict], jobs: Sequence[tuple], *, threads: int, gpus: float, retries: int
    ) -> Iterator[tuple[int, dict]]:
        for i, job in enumerate(jobs):  # an exception is final, as in a Ray task (its retries are for lost workers)
            try:
                with _threads(threads):
                    record = fn(*job)
            except Exception as exc:
                raise JobFailed(i, exc) from exc
            yield i, record

    def held_cpus(self, jobs: int, threads: int) -> float:
        return float(threads)  # one job at a time


def tell_trial(run: SearchRun, trial: LocalTrial, start: float, metrics: dict) -> bool:
    """One report of a trial trained outside Tune (in this process, or a Ray population's task) to the search's observers; True where the plan stops it there (ASHA)."""
    result = dict(metrics)
    result.setdefault("time_total_s", time.perf_counter() - start)  # a population member's share comes with it
    trial.last_result = result
    for c in run.callbacks:
        c.on_trial_result(trial, result)
    if result.get("diverged") or "epoch" not in result or "val_error" not in result:
        return False
    return run.plan.should_stop(trial.trial_id, int(result["epoch"]), float(result["val_error"]))


def trial_failed(run: SearchRun, trial: LocalTrial, exc: BaseException, *, once_more: bool = False) -> bool:
    """An attempt of a trial trained outside Tune failed with ``exc``: True when it trains again (it has retries
    left, ``budget.max_failures``, or ``once_more``: a population's member trains alone once in any case), told to
    the plan and the observers as a retry; else it is recorded failed, and False."""
    cause = getattr(exc, "cause", None) or exc  # a Ray task's error carries what the task raised
    trial.num_failures += 1
    trial.error = f"{type(cause).__name__}: {cause}"[:500]
    if once_more or run.max_failures < 0 or trial.num_failures <= run.max_failures:
        run.plan.retrying(trial.trial_id, trial.num_failures, trial.error)
        for c in run.callbacks:
            c.on_trial_recover(trial)
        return True
    trial.status = "ERROR"
    run.plan.record(trial.trial_id, dict(trial.last_result), failed=True, error=trial.error)
    for c in run.callbacks:
        c.on_trial_error(trial)
    return False


def complete_trial(run: SearchRun, trial: LocalTrial) -> None:
    """A trial trained outside Tune ended (completed, stopped by the plan, or diverged): its outcome to the plan and the
    observers."""
    trial.status = "TERMINATED"
    run.plan.record(trial.trial_id, dict(trial.last_result), failed=False)
    for c in run.callbacks:
        c.on_trial_complete(trial)
