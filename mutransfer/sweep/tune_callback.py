"""The Ray Tune ``Callback`` that forwards trial events to :class:`~mutransfer.sweep.tracking.TrialLogger`.

Kept apart from tracking.py so that `mutransfer studies` / `mutransfer ui` do not import Ray. It does not
import tracking.py either (tracking.as_tune_callback imports it: no cycle); it forwards to any object with
TrialLogger's five ``on_trial_*`` methods.
"""

from __future__ import annotations

from ray.tune import Callback


class MlflowTrialCallback(Callback):
    """Driver-side MLflow logging of proxy trials: buffer results, one log_batch per finished trial."""

    def __init__(self, inner):
        self.inner = inner  # a mutransfer.sweep.tracking.TrialLogger

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
