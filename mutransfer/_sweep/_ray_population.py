"""The population executor on Ray (``--executor ray-population``): a search's window grouped into populations as the
in-process population executor groups it (mutransfer._sweep.trial.population_groups), each population, and each
trial that trains alone, one Ray task, all of a window's tasks at once, so a cluster trains several populations at a
time. The target (Ray Train, or one Ray actor) and ``--verify``'s grids run as on :class:`RayExecutor`.

A task's trials send each evaluation to the driver through the search's :class:`_Desk` (a Ray actor holding no CPU)
and wait for the answer: whether ASHA stops the trial there, decided by the study's plan in the driver, as for every
executor. The plan judges a trial only against trials that finished before its window started, so the answers (and
the trials) do not depend on which task reports first: a seeded study trains the same trials as on the in-process
population executor. A task that fails (an exception, a lost node) sends its trials that had not ended to train
again alone, each in a task of its own: a population's once in any case (as in process), a lone trial's within the
study's retries (``budget.max_failures``). A population's size is bounded by the driver's free memory of the trials'
device kind where it has that device (mutransfer._sweep.trial.population_groups), and again in the task by its own
node's (mutransfer._sweep.trial.run_population), which can only split the group further.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from mutransfer._sweep._executors import (
    LocalTrial,
    Pruned,
    RayExecutor,
    SearchRun,
    complete_trial,
    tell_trial,
    trial_failed,
)
from mutransfer._sweep._population_executor import Grouping, population_note, take_window
from mutransfer._sweep.trial import Together, rebuilt_group, run_population, run_trial

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from mutransfer._study import Study
    from mutransfer.data._validation import SelectionSplit

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
        box = self._box(unit)
        stop = await box.get()
        if box.empty():  # a task asks again only after its answer: its box is made again then, not kept meanwhile
            self._boxes.pop(unit, None)
        return stop

    async def next_question(self, timeout: float) -> tuple[int, str, dict] | None:
        """The oldest question, waiting up to ``timeout`` seconds for one (0: none waited for)."""
        if timeout <= 0:
            try:
                return self._questions.get_nowait()
            except asyncio.QueueEmpty:
                return None
        try:
            return await asyncio.wait_for(self._questions.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def answer(self, unit: int, stop: bool) -> None:
        await self._box(unit).put(stop)


def _train_unit(
    unit: int,
    group: list[tuple[str, dict]] | None,
    solo: tuple[str, dict] | None,
    data: SelectionSplit | None,
    study: Study,
    options: dict,
    desk: ActorHandle,
) -> list[int]:
    """In a Ray worker: train a population (``group``: its trials' keys and configurations, its models built here)
    or one trial alone (``solo``), each evaluation asked of the
    driver through ``desk`` (with the seconds since this task started, where the training does not say them);
    returns the sizes of the populations trained (none for a trial alone); raises what the training raised."""
    import ray  # noqa: PLC0415 -- deferred: runs in a Ray worker

    start = time.perf_counter()

    def ask(key: str, metrics: dict) -> bool:
        timed = dict(metrics)
        timed.setdefault("time_total_s", time.perf_counter() - start)  # not the wait before the task started
        return bool(ray.get(desk.ask.remote(unit, key, timed)))

    torch.set_num_threads(max(1, int(options.get("threads", 1))))  # the trial's CPUs, as a trial alone sets them
    if group is not None:
        return run_population(rebuilt_group(group, data, study, options), data, options, ask)
    assert solo is not None
    key, config = solo

    def report(metrics: dict) -> None:
        if ask(key, metrics):
            raise Pruned

    try:
        run_trial(key, config, data, study, options, report)
    except Pruned:
        pass
    return []


@dataclass
class _Unit:
    """One task: its id (unique in its search), its trials (a population's, or one), which of them ended."""

    id: int
    trials: dict[str, LocalTrial]
    group: list[Together] | None = None
    solo: tuple[str, dict] | None = None
    ended: set[str] = field(default_factory=set)
    start: float = field(default_factory=time.perf_counter)


class RayPopulationExecutor(RayExecutor):
    """:class:`RayExecutor` whose searches train each window's populations as Ray tasks (see the module docstring)."""

    name = "ray-population"

    def __init__(self) -> None:
        self.grouping = Grouping()  # the last search's

    def search_note(self, window: int) -> str | None:
        return population_note(
            "population executor on Ray", window, ", each population (and each lone trial) a Ray task, at once"
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
        ids = itertools.count()

        def submit(unit: _Unit):
            members = None if unit.group is None else [(t.key, unit.trials[t.key].config) for t in unit.group]
            return task.remote(unit.id, members, unit.solo, data, run.study, run.options, desk)

        try:
            while window := take_window(run.plan):
                _Window(run, desk, submit, ids, self.grouping).train(window)
        finally:
            ray.kill(desk)


class _Window:
    """One window's tasks: submitted at once, their questions answered, their failures retried alone."""

    def __init__(
        self,
        run: SearchRun,
        desk: ActorHandle,
        submit: Callable[[_Unit], object],
        ids: Iterator[int],
        grouping: Grouping,
    ):
        self.run, self.desk, self.submit, self.ids, self.grouping = run, desk, submit, ids, grouping
        self.live: dict[int, _Unit] = {}  # the units whose task runs, by id

    def train(self, window: list[tuple[str, dict]]) -> None:
        import ray  # noqa: PLC0415 -- deferred: as above

        run = self.run
        populations, alone = self.grouping.split(run, window)
        self.configs = dict(window)
        pending = {}
        for group in populations:
            trials = {t.key: _started(run, t.key, self.configs[t.key]) for t in group}
            pending.update(self._submit(_Unit(next(self.ids), trials, group=group)))
        for key, config in alone:
            pending.update(self._submit(_Unit(next(self.ids), {key: _started(run, key, config)}, solo=(key, config))))
        try:
            while pending:
                self._answer()
                done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
                for ref in done:
                    unit = pending.pop(ref)
                    del self.live[unit.id]
                    try:
                        self.grouping.trained(ray.get(ref))
                    except Exception as exc:  # noqa: BLE001 -- any failure: its trials train again alone, or fail
                        if unit.group is not None:
                            self.grouping.failed(list(unit.trials))
                        for again in self._failed(unit, exc):
                            pending.update(self._submit(again))
                        continue
                    for key, trial in unit.trials.items():
                        if key not in unit.ended:
                            complete_trial(run, trial)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def _submit(self, unit: _Unit) -> dict[object, _Unit]:
        self.live[unit.id] = unit
        return {self.submit(unit): unit}

    def _answer(self) -> None:
        """Answer the questions the tasks asked (each trial's evaluation: does ASHA stop it?), waiting a little for
        the first; a question of a task that has ended (it failed while it waited: its trials train again in other
        tasks) is left unanswered."""
        import ray  # noqa: PLC0415 -- deferred: as above

        timeout = _POLL_S
        while (question := ray.get(self.desk.next_question.remote(timeout))) is not None:
            timeout = 0.0
            unit_id, key, metrics = question
            unit = self.live.get(unit_id)
            if unit is None:
                continue
            stop = key in unit.ended or tell_trial(self.run, unit.trials[key], unit.start, metrics)
            if stop and key not in unit.ended:  # ASHA stopped it: its outcome now, as a trial alone's
                unit.ended.add(key)
                complete_trial(self.run, unit.trials[key])
            ray.get(self.desk.answer.remote(unit_id, stop))

    def _failed(self, unit: _Unit, exc: BaseException) -> list[_Unit]:
        """A task failed. Each of its trials that had not ended trains again alone, in a task of its own: a
        population's once in any case (as on the in-process population executor), a lone trial's while it has
        retries left (``budget.max_failures``); one out of retries is recorded failed."""
        again = []
        for key, trial in unit.trials.items():
            if key not in unit.ended and trial_failed(self.run, trial, exc, once_more=unit.group is not None):
                trial.status = "RUNNING"
                again.append(_Unit(next(self.ids), {key: trial}, solo=(key, self.configs[key])))
        return again


def _started(run: SearchRun, key: str, config: dict) -> LocalTrial:
    trial = LocalTrial(key, dict(config, trial_key=key), status="RUNNING")
    for c in run.callbacks:
        c.on_trial_start(trial)
    return trial
