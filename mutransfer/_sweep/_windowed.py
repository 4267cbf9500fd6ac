"""The search's sampler, an Optuna sampler on the search's journal: trial ``i`` is sampled from the results of trials
0 … i-w alone, as the journal holds them (w: the study's window, mutransfer._sweep.plan).

:class:`WindowedSampler` wraps the study's sampler (its ``search.algorithm``, seeded per trial, or the Python API's
sampler object): asked for trial ``i`` (our key on the journal trial, ``mutransfer.trial_id``), it reads how trials
0 … i-w ended from the journal study it is given and returns
``sample_config(study, i, those results)`` (mutransfer._sweep.sampling). Trials that ended after trial ``i-w`` are not
seen, whatever the order in which Tune delivered them, so a seeded study samples the same trials on every run and on
every resume. The plan asks through Optuna's trial interface (:func:`ask`): an enqueued trial's fixed parameters are
taken as Optuna takes them, the others from this sampler.
"""

from __future__ import annotations

from collections.abc import Mapping

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from mutransfer._study import Study
from mutransfer._sweep._outcome import Outcome, trial_key
from mutransfer._sweep._trial_journal import held_of, trial_index
from mutransfer._sweep.sampling import Told, sample_config, search_distributions


class WindowedSampler(optuna.samplers.BaseSampler):
    """Samples trial ``i`` of the search ``study`` from the results of its trials 0 … i-``window`` in the journal.

    ``inner``: an Optuna sampler object in place of the study's ``search.algorithm`` (the Python API's
    ``create_study(sampler=...)``); it is told the window's trials and asked once per trial.
    """

    def __init__(self, study: Study, window: int, inner: optuna.samplers.BaseSampler | None = None):
        self.study, self.window, self.inner = study, max(1, int(window)), inner
        self._space = search_distributions(study)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._space)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, object]:
        """Trial ``trial``'s configuration; a ValueError where it is not one of the search's trials or a trial of its
        window has not ended (the plan asks only once they all have)."""
        index = trial_index(trial)
        if index is None:
            raise ValueError(f"Optuna trial {trial.number} carries no mutransfer key: not one of the search's trials")
        return sample_config(self.study, index, self.told(study, index), self.inner)

    def told(self, study: optuna.Study, index: int) -> list[tuple[dict, Told]]:
        """(configuration, what the sampler is told) of trials 0 … index-window, in key order, from ``study``."""
        held = {j: t for t in study.get_trials(deepcopy=False) if (j := trial_index(t)) is not None}
        told: list[tuple[dict, Told]] = []
        for j in range(index - self.window + 1):
            trial = held_of(held[j]) if j in held else None
            if trial is None or trial.status is None:
                raise ValueError(
                    f"trial {trial_key(index)} asked before trial {trial_key(j)} ended: it samples from the "
                    f"results of trials {trial_key(0)} … {trial_key(j)} (window {self.window})"
                )
            outcome = Outcome(trial.status, dict(trial.metrics), trial.error)
            told.append((dict(trial.config), outcome.told(self.study.search.objectives)))
        return told

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> object:
        raise ValueError(
            f"{param_name} ({param_distribution}) is not a parameter of the search space of study {self.study.name}"
        )


def ask(study: optuna.Study, trial_id: int, distributions: Mapping[str, BaseDistribution]) -> None:
    """Suggest each parameter of ``distributions`` for the journal trial ``trial_id`` through Optuna's trial interface,
    with ``study.sampler``: a parameter the trial holds already (written before a stop) or an enqueued trial's fixed
    one is kept; the others are sampled."""
    trial = optuna.trial.Trial(study, trial_id)
    for name, dist in distributions.items():
        if isinstance(dist, FloatDistribution):
            trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
        elif isinstance(dist, IntDistribution):
            trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
        elif isinstance(dist, CategoricalDistribution):
            trial.suggest_categorical(name, list(dist.choices))  # type: ignore[arg-type]
        else:
            raise ValueError(f"{name}: {type(dist).__name__} is not a distribution of a mutransfer search space")
