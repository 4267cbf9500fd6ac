"""The proxy search's plan: which trial runs next, with which configuration, and when ASHA stops it.

Every proxy trial has a key of ours, ``t0000``, ``t0001``, … in the order its
configuration was handed out. The key names its directory (``trials/<key>/``: its worker's
checkpoint and history), its MLflow child run (tag ``mutransfer.trial_id``) and its row in
the report. The plan keeps the trials in the search's Optuna journal
(``<study folder>/optuna.journal``, mutransfer._sweep._trial_journal), their one store:

- a RUNNING trial with its configuration, written when the configuration is handed out
  (before Tune starts the trial): a sampled trial is asked on the journal's Optuna study
  (RUNNING with its key and ``mutransfer.asking`` while its parameters are suggested through
  Optuna's trial interface by the search's sampler wrapper,
  :class:`mutransfer._sweep._windowed.WindowedSampler`); a seed's or a ladder rung's is written as given;
- each evaluation's validation error, as the trial's intermediate values, written as it is
  reported; the search's Optuna pruner decides there whether the trial stops
  (:meth:`SearchPlan.should_stop`; mutransfer._sweep._asha);
- how it ended (completed | pruned | diverged | failed), its last reported metrics and a
  failed trial's error, written when the trial ends.

A resumed sweep rebuilds the plan from the journal alone (nothing is unpickled): trials
that ended are never run again; trials handed out that did not end are handed out first,
under their old keys, and continue from their own checkpoints; then new trials are sampled
up to the study's total. A folder written before the journal held every trial (its trials'
``config.json`` and ``outcome.json``) is brought into a journal first (mutransfer._sweep._migrate).

Reproducibility: with ``window`` = w (the concurrency of the study's first session,
kept in ``state.json``), trial i is handed out only once trials 0 … i-w have their
outcome, and its configuration is ``sample_config(study, i, results of trials
0 … i-w in key order, as the journal holds them)`` (mutransfer._sweep.sampling, through
the sampler wrapper). The built-in pruner, ASHA
(:class:`mutransfer._sweep._asha.WindowedAsha`), compares trial i at a rung with trials
0 … i-w only, which all finished before trial i started. So the configurations, the stopping decisions and, with deterministic
training, the results do not depend on the order in which Tune delivers results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import optuna

from mutransfer._study import Study
from mutransfer._sweep._asha import WindowedAsha, rung_milestones
from mutransfer._sweep._journal_file import refused_writes
from mutransfer._sweep._migrate import ADOPT, LOST, MIGRATE, SEED_FILE, journal_state, migrate, read_trials
from mutransfer._sweep._outcome import OUTCOME_METRICS, Outcome, key_index, trial_key, trial_status
from mutransfer._sweep._trial_files import check_config, check_config_keys, check_outcome, enqueued_params
from mutransfer._sweep._trial_journal import HeldTrial, TrialJournal, journal_path, read_journal
from mutransfer._sweep._windowed import WindowedSampler, ask
from mutransfer._sweep.sampling import search_distributions
from mutransfer._sweep.trial import read_trial_history
from mutransfer.errors import UserInputError

#: SearchPlan.next_trial: every trial has been handed out
DONE = "done"


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


def held_trials(
    path: Path, held: Mapping[int, HeldTrial], total: int, space: dict, seeded: Callable[[int], bool]
) -> Iterator[tuple[int, dict, Outcome | None]]:
    """(index, config, outcome or None) of each trial handed out, in key order, as the journal at ``path`` holds them
    (``held``: :func:`~mutransfer._sweep._trial_journal.read_journal`'s), each checked as a trial's files were
    (mutransfer._sweep._trial_files): one line naming the journal, the trial and the first field that is not as the
    sweep wrote it. ``seeded(i)``: trial ``i``'s config may lie outside the space (a seed, a rung's)."""
    for i in range(total):
        trial = held.get(i)
        where = f"{path} (trial {trial_key(i)})"
        if trial is not None and trial.waiting:  # being asked when a driver stopped: what it holds must fit
            if not set(trial.config) <= set(space):
                check_config_keys(where, trial.config, space)
            check_config(where, trial.config, {k: space[k] for k in trial.config}, False)
        if trial is None or trial.waiting or not trial.config:
            if later := sorted(j for j in held if j > i):  # handed out in key order: a gap is damage
                raise UserInputError(
                    f"{path}: holds trial {trial_key(later[0])} but not {trial_key(i)} before it; restore it from a "
                    "copy, or rebuild it from the study's MLflow runs with `mutransfer sweep --resume --rebuild-state`"
                )
            return  # the first trial not handed out yet ends them
        check_config_keys(where, trial.config, space)
        check_config(where, trial.config, space, seeded(i))
        if trial.status is None:
            yield i, dict(trial.config), None
            continue
        outcome = {"status": trial.status, "metrics": trial.metrics, "error": trial.error}
        check_outcome(where, outcome)
        yield i, dict(trial.config), Outcome.from_dict(outcome)


def check_trial_files(study: Study, trials_dir: Path) -> None:
    """Before a resume starts anything: the main search's trials read as :class:`SearchPlan` reads them, from its
    journal (or, in a folder from before the journal held them, its trial files). A seeded trial (its provenance in
    the journal, or ``SEED_FILE`` in a folder from before) may hold values outside the space: the plan checks them
    against the strategies' seeds when it loads."""
    path = journal_path(trials_dir)
    state = journal_state(trials_dir, study.name)  # a damaged journal is said as such, not as a seed it vouched for
    total, space = total_trials(study), search_distributions(study)
    if state == LOST:
        raise lost_journal(path, trials_dir)
    if state == MIGRATE:
        for _ in read_trials(trials_dir, total, space, lambda i: (trials_dir / trial_key(i) / SEED_FILE).exists()):
            pass
        return
    held = read_journal(path, study.name, complete=False) or {}
    for _ in held_trials(path, held, total, space, lambda i: held[i].seed is not None):
        pass


