"""Ray Tune adapters of :class:`~mutransfer._sweep.plan.SearchPlan`: a Searcher and a scheduler over one plan.

- :class:`PlanSearcher` asks the plan for the next trial (key and configuration;
  ``None`` while the plan waits for earlier results, ``FINISHED`` at the end); the
  key travels in the configuration as ``trial_key``.
- :class:`PlanScheduler` asks the plan whether ASHA stops a trial after each result,
  and records the trial's outcome when it ends (Tune calls the scheduler before the
  searcher and before the callbacks, so the journal holds the outcome before the MLflow
  child run is written).

Kept apart from plan.py so that the plan can be tested without Ray.
"""

from __future__ import annotations

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from mutransfer._sweep.plan import KEY, SearchPlan, error_text, key_of


def trial_key_of(trial) -> str:
    """Our key of a Tune trial (every trial of a plan has one: a KeyError otherwise)."""
    key = key_of(trial)
    if key is None:
        raise KeyError(f"Tune trial {trial.trial_id} has no {KEY}")
    return key


def trial_dirname(trial) -> str:
    """Tune's directory of a trial is named by its key too (tune/run-<n>/<key>)."""
    return trial_key_of(trial)


class PlanSearcher(Searcher):
    """Configurations from the plan, in key order."""

    def __init__(self, plan: SearchPlan, metric: str, mode: str):
        super().__init__(metric=metric, mode=mode)
        self.plan = plan

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # the space is the study's; metric and mode were given at construction

    def suggest(self, trial_id: str):
        nxt = self.plan.next_trial()
        if isinstance(nxt, str):  # DONE
            return Searcher.FINISHED
        if nxt is None:
            return None
        key, config = nxt
        return dict(config, **{KEY: key})

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        pass  # the scheduler recorded the outcome (it sees the Trial, and its error)

    def save(self, checkpoint_path: str) -> None:
        pass  # the plan lives in the trials' JSON files; Tune's experiment folder is never read back

    def restore(self, checkpoint_path: str) -> None:
        raise RuntimeError("the search plan is rebuilt from the trials' JSON files, never restored from Tune's folder")


class PlanScheduler(FIFOScheduler):
    """ASHA decisions and outcomes through the plan (results reach it in any order; its decisions do not depend on it)."""

    def __init__(self, plan: SearchPlan):
        super().__init__()
        self.plan = plan

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if result.get("diverged") or "epoch" not in result or "val_error" not in result:
            return TrialScheduler.CONTINUE
        if self.plan.should_stop(trial_key_of(trial), int(result["epoch"]), float(result["val_error"])):
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        self.plan.record(trial_key_of(trial), dict(result or trial.last_result or {}), failed=False)

    def on_trial_error(self, tune_controller, trial) -> None:
        # Tune calls this at every failure, also one it retries (its _try_recover has set ERROR, then requeues it
        # as PENDING): only the last is an outcome
        if trial.status == Trial.ERROR and trial.should_recover():
            self.plan.retrying(trial_key_of(trial), int(trial.num_failures), error_text(trial))
            return
        self.plan.record(trial_key_of(trial), dict(trial.last_result or {}), failed=True, error=error_text(trial))
