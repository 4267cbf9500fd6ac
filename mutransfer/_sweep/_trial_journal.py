"""The proxy trials of a search in an Optuna storage: ``<study folder>/optuna.journal``, one Optuna study per search.

The plan (:class:`mutransfer._sweep.plan.SearchPlan`) writes each trial there as it goes: a RUNNING trial when its
configuration is handed out (a sampled one is asked there, its parameters suggested through Optuna's trial interface
by the search's sampler wrapper, mutransfer._sweep._windowed, while it holds :data:`ASKING_ATTR`), finished when its
outcome is recorded,
with its value (the last validation relative L2), its validation error at every evaluated epoch as Optuna's
intermediate values, and our key and status as user attributes. So ``optuna.load_study`` and optuna-dashboard open a
mutransfer study (``mutransfer dashboard STUDY``; docs/api.md)::

    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(".../quick/optuna.journal"))
    optuna.load_study(study_name="quick", storage=storage).trials

The journal is the one store of the search's trials: what a resume reads, and all ``optuna.load_study`` needs. Each
trial's folder (``trials/<key>/``) keeps only what its worker writes: its checkpoint and the history it resumes from.
A study folder written before the journal held every trial (its trials' ``config.json`` and ``outcome.json``) is
brought into a new journal once, when a plan first loads it (mutransfer._sweep._migrate); its former journal is kept
beside it as ``optuna.journal.v1``. Optuna's journal takes a file lock for each write, so a dashboard may read it while
the study runs; a write cut short (a driver killed during it) is set aside as ``optuna.journal.cut`` before the next
write through :func:`~mutransfer._sweep._journal_file.journal_storage`
(mutransfer._sweep._journal_file.repair_cut).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from mutransfer._study_folder.state import JOURNAL_FILE, JOURNAL_LOCK
from mutransfer._sweep._journal_file import journal_storage, load_journal, refused_writes
from mutransfer.errors import UserInputError

#: user attributes of each Optuna trial: our key (``t0003``) and our status (completed | pruned | diverged | failed)
KEY_ATTR, STATUS_ATTR = "mutransfer.trial_id", "mutransfer.status"
#: user attributes of a trial enqueued with Optuna's ``enqueue_trial``: handed out as one of ours (True), or why not
ENQUEUED_ATTR, REFUSED_ATTR = "mutransfer.enqueued", "mutransfer.refused"
#: user attribute of one of our trials while its parameters are being sampled (True; False once handed out)
ASKING_ATTR = "mutransfer.asking"
#: user attributes of what the driver knows of a trial besides its parameters and value: a seeded trial's provenance
#: (a strategy's seed_trials: a warm start's), its last failure while it is retried, and how it ended (its last
#: reported metrics; a failed one's error; warm_start.json and retrying.json held the first two in a study folder of
#: format 1)
SEED_ATTR, RETRYING_ATTR, METRICS_ATTR, ERROR_ATTR = (
    "mutransfer.seed", "mutransfer.retrying", "mutransfer.metrics", "mutransfer.error",
)  # fmt: skip
#: how long a driver waits for Optuna's lock on the journal to be released before it breaks it (seconds)
LOCK_WAIT_S = 2.0
#: the study's user attribute of a journal written with all of those for every trial from its first one, as the one
#: store of the trials (3; a journal made before holds parameters, values and states only, or, format 2, was written
#: after the trial files that were then the store, which a driver stopped between the two left ahead of it); a
#: journal being written from an older folder's trial files (mutransfer._sweep._migrate) holds MIGRATING_ATTR until
#: its last trial is in, then FORMAT_ATTR
FORMAT_ATTR, FORMAT, MIGRATING_ATTR = "mutransfer.journal_format", 3, "mutransfer.migrating"

#: our status -> Optuna's trial state (a diverged trial has no usable value: FAIL, as a failed one)
STATES = {"completed": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "diverged": TrialState.FAIL}
#: the status of one of our trials that was ended from outside the search (the dashboard's "Mark complete",
#: ``ostudy.tell``), by its Optuna state (FAIL: failed): it is not run again, and its value is what was told
OUTSIDE_STATUS = {TrialState.COMPLETE: "completed", TrialState.PRUNED: "pruned"}


def trial_index(trial: optuna.trial.FrozenTrial) -> int | None:
    """Our index of a journal trial (its key ``t0003`` -> 3, the user attribute :data:`KEY_ATTR`); None for a trial
    without one (added to the journal by another tool)."""
    key = trial.user_attrs.get(KEY_ATTR)
    return int(key[1:]) if isinstance(key, str) and key[:1] == "t" and key[1:].isdigit() else None


def journal_path(trials_dir: str | Path) -> Path:
    """The journal of the search whose trial folders are in ``trials_dir``: ``<trials_dir>/../optuna.journal``."""
    return Path(trials_dir).parent / JOURNAL_FILE


def _contains(distribution: BaseDistribution, value: object) -> BaseDistribution | None:
    """``distribution``, widened to hold ``value`` where it is a range that does not (a seeded trial from another
    study's space); None where no distribution of its kind can (a choice not in the list, a log range reaching 0, an
    integer range off its step): Optuna refuses a parameter outside its distribution."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return (
            distribution
            if isinstance(distribution, CategoricalDistribution) and value in distribution.choices
            else None
        )
    if isinstance(distribution, CategoricalDistribution):
        return distribution if value in distribution.choices else None
    if isinstance(value, str) or not math.isfinite(value):
        return None
    if isinstance(distribution, FloatDistribution):
        if distribution.low <= value <= distribution.high:
            return distribution
        low, high = min(distribution.low, float(value)), max(distribution.high, float(value))
        if (distribution.log and low <= 0) or distribution.step is not None:
            return None
        return FloatDistribution(low, high, log=distribution.log)
    if isinstance(distribution, IntDistribution):
        if value != int(value) or (int(value) - distribution.low) % distribution.step:
            return None
        low, high = min(distribution.low, int(value)), max(distribution.high, int(value))
        if distribution.log and low <= 0:
            return None
        return IntDistribution(low, high, log=distribution.log, step=distribution.step)
    return None