def lost_journal(path: Path, trials_dir: Path) -> UserInputError:
    """The error for a search whose trial folders no journal holds (mutransfer._sweep._migrate.journal_state)."""
    what = (
        "is missing" if not path.exists() else "does not hold them in full (a migration or rebuild stopped part-way?)"
    )
    return UserInputError(
        f"{path} {what}, and it alone holds the trials of {trials_dir} (their folders keep checkpoints only); "
        "restore it from a copy, or rebuild it from the study's MLflow runs with `mutransfer sweep --resume "
        "--rebuild-state` (from Python, mt.load_study(NAME, rebuild_state=True))"
    )


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
        self.journal = self._load()
        #: what samples the search's trials on its journal: the study's sampler (or the API's) over the window's trials
        self.journal.study.sampler = WindowedSampler(study, self.window, sampler)
        for params in enqueued if not self.journal.study.get_trials(deepcopy=False) else ():
            self.journal.enqueue(params)  # before the search's first trial (Study.enqueue_trial's, kept till now)
        self._queue = [i for i in sorted(self.configs) if i not in self.outcomes]  # resumed first, old keys
        self._next = len(self.configs)

    def _load(self) -> TrialJournal:
        """The search's trials in Optuna's storage (mutransfer._sweep._trial_journal), read into :attr:`configs` and
        :attr:`outcomes`; a folder from before the journal held them is brought into one first (_migrate)."""

        def seeded(i: int) -> bool:  # from another study's space (a seed), or a rung's promoted trial
            return i < len(self.seeds) or self.preset is not None

        path = journal_path(self.trials_dir)
        state = journal_state(self.trials_dir, self.study.name)
        if state == LOST:
            raise lost_journal(path, self.trials_dir)
        if state == MIGRATE:
            migrate(self.study, self.trials_dir, self.total, self._space, seeded)
        journal = TrialJournal(path, self.study.name, self._space, self.study.search.objectives)
        if state == ADOPT:
            journal.mark_complete()
        held = {i: trial for i in range(self.total) if (trial := journal.held(i)) is not None}
        for i, config, outcome in held_trials(path, held, self.total, self._space, seeded):
            self.configs[i] = config
            if outcome is not None:
                self.outcomes[i] = outcome
        return journal

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
        if any(j not in self.outcomes for j in range(0, i - self.window + 1)):
            return None
        key = trial_key(i)
        if i < len(self.seeds) or self.preset is not None:  # handed out as given, in one write
            config = json.loads(json.dumps(self.seeds[i][0] if i < len(self.seeds) else self._preset(i)))
            self.journal.handed_out(i, key, config, self.seeds[i][1] if i < len(self.seeds) else None)
        else:  # asked through Optuna (a trial a stop left part-way through asking: asked again, alike)
            enqueued, fixed = self._enqueued()
            trial_id = self.journal.asking(i, key, enqueued, fixed)
            try:
                with refused_writes(self.journal.path):
                    ask(self.journal.study, trial_id, self._space)
            except ValueError as exc:  # a parameter written before a stop, edited since to another distribution
                raise UserInputError(
                    f"{self.journal.path} (trial {key}): {exc}; restore it from a copy, or start a new study with "
                    "--name NEW"
                ) from None
            config = self.journal.started(i)
        (self.trials_dir / key).mkdir(parents=True, exist_ok=True)  # its worker's checkpoints and history
        self.configs[i] = config
        self._next += 1
        return key, dict(self.configs[i])

    def _enqueued(self) -> tuple[int | None, dict[str, object]]:
        """(journal trial id, fixed parameters) of the enqueued trial that becomes the next sampled trial (Optuna's
        ``enqueue_trial``: :meth:`mutransfer.Study.enqueue_trial`, or any process writing the journal); (None, {})
        for none. A grid hands out its own configurations; an enqueued trial the search space does not hold is marked
        FAIL in the journal, with why (its user attribute ``mutransfer.refused``), and skipped."""
        if self.study.search.algorithm == "grid" and self.sampler is None:
            return None, {}
        for trial_id, given in self.journal.waiting():
            fixed, why = enqueued_params(given, self._space)
            if why is None:
                return trial_id, fixed
            self.journal.refuse(trial_id, why)
        return None, {}

    def _preset(self, index: int) -> dict:
        return dict((self.preset or [])[index])

    # ---- results --------------------------------------------------------------------
    def record(self, key: str, metrics: dict, *, failed: bool, error: str | None = None) -> Outcome:
        """Store how trial ``key`` ended, from its last reported ``metrics``: in the journal, with its evaluations
        (its ``history.json``) and the value its sampler is told."""
        i = key_index(key)
        last = {k: metrics[k] for k in OUTCOME_METRICS if k in metrics}
        outcome = Outcome(
            trial_status(last, failed, self.study.budget.epochs),
            last,
            (error or "unknown error") if failed else None,
        )
        self.outcomes[i] = Outcome.from_dict(json.loads(json.dumps(outcome.as_dict())))  # as a resume reads it
        told = self.outcomes[i].told(self.study.search.objectives)  # a pruned trial of a two-objective search: none
        self.journal.finished(
            i, key, self.configs[i], outcome.status, None if isinstance(told, str) else told, self._history(key),
            self.outcomes[i].metrics, self.outcomes[i].error,
        )  # fmt: skip
        return self.outcomes[i]

    def retrying(self, key: str, failures: int, error: str) -> None:
        """Trial ``key`` failed and is retried: not an outcome (its outcome is written when its retries end), so a
        driver that dies meanwhile leaves it unfinished and ``--resume`` runs it again from its checkpoint; what
        failed is kept in the journal (its user attribute ``mutransfer.retrying``: how many failures, the last
        error)."""
        self.journal.retrying(key_index(key), int(failures), error)

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


def write_journal(study: Study, trials_dir: str | Path) -> None:
    """Bring a search that ended before the journal held its trials into one (mutransfer._sweep._migrate; nothing
    where it is kept in one already, or holds no trial): for a study complete before, so Optuna opens it."""
    trials_dir = Path(trials_dir)
    if journal_state(trials_dir, study.name) == MIGRATE:
        seeded = lambda i: (trials_dir / trial_key(i) / SEED_FILE).exists()  # noqa: E731
        migrate(study, trials_dir, total_trials(study), search_distributions(study), seeded)
