"""The configuration of proxy trial ``i``: a pure function of the study, ``i`` and the results before it.

``sample_config(study, i, told)`` draws trial ``i``'s searched hyperparameters:

- ``grid``: the ``i``-th combination of the ``choice`` lists, in the order the search
  space declares them (the last name varies fastest); no randomness.
- ``random``: Optuna's RandomSampler seeded with ``(search.seed, i)``.
- ``tpe``: Optuna's TPESampler seeded with ``(search.seed, i)`` over a fresh in-memory
  Optuna study holding ``told`` (earlier trials' configurations and results, in trial
  order); half the trials, at most 10, are random start-up trials.

Nothing here remembers anything between calls: the same arguments give the same
configuration on any call, in any process, whatever the order in which results arrived.
Which results ``told`` holds is decided by the search's sampler wrapper on its Optuna journal
(:class:`mutransfer._sweep._windowed.WindowedSampler`: trials 0 … i-w, as the journal holds them).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import optuna

from mutransfer._study import Study
from mutransfer._study.samplers import named_sampler

#: what a two-objective search tells its sampler of a pruned trial (mutransfer._sweep.plan.Outcome.told)
PRUNED = "pruned"
#: what the sampler is told of a trial: its validation error, (error, training seconds) in a two-objective search,
#: :data:`PRUNED`, or None (failed)
Told = float | tuple[float, float] | str | None


def trial_seed(seed: int, index: int) -> int:
    """The sampler seed of trial ``index``: 32 bits derived from (study seed, index), the same on every platform."""

    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


def startup_trials(study: Study) -> int:
    """TPE's random start-up trials: half the trials, at most 10 (at least 1)."""
    return max(1, min(10, study.search.num_trials // 2))


def search_distributions(study: Study) -> dict:
    """The searched hyperparameters' Optuna distributions (mutransfer._study.distribution.Distribution.to_optuna)."""
    return {name: dist.to_optuna() for name, dist in study.search_space.items()}


def grid_config(study: Study, index: int) -> dict:
    """The ``index``-th combination of the grid (every search-space entry is a ``choice``)."""
    names = list(study.search_space)
    combos = itertools.product(*(list(study.search_space[n].values or ()) for n in names))
    values = next(itertools.islice(combos, index, None))
    return dict(zip(names, values))


def sample_config(
    study: Study,
    index: int,
    told: Sequence[tuple[dict, Told]],
    sampler: optuna.samplers.BaseSampler | None = None,
) -> dict:
    """Trial ``index``'s configuration. ``told``: (configuration, validation error; None = failed) of earlier trials,
    by index; in a two-objective search (``search.objectives: error+seconds``) the value is (validation error,
    training seconds), and None for a trial that did not run its budget (mutransfer._sweep.plan.Outcome.told).

    ``sampler``: an Optuna sampler object given through the Python API (``mutransfer.create_study(sampler=...)``),
    used in place of the study's ``search.algorithm``: it is told the same earlier trials and asked once. Its own
    state (its random generator) carries from one call to the next, so a resumed study samples alike only with the
    study file's named samplers, which are seeded per trial.
    """
    algorithm = study.search.algorithm
    if algorithm == "grid" and sampler is None:
        return grid_config(study, index)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seed = trial_seed(study.search.seed, index)
    if sampler is None and algorithm == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    elif sampler is None and algorithm == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials(study))
    elif sampler is None:  # a seeded sampler of optuna.samplers named by the study (mutransfer._study.samplers)
        sampler = named_sampler(algorithm, seed)
    distributions = search_distributions(study)
    objectives = 1 if study.search.objectives == "error" else 2
    ostudy = optuna.create_study(directions=["minimize"] * objectives, sampler=sampler)
    if algorithm == "tpe" or not isinstance(sampler, optuna.samplers.RandomSampler):
        for config, value in told:
            state = optuna.trial.TrialState.FAIL if value is None else optuna.trial.TrialState.COMPLETE
            if value == PRUNED:
                state = optuna.trial.TrialState.PRUNED
            values = (
                None
                if value is None or isinstance(value, str)
                else list(value)
                if isinstance(value, tuple)
                else [value]
            )
            ostudy.add_trial(
                optuna.trial.create_trial(
                    state=state,
                    values=values,
                    params={k: config[k] for k in distributions},
                    distributions=distributions,
                )
            )
    trial = ostudy.ask(distributions)
    return {name: trial.params[name] for name in distributions}