@dataclass(frozen=True)
class HeldTrial:
    """What a journal holds of one of the search's trials: its ``config``; ``status`` (completed | pruned | diverged
    | failed) and last reported ``metrics`` once it ended, ``error`` a failed one's; ``seed``, a seeded trial's
    provenance; ``retrying``, its last failure while it is retried ({"failures": n, "error": text}); ``waiting``: not
    handed out yet (a driver stopped while its parameters were sampled, :meth:`TrialJournal.asking`)."""

    config: dict[str, object]
    status: str | None
    metrics: dict[str, float | None]
    error: str | None
    seed: dict | None
    retrying: dict | None
    waiting: bool = False


def config_of(trial: optuna.trial.FrozenTrial) -> dict[str, object]:
    """A journal trial's configuration: its parameters, the values kept as user attributes (outside the space) and,
    for an enqueued trial, its fixed parameters."""
    kept = {k.removeprefix("param."): v for k, v in trial.user_attrs.items() if k.startswith("param.")}
    fixed = trial.system_attrs.get("fixed_params")
    return {**(fixed if isinstance(fixed, dict) else {}), **trial.params, **kept}


def held_of(trial: optuna.trial.FrozenTrial) -> HeldTrial:
    """What a journal trial holds (:class:`HeldTrial`)."""
    attrs = trial.user_attrs
    status = attrs.get(STATUS_ATTR) if trial.state.is_finished() else None
    metrics = attrs.get(METRICS_ATTR) or {}
    if trial.state.is_finished() and STATUS_ATTR not in attrs:  # ended from outside (a dashboard's "tell")
        status = OUTSIDE_STATUS.get(trial.state, "failed")
        metrics = dict(zip(("val_error", "trainer_seconds"), trial.values or ()))
        attrs = {ERROR_ATTR: "ended from outside the search (Optuna's tell)", **attrs} if status == "failed" else attrs
    return HeldTrial(
        config=config_of(trial), status=None if status is None else str(status),
        metrics=dict(metrics) if isinstance(metrics, dict) else {"": metrics},  # an edit: the plan's checks name it
        error=attrs.get(ERROR_ATTR), seed=attrs.get(SEED_ATTR), retrying=attrs.get(RETRYING_ATTR),
        waiting=trial.state == TrialState.WAITING or attrs.get(ASKING_ATTR) is True,
    )  # fmt: skip


def read_journal(path: Path, name: str, *, complete: bool = True) -> dict[int, HeldTrial] | None:
    """The trials of the search ``name`` in the journal at ``path``, by our index, read without writing anything
    (another driver may be running that study); None where there is no journal holding every trial in full (one
    written before :data:`FORMAT_ATTR`, damaged, or none; ``complete=False``: whatever it holds): a folder from
    before holds them in its trial files (mutransfer._sweep._migrate)."""
    try:
        study = load_journal(path, name)
    except UserInputError:  # damaged
        return None
    if study is None or (complete and study.user_attrs.get(FORMAT_ATTR) != FORMAT):
        return None
    return {i: held_of(t) for t in study.get_trials(deepcopy=False) if (i := trial_index(t)) is not None}


