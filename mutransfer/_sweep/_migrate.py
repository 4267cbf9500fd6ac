"""A study folder written before the journal held every trial, brought into a new journal once.

In a study folder of format 1 (``state.json``'s ``version: 1``) the driver kept each proxy trial in files of its
folder, which a resume read:

- ``trials/<key>/config.json``: the searched hyperparameters, written when the trial was handed out;
- ``trials/<key>/outcome.json``: status, last reported metrics, a failed one's error (and, before the journal held
  intermediate values, ``rungs``: the validation error at each ASHA rung it reached);
- ``trials/<key>/warm_start.json``: a seeded trial's provenance.

Its ``optuna.journal``, where it had one, held parameters, values and states only. The first plan that loads such a
folder (:class:`mutransfer._sweep.plan.SearchPlan`) writes a new journal from those files, each checked
(mutransfer._sweep._trial_files), with each finished trial's evaluations from its ``history.json``; the former
journal is kept beside it as ``optuna.journal.v1``, and the trials it held waiting (Optuna's ``enqueue_trial``) wait
in the new one. The new journal says it is complete (:data:`~mutransfer._sweep._trial_journal.FORMAT_ATTR`) only once
its last trial is in: a driver stopped part-way leaves one that the next plan writes again from the files (and the
waiting trials again from the former journal), which are left as they are. ``optuna.journal.migrated`` then says the
folder was migrated: its journal alone holds the trials from there on, and a journal lost later is refused (or
rebuilt from MLflow, mutransfer._sweep._rebuild_journal), never written again from the stale files. A journal whose
``mutransfer.journal_format`` is 2 (written by an unreleased build after the trial files that were then its store) is
migrated the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from optuna.trial import TrialState

from mutransfer._study import Study
from mutransfer._study_folder.state import JOURNAL_FILE, write_atomic
from mutransfer._sweep._journal_file import check_journal, load_journal
from mutransfer._sweep._outcome import Outcome, trial_key
from mutransfer._sweep._trial_files import check_config, check_config_keys, check_outcome, read_trial_json, refuse_link
from mutransfer._sweep._trial_journal import (
    FORMAT,
    FORMAT_ATTR,
    MIGRATING_ATTR,
    TrialJournal,
    journal_path,
    trial_index,
)
from mutransfer._sweep.trial import read_trial_history
from mutransfer.errors import UserInputError

CONFIG_FILE = "config.json"
OUTCOME_FILE = "outcome.json"
#: a seeded trial's provenance (a strategy's seed_trials: a warm start's) in a folder from before (now the journal's
#: user attribute ``mutransfer.seed``)
SEED_FILE = "warm_start.json"
#: the former journal of a migrated folder
FORMER_JOURNAL = JOURNAL_FILE + ".v1"
#: written once a folder's migration is complete: from then on its journal alone holds its trials
MIGRATED_FILE = JOURNAL_FILE + ".migrated"


def read_trials(
    trials_dir: Path, total: int, space: dict, seeded: Callable[[int], bool]
) -> Iterator[tuple[int, dict, Outcome | None]]:
    """(index, config, outcome or None) of each trial an older folder's files hold, in key order, each file checked
    (mutransfer._sweep._trial_files): one line naming the first that is not as the sweep wrote it. ``seeded(i)``: trial
    ``i``'s config may lie outside the space (a seed from another study's, a rung's), so only its types are checked."""
    refuse_link(trials_dir)
    if trials_dir.exists() and not trials_dir.is_dir():
        raise UserInputError(f"{trials_dir} is not a folder; move it aside, then resume again")
    for i in range(total):
        refuse_link(trials_dir / trial_key(i))
        config = read_trial_json(trials_dir / trial_key(i) / CONFIG_FILE)
        if not isinstance(config, dict):
            return  # configurations were handed out in key order: the first gap ends them
        check_config_keys(trials_dir / trial_key(i) / CONFIG_FILE, config, space)
        check_config(trials_dir / trial_key(i) / CONFIG_FILE, config, space, seeded(i))
        outcome = read_trial_json(trials_dir / trial_key(i) / OUTCOME_FILE)
        if isinstance(outcome, dict) and "status" in outcome:
            check_outcome(trials_dir / trial_key(i) / OUTCOME_FILE, outcome)
            yield i, config, Outcome.from_dict(outcome)
        else:
            yield i, config, None


#: what a search folder's journal is, for the plan that loads it (:func:`journal_state`)
COMPLETE, NEW, MIGRATE, ADOPT, LOST = "complete", "new", "migrate", "adopt", "lost"


