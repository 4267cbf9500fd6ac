"""The proxy search's plan: which trial runs next, with which configuration, and when ASHA stops it.

Every proxy trial has a key of ours, ``t0000``, ``t0001``, … in the order its
configuration was handed out. The key names its directory (``trials/<key>/``), its
MLflow child run (tag ``mutransfer.trial_id``) and its row in the report. The plan
keeps two JSON files per trial, written by the driver:

- ``config.json``: the searched hyperparameters, written when the configuration is
  handed out (before Tune starts the trial);
- ``outcome.json``: status (completed | pruned | diverged | failed), the last reported
  metrics and the error of a failed trial, written when the trial ends.

Each report's validation error goes to the trial's intermediate values in the search's
Optuna journal (mutransfer._sweep._trial_journal), and the search's Optuna pruner decides
there whether the trial stops (:meth:`SearchPlan.should_stop`; mutransfer._sweep._asha).

A resumed sweep rebuilds the plan from these files alone (nothing is unpickled):
trials with an outcome are finished and never run again; trials with a configuration
but no outcome are handed out first, under their old keys, and continue from their
own checkpoints; then new trials are sampled up to the study's total.

Reproducibility: with ``window`` = w (the concurrency of the study's first session,
kept in ``state.json``), trial i is handed out only once trials 0 … i-w have their
outcome, and its configuration is ``sample_config(study, i, results of trials
0 … i-w in key order)`` (mutransfer._sweep.sampling). The built-in pruner, ASHA
(:class:`mutransfer._sweep._asha.WindowedAsha`), compares trial i at a rung with trials
0 … i-w only, which all finished before trial i started. So the configurations, the stopping decisions and, with deterministic
training, the results do not depend on the order in which Tune delivers results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import optuna

from mutransfer._study import Study
from mutransfer._study_folder.state import write_atomic
from mutransfer._sweep._asha import WindowedAsha, rung_milestones
from mutransfer._sweep._trial_files import (
    check_config,
    check_config_keys,
    check_outcome,
    enqueued_params,
    read_trial_json,
    refuse_link,
)
from mutransfer._sweep._trial_journal import TrialJournal, check_journal, journal_path, read_journal
from mutransfer._sweep.sampling import PRUNED, sample_config, search_distributions
from mutransfer._sweep.trial import read_trial_history
from mutransfer.errors import UserInputError

CONFIG_FILE = "config.json"
OUTCOME_FILE = "outcome.json"
#: a seeded trial's provenance (a strategy's seed_trials: a warm start's) in a study folder written before the journal
#: held it (its user attribute ``mutransfer.seed`` now), read when the plan brings such a folder's journal up
SEED_FILE = "warm_start.json"
#: SearchPlan.next_trial: every trial has been handed out
DONE = "done"
#: the last result's metrics an outcome keeps (mutransfer._sweep.trial.TrialReport, and Tune's wall time)
OUTCOME_METRICS = (
    "epoch",
    "val_error",
    "train_loss",
    "lr",
    "trainer_seconds",
    "spectral_lr0",
    "diverged",
    "time_total_s",
)


def trial_key(index: int) -> str:
    """``t0000`` for index 0: the stable name of a trial (directory, MLflow tag, report)."""
    return f"t{index:04d}"


def key_index(key: str) -> int:
    """The index of a key made by :func:`trial_key` (ValueError for anything else)."""
    if not (key.startswith("t") and key[1:].isdigit()):
        raise ValueError(f"not a trial key: {key!r}")
    return int(key[1:])


def total_trials(study: Study) -> int:
    """Trials of the study: every grid combination, else ``search.num_trials``."""
    return study.trial_count


def key_number(key: str | None) -> int:
    """1-based trial number of a key: its index + 1; 0 for a name that is not a key, or none."""
    if key is None:
        return 0
    try:
        return key_index(str(key)) + 1
    except ValueError:
        return 0


#: the configuration entry that carries a trial's key through Tune
KEY = "trial_key"


def key_of(trial) -> str | None:
    """A Tune trial's key (its configuration carries it); None for a trial without one."""
    key = (getattr(trial, "config", None) or {}).get(KEY)
    return None if key is None else str(key)


