"""The population executor on Ray (``--executor ray-population``): a search's window grouped into populations as the
in-process population executor groups it (mutransfer._sweep.trial.population_groups), each population, and each
trial that trains alone, one Ray task, all of a window's tasks at once, so a cluster trains several populations at a
time. The target (Ray Train, or one Ray actor) and ``--verify``'s grids run as on :class:`RayExecutor`.

A task's trials send each evaluation to the driver through the search's :class:`_Desk` (a Ray actor holding no CPU)
and wait for the answer: whether ASHA stops the trial there, decided by the study's plan in the driver, as for every
executor. The plan judges a trial only against trials that finished before its window started, so the answers (and
the trials) do not depend on which task reports first: a seeded study trains the same trials as on the in-process
population executor. A task that fails (an exception, a lost node) sends its trials that had not ended to train
alone, each as its own task, within the study's retries (``budget.max_failures``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from mutransfer._sweep._executors import (
    Grouping,
    LocalTrial,
    Pruned,
    RayExecutor,
    SearchRun,
    complete_trial,
    take_window,
    tell_trial,
)
from mutransfer._sweep.trial import Together, run_population, run_trial

if TYPE_CHECKING:
    from ray.actor import ActorHandle

#: seconds the driver waits for a question before it looks for ended tasks
_POLL_S = 0.05


class _Desk:
    """Between a search's tasks and its driver: the tasks' questions in the order they came, one answer box per task
    (an async Ray actor: a task waits on its box without holding the actor)."""

    def __init__(self) -> None:
        self._questions: asyncio.Queue[tuple[int, str, dict]] = asyncio.Queue()
        self._boxes: dict[int, asyncio.Queue[bool]] = {}

    def _box(self, unit: int) -> asyncio.Queue[bool]:
        return self._boxes.setdefault(unit, asyncio.Queue())

    async def ask(self, unit: int, key: str, metrics: dict) -> bool:
        """A task's question (trial ``key`` reported ``metrics``); returns the driver's answer: stop it?"""
        await self._questions.put((unit, key, metrics))
        return await self._box(unit).get()

    async def next_question(self, timeout: float) -> tuple[int, str, dict] | None:
        try:
            return await asyncio.wait_for(self._questions.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def answer(self, unit: int, stop: bool) -> None:
        await self._box(unit).put(stop)


def _train_unit(unit: int, group: list[Together] | None, solo: tuple[str, dict] | None, data, study, options, desk):
    """In a Ray worker: train a population (``group``) or one trial alone (``solo``), each evaluation asked of the
    driver through ``desk``; raises what the training raised."""
    import ray  # noqa: PLC0415 -- deferred: runs in a Ray worker

    def ask(key: str, metrics: dict) -> bool:
        return bool(ray.get(desk.ask.remote(unit, key, metrics)))

    torch.set_num_threads(max(1, int(options.get("threads", 1))))  # the trial's CPUs, as a trial alone sets them

    if group is not None:
        run_population(group, data, options, ask)
        return
    assert solo is not None
    key, config = solo

    def report(metrics: dict) -> None:
        if ask(key, metrics):
            raise Pruned

    try:
        run_trial(key, config, data, study, options, report)
    except Pruned:
        pass


@dataclass
class _Unit:
    """One task of a window: its trials (a population's, or one), which of them ended, when it started."""

    index: int
    trials: dict[str, LocalTrial]
    group: list[Together] | None = None
    solo: tuple[str, dict] | None = None
    ended: set[str] = field(default_factory=set)
    start: float = field(default_factory=time.perf_counter)


class RayPopulationExecutor(RayExecutor):
    """:class:`RayExecutor` whose searches train each window's populations as Ray tasks (see the module docstring)."""

    name = "ray-population"
    grouping: Grouping = Grouping()  # the last search's (one per search, made by search())

    def search_note(self, window: int) -> str | None:
        if window < 2:
            return "population executor on Ray: a window of 1 trial trains each alone (raise search.max_concurrent)"
        return (
            f"population executor on Ray: the trials of each window (up to {window}) train as one batched model per "
            "batch size, each population a Ray task, at once; a trial with no partner, another model or precision "
            "trains alone in its own task"
        )

    def search_summary(self) -> str | None:
        return self.grouping.line("population executor on Ray")

    def search(self, run: SearchRun) -> None:
        import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs

        self.grouping = Grouping()
        desk: ActorHandle = ray.remote(num_cpus=0)(_Desk).remote()  # type: ignore[assignment]
        data = ray.put(run.data)
        r = run.study.resources
        task = ray.remote(num_cpus=r.cpus_per_trial, num_gpus=r.gpus_per_trial, max_retries=0)(_train_unit)

        def submit(unit: _Unit):
            return task.remote(unit.index, unit.group, unit.solo, data, run.study, run.options, desk)

        try:
            while window := take_window(run.plan):
                self._window(run, window, desk, submit)
        finally:
            ray.kill(desk)

    def _window(self, run: SearchRun, window: list[tuple[str, dict]], desk, submit: Callable[[_Unit], object]) -> None:
        import ray  # noqa: PLC0415 -- deferred: as above

        populations, alone = self.grouping.split(run, window)
        configs = dict(window)
        units: list[_Unit] = []
        for group in populations:
            units.append(_Unit(len(units), {t.key: _started(run, t.key, configs[t.key]) for t in group}, group=group))
        for key, config in alone:
            units.append(_Unit(len(units), {key: _started(run, key, config)}, solo=(key, config)))
        pending = {submit(u): u for u in units}
        try:
            while pending:
                _answer(run, desk, units)
                done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
                for ref in done:
                    unit = pending.pop(ref)
                    try:
                        ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 -- any failure: its trials retry alone, or fail
                        for again in self._failed(run, unit, exc, configs, len(units)):
                            units.append(again)
                            pending[submit(again)] = again
                        continue
                    for key, trial in unit.trials.items():
                        if key not in unit.ended:
                            complete_trial(run, trial)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def _failed(self, run: SearchRun, unit: _Unit, exc: BaseException, configs: dict, count: int) -> list[_Unit]:
        """A task failed: each of its trials that had not ended trains alone in a task of its own while it has retries
        left; one out of retries is recorded failed."""
        again: list[_Unit] = []
        for key, trial in unit.trials.items():
            if key in unit.ended:
                continue
            trial.num_failures += 1
            cause = getattr(exc, "cause", None) or exc  # a RayTaskError carries what the task raised
            trial.error = f"{type(cause).__name__}: {cause}"[:500]
            if run.max_failures < 0 or trial.num_failures <= run.max_failures:
                run.plan.retrying(key, trial.num_failures, trial.error)
                for c in run.callbacks:
                    c.on_trial_recover(trial)
                trial.status = "RUNNING"
                again.append(_Unit(count + len(again), {key: trial}, solo=(key, configs[key])))
                continue
            trial.status = "ERROR"
            run.plan.record(key, dict(trial.last_result), failed=True, error=trial.error)
            for c in run.callbacks:
                c.on_trial_error(trial)
        return again


def _answer(run: SearchRun, desk, units: list[_Unit]) -> None:
    """Answer the questions the tasks asked (each trial's evaluation: does ASHA stop it?), waiting a little for one."""
    import ray  # noqa: PLC0415 -- deferred: as above

    timeout = _POLL_S
    while (question := ray.get(desk.next_question.remote(timeout))) is not None:
        index, key, metrics = question
        unit = units[index]
        stop = tell_trial(run, unit.trials[key], unit.start, metrics)
        if stop:  # ASHA stopped it: its outcome now, as a trial alone's (a resume must not train it on)
            unit.ended.add(key)
            complete_trial(run, unit.trials[key])
        ray.get(desk.answer.remote(index, stop))
        timeout = 0.0


def _started(run: SearchRun, key: str, config: dict) -> LocalTrial:
    trial = LocalTrial(key, dict(config, trial_key=key), status="RUNNING")
    for c in run.callbacks:
        c.on_trial_start(trial)
    return trial
