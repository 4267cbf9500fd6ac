"""The population executor (``--executor population``): in this process, the trials a search hands out together
(its window) trained as populations (mutransfer._training._population), the others alone; and what it shares with
the population executor on Ray (mutransfer._sweep._ray_population): taking a window, and counting how it was split.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from mutransfer._sweep._executors import (
    InProcessExecutor,
    LocalTrial,
    SearchRun,
    _threads,
    complete_trial,
    tell_trial,
    trial_failed,
)
from mutransfer._sweep.plan import SearchPlan
from mutransfer._sweep.trial import Together, population_groups, run_population


def population_note(label: str, window: int, how: str) -> str:
    """What a population executor (``label``) says when a search starts: how its windows train (``how``: where its
    populations run, appended to the sentence)."""
    if window < 2:
        return f"{label}: a window of 1 trial trains each alone (raise search.max_concurrent)"
    return (
        f"{label}: the trials of each window (up to {window}) of one model shape and batch size train as one batched "
        f"model{how}; a trial with no partner, another model or precision trains alone"
    )


@dataclass
class Grouping:
    """How a population executor's search trained its windows: the sizes of the populations that trained (as
    :func:`~mutransfer._sweep.trial.run_population` returns them: a group split where it trains counts as its
    parts), and why each other trial trained alone (population_groups's reasons, or its population failed)."""

    sizes: list[int] = field(default_factory=list)
    alone: dict[str, str] = field(default_factory=dict)

    def split(
        self, run: SearchRun, window: list[tuple[str, dict]]
    ) -> tuple[list[list[Together]], list[tuple[str, dict]]]:
        """The window's populations and lone trials, the lone ones counted (a population counts once it trained)."""
        why: dict[str, str] = {}
        populations, alone = population_groups(window, run.data, run.study, run.options, why)
        self.alone.update(why)
        return populations, alone

    def trained(self, sizes: list[int]) -> None:
        """A group trained, as populations of these sizes."""
        self.sizes += sizes

    def failed(self, keys: list[str]) -> None:
        """A group's population failed: its trials trained alone after it."""
        self.alone.update(dict.fromkeys(keys, "its population failed"))

    def line(self, executor: str) -> str | None:
        """``population executor: 6 of 8 trials trained in 2 population(s) (3–3 each); 2 alone: <reason> (2)``."""
        together, total = sum(self.sizes), sum(self.sizes) + len(self.alone)
        if not total:
            return None
        head = f"{executor}: {together} of {total} trials trained in {len(self.sizes)} population(s)"
        if self.sizes:
            head += f" ({min(self.sizes)}–{max(self.sizes)} each)"
        if not self.alone:
            return head
        reasons = Counter(self.alone.values()).most_common()
        return head + f"; {len(self.alone)} alone: " + "; ".join(f"{why} ({n})" for why, n in reasons)


class PopulationExecutor(InProcessExecutor):
    """In this process, as :class:`InProcessExecutor`, but the trials the plan hands out together (its window)
    train as one population where they can (mutransfer._training._population: one model shape, batch size, β2,
    weight decay, clipping, schedule, fp32, data in memory): each as it would alone, to float32 rounding, in
    one batched model. The others (and any trial of a population that fails) train alone, one at a time."""

    name = "population"

    def __init__(self) -> None:
        self.grouping = Grouping()  # the last search's

    def search_note(self, window: int) -> str | None:
        return population_note("population executor", window, "")

    def search(self, run: SearchRun) -> None:
        self.grouping = Grouping()
        while window := take_window(run.plan):
            self._window(run, window)

    def search_summary(self) -> str | None:
        return self.grouping.line("population executor")

    def _window(self, run: SearchRun, window: list[tuple[str, dict]]) -> None:
        populations, alone = self.grouping.split(run, window)
        configs = dict(window)
        for group in populations:
            self._population(run, group, configs)
        for key, config in alone:
            self._trial(run, key, config)

    def _population(self, run: SearchRun, group: list[Together], configs: dict[str, dict]) -> None:
        trials = {t.key: LocalTrial(t.key, dict(configs[t.key], trial_key=t.key)) for t in group}
        start = time.perf_counter()
        for trial in trials.values():
            trial.status = "RUNNING"
            for c in run.callbacks:
                c.on_trial_start(trial)
        stopped: set[str] = set()

        def report(key: str, metrics: dict) -> bool:
            if not tell_trial(run, trials[key], start, metrics):
                return False
            stopped.add(key)  # ASHA stopped it: its outcome now, as a trial alone's (a resume must not train it on)
            complete_trial(run, trials[key])
            return True

        try:
            with _threads(int(run.options.get("threads", 1))):
                self.grouping.trained(run_population(group, run.data, run.options, report))
        except Exception as exc:  # the population failed: each of its other trials trains alone, with the retries
            self.grouping.failed([t.key for t in group])
            for key, trial in trials.items():
                if key not in stopped and trial_failed(run, trial, exc, once_more=True):
                    self._trial(run, key, configs[key], trial)
            return
        for key, trial in trials.items():
            if key not in stopped:
                complete_trial(run, trial)


def take_window(plan: SearchPlan) -> list[tuple[str, dict]]:
    """Every trial the plan hands out now (its window: (key, configuration) each); [] when it has handed out all
    (or, never for an executor that waits for each window's outcomes, when it waits for earlier results)."""
    window: list[tuple[str, dict]] = []
    while True:
        nxt = plan.next_trial()
        if nxt is None or isinstance(nxt, str):  # waiting, or DONE
            return window
        window.append(nxt)