def trial_number(trial) -> int:
    """:func:`key_number` of a Tune trial's key (0 for a trial without one)."""
    return key_number(key_of(trial))


def error_text(trial) -> str:
    """The exception line of a Tune trial's last error, at most 500 characters ("unknown error" if none).

    Read from Tune's text error file in the trial's local folder (written before the
    scheduler and the callbacks hear of the error), else from ``trial.get_error()``;
    Tune's pickled copy of the error is never read.
    """
    text = None
    try:
        path = Path(trial.error_file) if getattr(trial, "error_file", None) else None
        if path is not None and path.is_file():
            text = path.read_text(errors="replace")
    except (OSError, TypeError, ValueError):
        text = None
    if text is None:
        try:
            err = trial.get_error()
        except Exception:  # Tune's error file may be missing
            err = None
        text = None if err is None else str(err) or type(err).__name__
    lines = [line.strip() for line in (text or "").splitlines() if line.strip() and not line.startswith("Failure # ")]
    return lines[-1][:500] if lines else "unknown error"


def trial_status(metrics: dict, failed: bool, budget_epochs: int) -> str:
    """completed | pruned | diverged | failed, from a trial's last reported metrics."""
    if failed:
        return "failed"
    if metrics.get("diverged"):
        return "diverged"
    if int(metrics.get("epoch", 0) or 0) < budget_epochs:
        return "pruned"
    return "completed"


@dataclass
class Outcome:
    """How a trial ended (``outcome.json``). ``rungs``: its validation error at the ASHA rungs it reached, as an
    outcome written before the journal held its intermediate values kept them (epoch -> value; {} since then)."""

    status: str
    metrics: dict = field(default_factory=dict)
    error: str | None = None
    rungs: dict[int, float] = field(default_factory=dict)

    @property
    def value(self) -> float | None:
        """The result the sampler is told: the last reported validation error (None for a failed trial); an
        outcome written before validation splits holds its ``test_error``."""
        value = self.metrics.get("val_error", self.metrics.get("test_error"))
        if self.status == "failed" or value is None:
            return None
        return float(value)

    def told(self, objectives: str) -> float | tuple[float, float] | str | None:
        """What a search on ``objectives`` (``search.objectives``) tells its sampler of this trial: its
        :attr:`value`; for ``error+seconds``, (validation error, training seconds) of a trial that ran its whole
        budget, :data:`~mutransfer._sweep.sampling.PRUNED` for a pruned one (its seconds are a part of a training's;
        Optuna's samplers count a pruned trial as a poor one), None for a failed or diverged one."""
        if objectives == "error":
            return self.value
        seconds = self.metrics.get("trainer_seconds")
        if self.status == "pruned":
            return PRUNED
        if self.status != "completed" or self.value is None or not seconds:
            return None
        return self.value, float(seconds)

    def as_dict(self) -> dict:
        d = dict(asdict(self), rungs={str(k): v for k, v in self.rungs.items()})
        if not self.rungs:
            del d["rungs"]  # the journal holds them (SearchPlan.should_stop)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Outcome:
        return cls(
            status=str(d["status"]),
            metrics=dict(d.get("metrics") or {}),
            error=d.get("error"),
            rungs={int(k): float(v) for k, v in (d.get("rungs") or {}).items()},
        )


def read_trials(
    trials_dir: Path, total: int, space: dict, seeded: Callable[[int], bool]
) -> Iterator[tuple[int, dict, Outcome | None]]:
    """(index, config, outcome or None) of each trial handed out, in key order, each file checked
    (mutransfer._sweep._trial_files): one line naming the first that is not as the sweep wrote it. ``seeded(i)``: trial
    ``i``'s config may lie outside the space (a seed from another study's, a rung's), so only its types are checked."""
    refuse_link(trials_dir)
    if trials_dir.exists() and not trials_dir.is_dir():
        raise UserInputError(f"{trials_dir} is not a folder; move it aside, then resume again")
    for i in range(total):
        refuse_link(trials_dir / trial_key(i))
        config = read_trial_json(trials_dir / trial_key(i) / CONFIG_FILE)
        if not isinstance(config, dict):
            return  # configurations are handed out in key order: the first gap ends them
        check_config_keys(trials_dir / trial_key(i) / CONFIG_FILE, config, space)
        check_config(trials_dir / trial_key(i) / CONFIG_FILE, config, space, seeded(i))
        outcome = read_trial_json(trials_dir / trial_key(i) / OUTCOME_FILE)
        if isinstance(outcome, dict) and "status" in outcome:
            check_outcome(trials_dir / trial_key(i) / OUTCOME_FILE, outcome)
            yield i, config, Outcome.from_dict(outcome)
        else:
            yield i, config, None