def journal_state(trials_dir: Path, name: str) -> str:
    """What the journal of the search in ``trials_dir`` (study ``name``) is, the journal checked first
    (:func:`~mutransfer._sweep._journal_file.check_journal`: damage is one line):

    - :data:`COMPLETE`: it holds every trial in full (format 3);
    - :data:`NEW`: no journal of this study and no trial folder: a search not begun;
    - :data:`MIGRATE`: a folder of format 1 (or of the unreleased format 2 that still wrote them), never migrated: its
      trial files hold the trials (:func:`migrate`);
    - :data:`ADOPT`: a journal without this version's mark that is the trials' store all the same (format 2 written
      without trial files), or one holding none of our trials while no trial folder exists: marked complete as it is;
    - :data:`LOST`: trial folders but no journal holding them (missing, of another study, or a migration or rebuild
      stopped part-way with nothing to redo it from; a migrated folder's stale files are never read again)."""
    path = journal_path(trials_dir)
    check_journal(path)
    refuse_link(trials_dir)
    if trials_dir.exists() and not trials_dir.is_dir():
        raise UserInputError(f"{trials_dir} is not a folder; move it aside, then resume again")
    files = (trials_dir / trial_key(0) / CONFIG_FILE).exists() and not path.with_name(MIGRATED_FILE).exists()
    study = load_journal(path, name) if path.is_file() and path.stat().st_size else None
    folders = trials_dir.is_dir() and any(p.is_dir() for p in trials_dir.iterdir())
    if study is None:
        return MIGRATE if files else LOST if folders else NEW
    attrs = study.user_attrs
    if attrs.get(FORMAT_ATTR) == FORMAT:
        return COMPLETE
    if files:
        return MIGRATE
    if attrs.get(MIGRATING_ATTR):
        return LOST
    keyed = any(trial_index(t) is not None for t in study.get_trials(deepcopy=False))
    return ADOPT if attrs.get(FORMAT_ATTR) == 2 or not (keyed or folders) else LOST


def migrate(study: Study, trials_dir: Path, total: int, space: dict, seeded: Callable[[int], bool]) -> None:
    """Write the journal of the older folder's search in ``trials_dir`` from its trial files (module docstring)."""
    path = journal_path(trials_dir)
    trials = list(read_trials(trials_dir, total, space, seeded))  # every file checked before anything is written
    waiting = _set_aside(path, study.name)
    journal = TrialJournal(path, study.name, space, study.search.objectives, migrating=True)
    for params in waiting:
        journal.enqueue(params)
    for index, config, outcome in trials:
        key = trial_key(index)
        seed = read_trial_json(trials_dir / key / SEED_FILE)
        journal.handed_out(index, key, config, seed if isinstance(seed, dict) else None)
        if outcome is None:
            continue
        history = [(int(r.epoch), float(r.test_error)) for r in read_trial_history(trials_dir / key)]
        told = outcome.told(study.search.objectives)  # a pruned trial of a two-objective search: no values
        journal.finished(
            index, key, config, outcome.status, None if isinstance(told, str) else told,
            sorted((dict(outcome.rungs) | dict(history)).items()), outcome.metrics, outcome.error,
        )  # fmt: skip
    journal.mark_complete()
    write_atomic(path.with_name(MIGRATED_FILE), json.dumps({"trials": len(trials), "format": FORMAT}))


def _set_aside(path: Path, name: str) -> list[dict]:
    """Move the former journal at ``path`` aside (:data:`FORMER_JOURNAL`, then ``.v1.2`` …; one a stopped migration
    left is removed: the files it was written from are still there). Returns the fixed parameters of the trials the
    newest former journal holds waiting, read after the move, so a migration stopped at any point reads them again."""
    if path.exists():
        current = load_journal(path, name)
        if current is not None and current.user_attrs.get(MIGRATING_ATTR):
            path.unlink()
        else:
            path.rename(free_name(path.with_name(FORMER_JOURNAL)))
    formers = sorted(
        (p for p in path.parent.glob(FORMER_JOURNAL + "*") if not p.name.endswith(".lock")),
        key=lambda p: (len(p.name), p.name),
    )  # .v1, .v1.2, …
    former = load_journal(formers[-1], name) if formers else None
    waiting = [] if former is None else former.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    kept = [dict(t.system_attrs.get("fixed_params") or {}) for t in waiting if trial_index(t) is None]
    return [params for params in kept if params]


def free_name(path: Path) -> Path:
    """``path`` if nothing is there, else the first of ``path.2``, ``path.3``, … that does not exist: where a file
    or folder is set aside without replacing one set aside before."""
    aside, number = path, 1
    while aside.exists():
        number += 1
        aside = path.with_name(f"{path.name}.{number}")
    return aside
