"""Ray Tune pieces of a study: search space, search algorithm, ASHA scheduler, TuneConfig.

- ``tpe`` (default): :class:`ray.tune.search.optuna.OptunaSearch` with a seeded
  Optuna TPESampler (half the trials, at most 10, are random start-up trials).
- ``random``: Tune's BasicVariantGenerator drawing ``num_trials`` samples (seeded).
- ``grid``: BasicVariantGenerator over the product of every ``choice`` list.

Trials are early-stopped by ASHA on the test error (mode min), with the epoch
as time attribute, so a trial resumed from its own checkpoint keeps its
position on the rungs.
"""

from __future__ import annotations

import math

from mutransfer.study import Study

METRIC = "test_error"
MODE = "min"
TIME_ATTR = "epoch"


def param_space(study: Study) -> dict:
    """Tune search-space dict for the study's ``search_space``."""
    from ray import tune

    space = {}
    for name, dist in study.search_space.items():
        if study.search.algorithm == "grid":
            space[name] = tune.grid_search(list(dist.values))
        elif dist.type == "choice":
            space[name] = tune.choice(list(dist.values))
        elif dist.type == "loguniform":
            space[name] = tune.loguniform(dist.low, dist.high)
        else:
            space[name] = tune.uniform(dist.low, dist.high)
    return space


def grid_size(study: Study) -> int:
    return math.prod(len(d.values) for d in study.search_space.values())


def num_samples(study: Study) -> int:
    """Tune's num_samples: the number of trials, or 1 pass over the grid."""
    return 1 if study.search.algorithm == "grid" else study.search.num_trials


def total_trials(study: Study) -> int:
    return grid_size(study) if study.search.algorithm == "grid" else study.search.num_trials


def search_algorithm(study: Study):
    """The Tune searcher (None means Tune's default BasicVariantGenerator)."""
    algorithm = study.search.algorithm
    if algorithm == "tpe":
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        startup = max(1, min(10, study.search.num_trials // 2))
        sampler = optuna.samplers.TPESampler(seed=study.search.seed, n_startup_trials=startup)
        return OptunaSearch(sampler=sampler)
    from ray.tune.search.basic_variant import BasicVariantGenerator

    return BasicVariantGenerator(random_state=study.search.seed)


def scheduler(study: Study):
    """ASHA on the test error; rungs at grace_period · reduction_factor^k epochs."""
    from ray.tune.schedulers import ASHAScheduler

    b = study.budget
    return ASHAScheduler(
        time_attr=TIME_ATTR,
        max_t=b.epochs,
        grace_period=min(b.grace_period, b.epochs),
        reduction_factor=b.reduction_factor,
        # A trial that reaches max_t ends by itself (the function returns), so it can record
        # done.json and its final checkpoint; ASHA stopping it at that report would skip both.
        stop_last_trials=False,
    )


def max_concurrent(study: Study, cpus: float, gpus: float) -> int:
    """Trials at once: the study's value, else as many as the resources hold (at least 1)."""
    if study.search.max_concurrent is not None:
        return study.search.max_concurrent
    r = study.resources
    fit = int(cpus // r.cpus_per_trial) if r.cpus_per_trial else 1
    if r.gpus_per_trial:
        fit = min(fit, int(gpus // r.gpus_per_trial))
    return max(1, fit)


def tune_config(study: Study, *, concurrency: int):
    from ray import tune

    return tune.TuneConfig(
        metric=METRIC,
        mode=MODE,
        search_alg=search_algorithm(study),
        scheduler=scheduler(study),
        num_samples=num_samples(study),
        max_concurrent_trials=concurrency,
        reuse_actors=True,
    )