def check_trial_files(study: Study, trials_dir: Path) -> None:
    """Before a resume starts anything: the main search's trial files read as :class:`SearchPlan` reads them. A trial
    with its seed's provenance (in the journal, written before its config; ``SEED_FILE`` in a folder from before)
    is taken as seeded: its values may lie outside the space (the plan checks them against the strategies' seeds
    when it loads)."""
    check_journal(journal_path(trials_dir))  # a damaged journal is said as such, not as a seed it no longer vouches for
    held = read_journal(journal_path(trials_dir), study.name) or {}

    def seeded(i: int) -> bool:
        return (i in held and held[i].seed is not None) or (trials_dir / trial_key(i) / SEED_FILE).exists()

    for _ in read_trials(trials_dir, total_trials(study), search_distributions(study), seeded):
        pass


class SearchPlan:
    """Hands out trial keys and configurations in a fixed order and decides ASHA stops (see the module docstring).

    ``trials_dir``: ``<study dir>/trials``. ``window``: w >= 1, fixed for the study.
    ``preset``: the configurations to run, in key order, instead of sampling, all to the
    full budget (no ASHA): a ladder rung's promoted trials (mutransfer._sweep.ladder).
    ``sampler``: an Optuna sampler object in place of the study's ``search.algorithm`` (the Python API's).
    ``pruner``: an Optuna pruner object in place of the study's ASHA (the Python API's; mutransfer._sweep._asha).
    ``enqueued``: fixed parameters of trials enqueued before the search's journal existed
    (:meth:`mutransfer.Study.enqueue_trial`): written to it, WAITING, while it holds no trial yet.
    ``seeds``: (configuration, provenance) of the first trials, handed out in place of samples
    (the strategies' seed_trials, e.g. a warm start's; the provenance goes to their journal entries, ``mutransfer.seed``).
    """

    def __init__(
        self,
        study: Study,
        trials_dir: str | Path,
        window: int,
        seeds: Sequence[tuple[dict, dict]] = (),
        *,
        preset: list[dict] | None = None,
        sampler: optuna.samplers.BaseSampler | None = None,
        pruner: optuna.pruners.BasePruner | None = None,
        enqueued: Sequence[Mapping[str, object]] = (),
    ):
        self.study = study
        self.sampler = sampler
        self.seeds = list(seeds)
        self.trials_dir = Path(trials_dir)
        self.preset = None if preset is None else [dict(c) for c in preset]
        self.total = total_trials(study) if preset is None else len(preset)
        self.window = max(1, int(window)) if preset is None else max(1, self.total)  # presets never wait for results
        #: what stops a trial early: the study's ASHA, the Python API's pruner, or nothing for presets (full budget)
        self.pruner = (
            optuna.pruners.NopPruner()
            if preset is not None
            else pruner
            if pruner is not None
            else WindowedAsha(rung_milestones(study), study.budget.reduction_factor, self.window)
        )
        self.configs: dict[int, dict] = {}
        self.outcomes: dict[int, Outcome] = {}
        #: trials whose evaluations before this session were brought into the journal (SearchPlan.should_stop)
        self._caught_up: set[int] = set()
        self._space = search_distributions(study)
        self._load()
        #: the trials in Optuna's storage (mutransfer._sweep._trial_journal), brought up to the files here
        self.journal = TrialJournal(journal_path(self.trials_dir), study.name, self._space, study.search.objectives)
        for params in enqueued if not self.journal.study.get_trials(deepcopy=False) else ():
            self.journal.enqueue(params)  # before the search's first trial (Study.enqueue_trial's, kept till now)
        for i in sorted(self.configs):
            self._journal(i)
        self._queue = [i for i in sorted(self.configs) if i not in self.outcomes]  # resumed first, old keys
        self._next = len(self.configs)

    def _load(self) -> None:
        def seeded(i: int) -> bool:  # from another study's space (a seed), or a rung's promoted trial
            return i < len(self.seeds) or self.preset is not None

        for i, config, outcome in read_trials(self.trials_dir, self.total, self._space, seeded):
            self.configs[i] = config
            if outcome is not None:
                self.outcomes[i] = outcome

    # ---- handing out ----------------------------------------------------------------
    def finished(self) -> bool:
        return len(self.outcomes) >= self.total

    def handed_out(self) -> bool:
        """Every trial has been handed out: no new trial will ask for resources (a failed one may be retried)."""
        return not self._queue and self._next >= self.total

    def remaining(self) -> int:
        """Trials still to run this session (resumed unfinished ones and new ones)."""
        return self.total - len(self.outcomes)

    def next_trial(self) -> tuple[str, dict] | str | None:
        """(key, configuration) of the next trial; None: wait for earlier results; :data:`DONE`: all handed out."""
        if self._queue:
            i = self._queue.pop(0)
            return trial_key(i), dict(self.configs[i])
        i = self._next
        if i >= self.total:
            return DONE
        known = range(0, i - self.window + 1)
        if any(j not in self.outcomes for j in known):
            return None
        enqueued, fixed = self._enqueued(i)
        if i < len(self.seeds):
            config = dict(self.seeds[i][0])
        elif fixed.keys() >= self._space.keys():
            config = {name: fixed[name] for name in self._space}
        else:  # sampled; an enqueued trial's fixed parameters in place of the sampled ones
            config = {**self._sample(i, known), **fixed}
        config = json.loads(json.dumps(config))  # exactly what a resumed plan reads back
        if enqueued is not None:
            self.journal.claim(enqueued, i, trial_key(i), config)
        # the journal first, with a seed's provenance: a driver stopped before config.json hands the same trial out
        # again from it (_enqueued), and a config.json is never without its trial's provenance
        self.journal.handed_out(i, trial_key(i), config, self.seeds[i][1] if i < len(self.seeds) else None)
        directory = self.trials_dir / trial_key(i)
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / CONFIG_FILE, json.dumps(config))
        self.configs[i] = config
        self._next += 1
        return trial_key(i), dict(self.configs[i])

    def _enqueued(self, index: int) -> tuple[int | None, dict[str, object]]:
        """(journal trial id, fixed parameters) of the enqueued trial that becomes trial ``index`` (Optuna's
        ``enqueue_trial``: :meth:`mutransfer.Study.enqueue_trial`, or any process writing the journal); (None, {})
        for none. A trial the journal already holds as ``index`` (a driver stopped as it handed it out) is that one.
        Seeds, presets and a grid hand out their own configurations; an enqueued trial the search space does not
        hold is marked FAIL in the journal, with why (its user attribute ``mutransfer.refused``), and skipped."""
        held = self.journal.config(index)
        if held and (index < len(self.seeds) or self.preset is not None):
            return None, held  # handed out before a stop: as the journal holds it (the seed's, the rung's)
        if index < len(self.seeds) or self.preset is not None:
            return None, {}
        if held:
            return self.journal.trial_id(index), held
        if self.study.search.algorithm == "grid" and self.sampler is None:
            return None, {}
        for trial_id, given in self.journal.waiting():
            fixed, why = enqueued_params(given, self._space)
            if why is None:
                return trial_id, fixed
            self.journal.refuse(trial_id, why)
        return None, {}

    def _sample(self, index: int, known: range) -> dict:
        if self.preset is not None:
            return dict(self.preset[index])

        return sample_config(
            self.study,
            index,
            [(self.configs[j], self.outcomes[j].told(self.study.search.objectives)) for j in known],
            self.sampler,
        )

    # ---- results --------------------------------------------------------------------
    def record(self, key: str, metrics: dict, *, failed: bool, error: str | None = None) -> Outcome:
        """Store how trial ``key`` ended (``outcome.json``) from its last reported ``metrics``."""
        i = key_index(key)
        last = {k: metrics[k] for k in OUTCOME_METRICS if k in metrics}
        outcome = Outcome(
            trial_status(last, failed, self.study.budget.epochs),
            last,
            (error or "unknown error") if failed else None,
        )

        directory = self.trials_dir / key
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / OUTCOME_FILE, json.dumps(outcome.as_dict()))
        self.outcomes[i] = Outcome.from_dict(json.loads(json.dumps(outcome.as_dict())))
        self._journal(i)
        return self.outcomes[i]

    def retrying(self, key: str, failures: int, error: str) -> None:
        """Trial ``key`` failed and is retried: not an outcome (its outcome is written when its retries end), so a
        driver that dies meanwhile leaves it unfinished and ``--resume`` runs it again from its checkpoint; what
        failed is kept in the journal (its user attribute ``mutransfer.retrying``: how many failures, the last
        error)."""
        self.journal.retrying(key_index(key), int(failures), error)

    def _journal(self, index: int) -> None:
        """Write trial ``index`` to the journal as the files here hold it: handed out, or finished."""
        key, config, outcome = trial_key(index), self.configs.get(index), self.outcomes.get(index)
        if config is None or index in self.journal.done:
            return
        seed = read_trial_json(
            self.trials_dir / key / SEED_FILE
        )  # a seeded trial's provenance, in a folder from before
        self.journal.handed_out(index, key, config, seed if isinstance(seed, dict) else None)
        if outcome is None:
            return
        # its evaluations; an outcome written before the journal held them kept its ASHA rungs' values
        history = dict(outcome.rungs) | dict(self._history(key))
        told = outcome.told(self.study.search.objectives)  # a pruned trial of a two-objective search: no values
        self.journal.finished(
            index, key, config, outcome.status, None if isinstance(told, str) else told, sorted(history.items()),
            outcome.metrics, outcome.error,
        )  # fmt: skip

    def should_stop(self, key: str, epoch: int, val_error: float) -> bool:
        """Stop trial ``key``, which just reported ``val_error`` at ``epoch``? The value goes to the trial's
        intermediate values in the journal, and the search's pruner decides on the trial as the journal holds it.

        A trial resumed from its checkpoint reports first past epochs it evaluated in an earlier session: those
        (its ``history.json``) are written to the journal first, where a study written before the journal held
        them lacks them, so ASHA judges a rung it passed then with its value then.
        """
        i = key_index(key)
        earlier: list[tuple[int, float]] = []
        if i not in self._caught_up:
            self._caught_up.add(i)
            held = self.journal.values(i)
            earlier = [(e, v) for e, v in self._history(key) if e < epoch and e not in held]
        trial = self.journal.report(i, key, self.configs[i], [*earlier, (int(epoch), float(val_error))])
        return bool(self.pruner.prune(self.journal.study, trial))

    def _history(self, key: str) -> list[tuple[int, float]]:
        """(epoch, validation error) of each evaluation trial ``key`` made, as its ``history.json`` holds them."""
        return [(int(r.epoch), float(r.test_error)) for r in read_trial_history(self.trials_dir / key)]


def journal_trials(journal: TrialJournal, total: int) -> Iterator[tuple[int, dict, Outcome | None]]:
    """(index, config, outcome or None) of each trial handed out, in key order, as the journal holds them: what
    :func:`read_trials` reads from the trial files, for a journal that holds every trial in full
    (:attr:`TrialJournal.complete`; tests/sweep/test_sweep_plan.py compares the two)."""
    for i in range(total):
        held = journal.held(i)
        if held is None or not held.config:
            return  # handed out in key order: the first gap ends them
        outcome = None if held.status is None else Outcome(held.status, held.metrics, held.error)
        yield i, held.config, outcome


def write_journal(study: Study, trials_dir: str | Path) -> None:
    """Bring the Optuna journal of the search in ``trials_dir`` up to its trial files (nothing where the folder holds
    no trial): what a plan does when it loads, for a study resumed after its search ended (one finished before the
    journal existed opens in Optuna once resumed)."""
    if Path(trials_dir).is_dir():
        SearchPlan(study, trials_dir, 1)
