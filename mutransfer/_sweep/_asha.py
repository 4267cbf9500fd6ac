"""ASHA as an Optuna pruner on a search's journal: :class:`WindowedAsha`, and the rule it applies.

A proxy trial reports its validation error at each evaluated epoch; the plan (mutransfer._sweep.plan.SearchPlan)
writes it to the trial's intermediate values in the search's Optuna journal (mutransfer._sweep._trial_journal) and
asks the search's pruner whether to stop the trial there. The built-in pruner is :class:`WindowedAsha`: ASHA with the
rungs ``budget.grace_period · budget.reduction_factor^k`` epochs, which compares trial i at a rung with the trials
0 … i-w only (w: the search's window), all finished before trial i was handed out. So its decisions do not depend on
the order in which results arrive, as Ray's ASHA's would (it compares with whichever trials reached the rung first).

A pruner given through the Python API (``mutransfer.create_study(pruner=optuna.pruners.MedianPruner())``) is asked
in its place, on the same journal study: it sees every trial finished so far, as in Optuna, so its stops may depend
on that order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import optuna
from optuna.trial import FrozenTrial

from mutransfer._study import Study
from mutransfer._sweep._trial_journal import trial_index


def rung_milestones(study: Study) -> list[int]:
    """ASHA's rungs (epochs) below the budget: grace_period · reduction_factor^k < epochs."""
    b = study.budget
    out, m = [], b.grace_period
    while m < b.epochs:
        out.append(m)
        m *= b.reduction_factor
    return out


def asha_stops(value: float, pool: Sequence[float] | np.ndarray, reduction_factor: int) -> bool:
    """ASHA's rule at one rung: a value above the 1/reduction_factor quantile of the ``pool`` (the values at the
    same rung of the trials it is compared with) stops the trial; an empty pool stops nothing."""
    if len(pool) == 0:
        return False
    return value > float(np.nanpercentile(pool, 100.0 / reduction_factor))


class WindowedAsha(optuna.pruners.BasePruner):
    """ASHA on a mutransfer search's journal study, deterministic whatever the order results arrive in.

    ``milestones``: the rungs (epochs, :func:`rung_milestones`); ``reduction_factor``: ASHA's; ``window``: w >= 1,
    the search's window. At each report, trial i (its key's index, the journal's ``mutransfer.trial_id``) is stopped
    if, at any rung m up to its last reported epoch where it has a value, that value is above the 1/reduction_factor
    quantile of the values at m of the finished trials 0 … i-w. Those trials and their values are fixed once trial i
    is handed out, so a rung judged again gives the same answer.
    """

    def __init__(self, milestones: Sequence[int], reduction_factor: int, window: int):
        self.milestones = [int(m) for m in milestones]
        self.reduction_factor = int(reduction_factor)
        self.window = max(1, int(window))

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        index, step = trial_index(trial), trial.last_step
        rungs = [m for m in self.milestones if step is not None and m <= step and m in trial.intermediate_values]
        if index is None or not rungs:
            return False
        earlier = [
            t.intermediate_values
            for t in study.get_trials(deepcopy=False)
            if t.state.is_finished() and (j := trial_index(t)) is not None and j <= index - self.window
        ]
        return any(
            asha_stops(trial.intermediate_values[m], [v[m] for v in earlier if m in v], self.reduction_factor)
            for m in rungs
        )


#: trials simulated by :func:`expected_search_epochs` (later trials are counted at the simulated ones' late mean)
SIMULATED_TRIALS = 128
#: simulated searches averaged by :func:`expected_search_epochs`
SIMULATED_ROUNDS = 32


def expected_search_epochs(study: Study, window: int) -> float:
    """Epochs the study's proxy (or direct) search is expected to train under the plan's ASHA, before any trial runs.

    Simulated with :func:`asha_stops` exactly as :class:`WindowedAsha` applies it (trial i compared at each rung with
    trials 0 … i-``window`` that reached it): trials of random quality (seeded, the same for every call) whose errors
    keep their rank from rung to rung, :data:`SIMULATED_ROUNDS` searches averaged. Beyond :data:`SIMULATED_TRIALS`
    trials each further trial counts the late simulated trials' mean. Without rungs (the grace period at or past the
    budget) every trial trains ``budget.epochs``: trials x epochs.
    """
    epochs, rf = int(study.budget.epochs), int(study.budget.reduction_factor)
    milestones, trials, w = rung_milestones(study), int(study.trial_count), max(1, int(window))
    if not milestones or trials < 1:
        return float(trials * epochs)
    n = min(trials, SIMULATED_TRIALS)
    rng = np.random.default_rng(0)
    trained = np.zeros((SIMULATED_ROUNDS, n))
    for r in range(SIMULATED_ROUNDS):
        quality = rng.random(n)
        reached: dict[int, tuple[list[int], list[float]]] = {
            m: ([], []) for m in milestones
        }  # per rung: trial indices (ascending) and their values
        for i in range(n):
            trained[r, i] = epochs
            for m in milestones:
                index, values = reached[m]
                visible = int(np.searchsorted(index, i - w, side="right"))  # trials 0 … i-w that reached m
                index.append(i)
                values.append(quality[i])
                if asha_stops(quality[i], values[:visible], rf):
                    trained[r, i] = m
                    break
    per_trial = trained.mean(axis=0)
    late = per_trial[n // 2 :].mean()
    return float(per_trial.sum() + (trials - n) * late)
