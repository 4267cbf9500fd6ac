"""The Ray Tune ``Callback`` that forwards trial events to our driver-side observers.

Kept apart from tracking.py so that `mutransfer studies` / `mutransfer ui` do not import Ray. It imports
neither the MLflow logger (mutransfer._sweep.trial_logger) nor the console display (mutransfer._sweep.progress):
the executor (mutransfer._sweep._executors) imports it when a Ray search starts (no cycle). It forwards to any object with TrialLogger's five
``on_trial_*`` methods, and to its ``on_step_end(trials)`` if it has one.
"""

from __future__ import annotations

from ray.tune import Callback


class MlflowTrialCallback(Callback):
    """Forward Tune's trial events to ``inner`` (a TrialLogger, a ProxyProgress), without Tune's extra arguments."""

    def __init__(self, inner):
        self.inner = inner  # a mutransfer._sweep.trial_logger.TrialLogger or mutransfer._sweep.progress.ProxyProgress

    def on_step_end(self, iteration, trials, **info):
        step_end = getattr(self.inner, "on_step_end", None)
        if step_end is not None:
            step_end(trials)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.inner.on_trial_start(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.inner.on_trial_result(trial, result)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.inner.on_trial_recover(trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.inner.on_trial_complete(trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.inner.on_trial_error(trial)


#: Tune's trial states of a trial that holds (or waits for) its resources
LIVE = ("PENDING", "RUNNING", "PAUSED")


class WhenHandedOut(Callback):
    """Calls ``action(live)`` at each trial's start and end once ``plan`` (a SearchPlan) has handed out every trial:
    from then on no new trial asks for resources (mutransfer._sweep.early_target starts the target's workers when
    the ``live`` trials, those still holding or waiting for resources, leave room for them); and ``retried()`` when
    Tune retries a trial (its node may be lost, and with it the room the target was started beside)."""

    def __init__(self, plan, action, retried):
        self.plan, self.action, self.retried = plan, action, retried

    def __getstate__(self):  # Tune pickles its callbacks (never read back): a copy acts on nothing
        return {"plan": None, "action": None, "retried": None}

    def _maybe(self, trials, ended=None) -> None:
        if self.action is not None and self.plan.handed_out():
            self.action(sum(1 for t in trials if t is not ended and t.status in LIVE))

    def on_trial_start(self, iteration, trials, trial, **info):
        self._maybe(trials)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._maybe(trials, ended=trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._maybe(trials, ended=trial)

    def on_trial_recover(self, iteration, trials, trial, **info):
        if self.retried is not None:
            self.retried()
