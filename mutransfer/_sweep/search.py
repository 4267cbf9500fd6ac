"""Ray Tune pieces of a study's proxy search: the TuneConfig over a :class:`~mutransfer._sweep.plan.SearchPlan`.

The configurations come from the plan (mutransfer._sweep.sampling: ``tpe`` = Optuna's
TPESampler, ``random`` = Optuna's RandomSampler, both seeded per trial from
``search.seed``; ``grid`` = every combination of the ``choice`` lists, in order), handed
to Tune by :class:`~mutransfer._sweep.plan_tune.PlanSearcher`. Trials are early-stopped by
ASHA on the test error (mode min, the epoch as time): rungs at
grace_period · reduction_factor^k epochs, decided by the plan in trial-key order
(:class:`~mutransfer._sweep.plan_tune.PlanScheduler`), so a trial resumed from its own
checkpoint keeps its position on the rungs and the decisions are reproducible.
"""

from __future__ import annotations

from mutransfer._study import Study
from mutransfer._sweep.plan import total_trials

__all__ = ["METRIC", "MODE", "TIME_ATTR", "lanes", "max_concurrent", "resource_slots", "total_trials", "tune_config"]

METRIC = "val_error"
MODE = "min"
TIME_ATTR = "epoch"


def max_concurrent(study: Study, cpus: float, gpus: float) -> int:
    """Trials at once: the study's value, else as many as the resources hold (at least 1)."""
    if study.search.max_concurrent is not None:
        return study.search.max_concurrent
    return resource_slots(study, cpus, gpus)


def lanes(study: Study, concurrency: int, cpus: float, gpus: float) -> int:
    """How many of a search's ``concurrency`` trials train at the same time on ``cpus`` CPUs and ``gpus`` GPUs (at
    least 1): what the report divides the trials' training time by (an autoscaling cluster may hold more later; its
    count at the search's start is taken)."""
    return max(1, min(int(concurrency), resource_slots(study, cpus, gpus)))


def resource_slots(study: Study, cpus: float, gpus: float) -> int:
    """How many trials ``cpus`` CPUs and ``gpus`` GPUs train at once, each holding the study's ``resources`` (at least
    1): a window of more trials than this waits for a slot, however many it asks for at once."""
    r = study.resources
    fit = int(cpus // r.cpus_per_trial) if r.cpus_per_trial else 1
    if r.gpus_per_trial:
        fit = min(fit, int(gpus // r.gpus_per_trial))
    return max(1, fit)


def tune_config(plan, *, concurrency: int):
    """TuneConfig running the plan's remaining trials, ``concurrency`` at a time (trial names = our keys)."""
    from ray import tune  # noqa: PLC0415 -- deferred: ray.tune costs ~1 s; `import mutransfer._sweep` (mutransfer report) stays without Ray

    from mutransfer._sweep.plan_tune import (  # noqa: PLC0415 -- deferred: plan_tune subclasses ray.tune classes at import
        PlanScheduler,
        PlanSearcher,
        trial_dirname,
    )

    return tune.TuneConfig(
        metric=METRIC,
        mode=MODE,
        search_alg=PlanSearcher(plan, METRIC, MODE),
        scheduler=PlanScheduler(plan),
        num_samples=plan.remaining(),
        max_concurrent_trials=concurrency,
        reuse_actors=True,
        trial_name_creator=trial_dirname,
        trial_dirname_creator=trial_dirname,
    )