class EndedTrials:
    """How each of a search's trials ended, as the journal at ``path`` holds it (study ``name``), read as the journal
    grows: what the trial logger writes a trial's MLflow run from (mutransfer._sweep.trial_logger). Opened on first
    use, and only read."""

    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name
        self._study: optuna.Study | None = None

    def of(self, key: str) -> HeldTrial | None:
        """What the journal holds of trial ``key`` once it ended (None: no journal, or not ended there)."""
        if self._study is None:
            try:
                self._study = load_journal(self.path, self.name)
            except UserInputError:  # damaged: the resume that reads it says so
                return None
            if self._study is None:  # no journal of that study (a logger fed by no plan)
                return None
        ended = [t for t in self._study.get_trials(deepcopy=False) if t.user_attrs.get(KEY_ATTR) == key]
        return held_of(ended[-1]) if ended and ended[-1].state.is_finished() else None


class TrialJournal:
    """One search's trials in the Optuna study ``name`` of the journal at ``path``.

    ``distributions``: the searched hyperparameters' Optuna distributions (mutransfer._sweep.sampling.search_distributions).
    ``objectives``: the study's ``search.objectives``; ``error+seconds`` makes a two-objective Optuna study (the
    validation error and the training seconds, both minimised: optuna-dashboard draws its Pareto front).
    ``migrating``: a new journal is being written from an older folder's trial files: it is marked complete by
    :meth:`mark_complete` once they are all in (a new journal is complete from its start).
    """

    def __init__(
        self,
        path: str | Path,
        name: str,
        distributions: Mapping[str, BaseDistribution],
        objectives: str = "error",
        *,
        migrating: bool = False,
    ):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.path = Path(path)
        self.distributions = dict(distributions)
        # Optuna's lock on the journal: another process writing it (an enqueue_trial, the dashboard) holds it for
        # milliseconds; one still there after LOCK_WAIT_S was left by a driver killed during a write (only the driver
        # holding the study's lock makes a TrialJournal), and is broken now: Optuna would wait 30 s
        lock = self.path.with_name(JOURNAL_LOCK)
        deadline = time.monotonic() + LOCK_WAIT_S
        while (lock.is_symlink() or lock.is_file()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if lock.is_symlink() or lock.is_file():
            lock.unlink(missing_ok=True)
        elif lock.exists():  # a folder (or a FIFO…) in its place: Optuna could never take its lock
            raise UserInputError(f"{lock} is not Optuna's lock (a symbolic link); move it aside, then run again")
        with refused_writes(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)  # a search's folder, made with its first trial
        self.storage = journal_storage(self.path)
        fresh = name not in {s.study_name for s in self.storage.get_all_studies()}  # its study made now
        with refused_writes(self.path):
            self.study = optuna.create_study(
                study_name=name,
                storage=self.storage,
                directions=["minimize"] * (1 if objectives == "error" else 2),
                load_if_exists=True,
            )
            if fresh:
                self.study.set_user_attr(MIGRATING_ATTR if migrating else FORMAT_ATTR, True if migrating else FORMAT)
        self._study_id = self.storage.get_study_id_from_name(name)  # read once: each trial's write names it
        #: our trial index -> Optuna's trial id, for the trials already in the journal
        self._ids: dict[int, int] = {}
        #: our indices of the trials the journal holds as finished
        self.done: set[int] = set()
        #: our trial index -> its intermediate values in the journal (epoch -> validation error)
        self._values: dict[int, dict[int, float]] = {}
        for trial in self.study.get_trials(deepcopy=False):
            index = trial_index(trial)
            if index is not None:
                self._ids[index] = self.storage.get_trial_id_from_study_id_trial_number(self._study_id, trial.number)
                self._values[index] = dict(trial.intermediate_values)
                if trial.state.is_finished():
                    self.done.add(index)

    def _params(self, config: Mapping[str, object]) -> tuple[dict, dict, dict]:
        """(params, their distributions, user attributes): a value no distribution of its kind holds is kept as the
        user attribute ``param.<name>`` instead of a parameter."""
        params, dists, kept = {}, {}, {}
        for k, distribution in self.distributions.items():
            if k not in config:
                continue
            held = _contains(distribution, config[k])
            if held is None:
                kept[f"param.{k}"] = config[k]
            else:
                params[k], dists[k] = config[k], held
        return params, dists, kept

    def mark_complete(self) -> None:
        """Every trial of an older folder (or of the study's MLflow runs) is in this journal: it holds them in full
        from now on."""
        with refused_writes(self.path):
            self.study.set_user_attr(FORMAT_ATTR, FORMAT)

    @property
    def complete(self) -> bool:
        """Whether every trial here holds what the driver knows of it (:data:`FORMAT_ATTR`): the journal was written
        by this version from its first trial."""
        return self.study.user_attrs.get(FORMAT_ATTR) == FORMAT

    def handed_out(
        self, index: int, key: str, config: Mapping[str, object], seed: Mapping[str, object] | None = None
    ) -> None:
        """Trial ``index`` (``key``) was handed out with ``config`` (``seed``: a seeded trial's provenance): a
        RUNNING trial, once."""
        if index in self._ids:
            return
        params, dists, kept = self._params(config)
        attrs = {KEY_ATTR: key, **kept, **({SEED_ATTR: dict(seed)} if seed is not None else {})}
        template = optuna.trial.FrozenTrial(
            number=-1, state=TrialState.RUNNING, value=None, datetime_start=None, datetime_complete=None,
            params=params, distributions=dists, user_attrs=attrs, system_attrs={},
            intermediate_values={}, trial_id=-1,
        )  # fmt: skip
        with refused_writes(self.path):
            self._ids[index] = self.storage.create_new_trial(self._study_id, template_trial=template)
        self._values[index] = {}

    def _write_values(self, index: int, values: Sequence[tuple[int, float]]) -> None:
        """Trial ``index``'s intermediate values (epoch, validation error): the finite ones the journal does not
        hold yet (a value it holds is not written twice)."""
        held = self._values[index]
        new = [(int(e), float(v)) for e, v in values if math.isfinite(v) and held.get(int(e)) != float(v)]
        with refused_writes(self.path):
            for epoch, value in new:
                self.storage.set_trial_intermediate_value(self._ids[index], epoch, value)
                held[epoch] = value

    def report(
        self, index: int, key: str, config: Mapping[str, object], values: Sequence[tuple[int, float]]
    ) -> optuna.trial.FrozenTrial:
        """Running trial ``index`` (``key``, handed out with ``config``) evaluated ``values`` ((epoch, validation
        error), its latest last): written as its intermediate values. Returns the trial as the journal holds it now,
        for the search's pruner (mutransfer._sweep._asha)."""
        self.handed_out(index, key, config)
        if index not in self.done:  # a finished trial's values are final
            self._write_values(index, values)
        return self.storage.get_trial(self._ids[index])

    def waiting(self) -> Iterator[tuple[int, dict[str, object]]]:
        """(trial id, fixed parameters) of the trials enqueued in the journal (Optuna's ``enqueue_trial``, from
        :meth:`mutransfer.Study.enqueue_trial` or any process) and not handed out yet, oldest first."""
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            if trial_index(trial) is None and REFUSED_ATTR not in trial.user_attrs:
                fixed = trial.system_attrs.get("fixed_params")
                trial_id = self.storage.get_trial_id_from_study_id_trial_number(self._study_id, trial.number)
                # with the parameters a claim stopped before our key wrote (TrialJournal.asking): kept as they are
                yield trial_id, {**(dict(fixed) if isinstance(fixed, dict) else {}), **trial.params}

    def enqueue(self, params: Mapping[str, object]) -> None:
        """A trial with these fixed parameters, WAITING to be handed out (Optuna's ``enqueue_trial``)."""
        with refused_writes(self.path):
            self.study.enqueue_trial(dict(params))

    def refuse(self, trial_id: int, why: str) -> None:
        """An enqueued trial that cannot be one of the search's (``why``): FAIL, the reason its user attribute."""
        with refused_writes(self.path):
            self.storage.set_trial_user_attr(trial_id, REFUSED_ATTR, why)
            self.storage.set_trial_state_values(trial_id, TrialState.FAIL)

    def asking(
        self, index: int, key: str, enqueued: int | None = None, fixed: Mapping[str, object] | None = None
    ) -> int:
        """Trial ``index`` (``key``) is about to be sampled (mutransfer._sweep._windowed.ask): its journal trial,
        RUNNING with our key and :data:`ASKING_ATTR`. That is the one a driver stopped part-way through asking left,
        else the enqueued trial ``enqueued`` (Optuna's ``enqueue_trial``; its ``fixed`` parameters as the search space
        holds them written before our key, as :meth:`waiting` reads them), else a new one: RUNNING, so Optuna's own
        ``ask`` (which takes WAITING trials) never takes it. Returns its trial id; :meth:`started` hands it out once
        its parameters are written, so a stop in between leaves it asking, asked again alike."""
        trial_id = self._ids.get(index, enqueued)
        with refused_writes(self.path):
            if trial_id is None:
                template = optuna.trial.FrozenTrial(
                    number=-1, state=TrialState.RUNNING, value=None, datetime_start=None, datetime_complete=None,
                    params={}, distributions={}, user_attrs={KEY_ATTR: key, ASKING_ATTR: True}, system_attrs={},
                    intermediate_values={}, trial_id=-1,
                )  # fmt: skip
                trial_id = self.storage.create_new_trial(self._study_id, template_trial=template)
            else:
                held = self.storage.get_trial(trial_id)
                if index not in self._ids:  # an enqueued trial becomes ours
                    params, dists, _kept = self._params(fixed or {})
                    for name in [n for n in params if n not in held.params]:
                        internal = dists[name].to_internal_repr(params[name])
                        self.storage.set_trial_param(trial_id, name, internal, dists[name])
                    for name, value in ((ENQUEUED_ATTR, True), (ASKING_ATTR, True), (KEY_ATTR, key)):
                        self.storage.set_trial_user_attr(trial_id, name, value)
                if held.state == TrialState.WAITING:
                    self.storage.set_trial_state_values(trial_id, TrialState.RUNNING)
        self._ids[index] = trial_id
        self._values.setdefault(index, {})
        return trial_id

    def started(self, index: int) -> dict[str, object]:
        """Trial ``index``, its parameters written (:meth:`asking`), is handed out. Returns its configuration as the
        journal holds it."""
        trial = self.storage.get_trial(self._ids[index])
        if trial.user_attrs.get(ASKING_ATTR):
            with refused_writes(self.path):
                self.storage.set_trial_user_attr(self._ids[index], ASKING_ATTR, False)
        return config_of(trial)

    def held(self, index: int) -> HeldTrial | None:
        """What the journal holds of trial ``index`` (None where it holds no such trial)."""
        return None if index not in self._ids else held_of(self.storage.get_trial(self._ids[index]))

    def values(self, index: int) -> dict[int, float]:
        """Trial ``index``'s intermediate values as the journal holds them (epoch -> validation error; {} if none)."""
        return dict(self._values.get(index, {}))

    def retrying(self, index: int, failures: int, error: str) -> None:
        """Handed-out trial ``index`` failed ``failures`` times, the last with ``error``, and is retried."""
        with refused_writes(self.path):
            self.storage.set_trial_user_attr(self._ids[index], RETRYING_ATTR, {"failures": failures, "error": error})

    def finished(
        self, index: int, key: str, config: Mapping[str, object], status: str,
        value: float | tuple[float, ...] | None, history: Sequence[tuple[int, float]],
        metrics: Mapping[str, float | None], error: str | None = None,
    ) -> None:  # fmt: skip
        """Trial ``index`` ended with ``status`` and ``value`` (None for a failed one; a tuple of the two objectives'
        values in a two-objective study); ``history``: (epoch, validation error) of its evaluations; ``metrics`` its
        last reported ones, ``error`` a failed one's. A trial the journal already holds as finished is left as it
        is."""
        if index in self.done:
            return
        self.handed_out(index, key, config)
        trial_id = self._ids[index]
        state = STATES.get(status, TrialState.FAIL)
        given = [] if value is None else [float(v) for v in (value if isinstance(value, tuple) else (value,))]
        usable = given and all(math.isfinite(v) for v in given) and state != TrialState.FAIL
        values = given if usable else None
        if values is None and state == TrialState.COMPLETE:
            state = TrialState.FAIL  # Optuna's COMPLETE holds a value
        self._write_values(index, history)
        with refused_writes(self.path):
            self.storage.set_trial_user_attr(trial_id, METRICS_ATTR, dict(metrics))
            if error is not None:
                self.storage.set_trial_user_attr(trial_id, ERROR_ATTR, error)
            self.storage.set_trial_user_attr(trial_id, STATUS_ATTR, status)
            self.storage.set_trial_state_values(trial_id, state, values)
        self.done.add(index)
