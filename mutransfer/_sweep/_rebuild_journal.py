"""A lost or damaged journal of the proxy trials, rebuilt from the study's MLflow runs (``--resume --rebuild-state``).

In a study folder of format 2 the search's Optuna journal is the one store of its trials (mutransfer._sweep._trial_journal): a
journal deleted, or damaged inside (a line that is not an Optuna entry), leaves a resume nothing to continue from,
and is refused. Each trial also has its MLflow child run (mutransfer._sweep.trial_logger), which holds what a resume
needs of it: its configuration (the ``hp.<name>`` params of the searched names), its status (``mutransfer.status``),
its last metrics, its validation error at every epoch (the ``val_error`` history) and a failed one's error. With
``--rebuild-state``, :func:`rebuild_journal` writes a new journal from those runs, in key order, once the study's
parent run is found (mutransfer._sweep._rebuild_state.reattach_parent); a damaged journal is kept beside it as
``optuna.journal.damaged``. Trials from the first key the store has no run of are not taken back: the search hands
out those keys again (a trial handed out that never started has no run). What the runs do not hold is not rebuilt:
a retried trial's last failure, and a warm start's seed provenance beyond its source trial (the run's
``mutransfer.warm_start_from`` tag).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from mutransfer._study import Study
from mutransfer._study_folder.state import JOURNAL_FILE, StudyDir
from mutransfer._sweep._migrate import COMPLETE, LOST, free_name, journal_state
from mutransfer._sweep._outcome import OUTCOME_METRICS, Outcome, trial_key
from mutransfer._sweep._trial_files import OUTCOME_STATUSES
from mutransfer._sweep._trial_journal import TrialJournal, journal_path, read_journal
from mutransfer._sweep.parent_run import FOLDER_TAG
from mutransfer._sweep.plan import key_number
from mutransfer._sweep.sampling import search_distributions
from mutransfer._sweep.warm_plan import WARM_FROM_TAG
from mutransfer._tracking._sqlite_file import sqlite_path
from mutransfer._tracking.runs import (
    ERROR_TAG,
    KIND_TAG,
    STATUS_TAG,
    STUDY_TAG,
    SUPERSEDED_TAG,
    TRIAL_ID_TAG,
    Tracker,
)
from mutransfer.errors import UserInputError

#: where a damaged journal goes when it is rebuilt
DAMAGED_JOURNAL = JOURNAL_FILE + ".damaged"
#: beside trials/: the folders of trials a rebuild could not take back (their keys are handed out again)
SUPERSEDED_DIR = "superseded"


def journal_lost(trials_dir: Path, name: str) -> bool:
    """Whether the search in ``trials_dir`` has lost its journal: damaged inside (a line that is not an entry, a gap
    in its trials' keys), or missing where trial folders exist (a folder from before the journal held the trials is
    not: it is migrated from its files)."""
    try:
        state = journal_state(trials_dir, name)
    except UserInputError:  # damaged
        return True
    if state != COMPLETE:
        return state == LOST
    held = read_journal(journal_path(trials_dir), name) or {}
    keys = sorted(i for i, trial in held.items() if trial.config)
    return keys != list(range(len(keys)))


def no_rebuild_source(study_name: str, study_dir: StudyDir, tracking_uri: str) -> UserInputError:
    """The error for a lost journal the store cannot rebuild: it holds no parent run made for this folder."""
    return UserInputError(
        f"study {study_name!r}: the store {tracking_uri} holds no MLflow parent run made for {study_dir.root}, so its "
        "journal of trials cannot be rebuilt; restore optuna.journal from a copy (or name the store this study logged "
        "to with --tracking-uri), or start a new study with --name NEW"
    )


def check_rebuild_source(study: Study, study_dir: StudyDir, tracking_uri: str) -> None:
    """Before anything runs or is written: the store holds, in the study's experiment (``tracking.experiment``,
    where the rebuild looks: mutransfer._sweep._rebuild_state.reattach_parent), a parent run of the study made for
    this folder, whose trial runs rebuild its lost journal. An SQLite store that does not exist is not made."""
    local = sqlite_path(tracking_uri)
    if local is not None and not local.exists():
        raise no_rebuild_source(study.name, study_dir, tracking_uri)
    tracker = Tracker(tracking_uri)
    experiment = tracker.client.get_experiment_by_name(study.tracking.experiment)
    query = f"tags.`{KIND_TAG}` = 'study' and tags.`{STUDY_TAG}` = '{study.name}'"  # names: letters, digits, -_.
    runs = [] if experiment is None else tracker.client.search_runs([experiment.experiment_id], filter_string=query)
    if not any(r.data.tags.get(FOLDER_TAG) == str(study_dir.root) for r in runs):
        raise no_rebuild_source(study.name, study_dir, tracking_uri)


def rebuild_journal(tracker: Tracker, experiment_id: str, parent_run_id: str, study: Study, trials_dir: Path) -> str:
    """Write the journal of the study's main search in ``trials_dir`` afresh from the proxy-trial runs of the parent
    run ``parent_run_id`` (module docstring). Returns the line that says what was taken back."""
    path = journal_path(trials_dir)
    runs = {
        run.data.tags[TRIAL_ID_TAG]: run
        for run in tracker.children(experiment_id, parent_run_id, "proxy_trial")
        if TRIAL_ID_TAG in run.data.tags and run.data.tags.get(SUPERSEDED_TAG) != "true"
    }
    space = search_distributions(study)
    if path.exists():
        path.rename(free_name(path.with_name(DAMAGED_JOURNAL)))
    journal = TrialJournal(path, study.name, space, study.search.objectives, migrating=True)
    taken = ended = 0
    for index in range(study.trial_count):
        run = runs.get(trial_key(index))
        config = None if run is None else _config(run.data.params, space)
        if run is None or config is None:
            break
        key, tags = trial_key(index), run.data.tags
        seed = {"warm_start_from": tags[WARM_FROM_TAG]} if WARM_FROM_TAG in tags else None
        journal.handed_out(index, key, config, seed)
        taken += 1
        status = tags.get(STATUS_TAG)
        if run.info.status not in ("FINISHED", "FAILED") or status not in OUTCOME_STATUSES:
            continue  # handed out, not ended: it continues from its checkpoint
        metrics = _metrics(run, str(status))
        error = tags.get(ERROR_TAG) if status == "failed" else None
        told = Outcome(str(status), metrics, error).told(study.search.objectives)
        history = [
            (int(m.step), float(m.value))
            for m in tracker.client.get_metric_history(run.info.run_id, "val_error")
            if math.isfinite(m.value)
        ]
        journal.finished(
            index, key, config, str(status), None if isinstance(told, str) else told, history, metrics, error
        )
        ended += 1
    journal.mark_complete()
    left = _supersede(tracker, runs, trials_dir, taken)
    said = f"rebuilt {path} from the study's MLflow runs: {taken} trial(s) ({ended} ended)"
    return said + (
        f"; from {trial_key(taken)} on the search runs again ({left} run(s) after the first key without one set aside, "
        f"tagged mutransfer.superseded; their folders in {trials_dir.parent / SUPERSEDED_DIR})"
        if left
        else ""
    )


def _supersede(tracker: Tracker, runs: dict, trials_dir: Path, taken: int) -> int:
    """Set aside what the trials from key ``taken`` on left, since those keys are handed out again: their runs tagged
    ``mutransfer.superseded`` (a new run is logged for the new trial), their folders (a checkpoint or done.json of
    another configuration would be resumed or replayed) moved to :data:`SUPERSEDED_DIR`. Returns the runs set aside."""
    left = sorted(key for key in runs if key_number(key) > taken)
    for key in left:
        tracker.set_tags(runs[key].info.run_id, {SUPERSEDED_TAG: "true"})
    folders = [p for p in sorted(trials_dir.glob("t*")) if p.is_dir() and key_number(p.name) > taken]
    for folder in folders:
        (trials_dir.parent / SUPERSEDED_DIR).mkdir(exist_ok=True)
        folder.rename(free_name(trials_dir.parent / SUPERSEDED_DIR / folder.name))
    return len(left)


def _config(params: dict[str, str], space: dict) -> dict | None:
    """A trial's configuration from its run's ``hp.<name>`` params, each as its distribution holds it (MLflow keeps
    ``str(value)``: ``True``, ``None``, ``"1"`` are read back as the choice whose text they are); None where one is
    missing."""
    config = {}
    for name, distribution in space.items():
        text = params.get(f"hp.{name}")
        if text is None:
            return None
        config[name] = _value(text, distribution)
    return config


def _value(text: str, distribution: object) -> object:
    """The value whose MLflow param text is ``text`` under ``distribution`` (a seed's value outside it: as JSON)."""
    if isinstance(distribution, CategoricalDistribution):
        for choice in distribution.choices:
            if str(choice) == text:
                return choice
    try:
        if isinstance(distribution, IntDistribution):
            return int(text)
        if isinstance(distribution, FloatDistribution):
            return float(text)
    except ValueError:
        pass
    try:
        return json.loads(text)
    except ValueError:
        return text


def _metrics(run, status: str) -> dict[str, float | None]:
    """The last metrics a trial reported (mutransfer._sweep._outcome.OUTCOME_METRICS) as its run holds them."""
    m = run.data.metrics
    held: dict[str, float | None] = {
        "epoch": m.get("epochs"),
        "val_error": m.get("final_val_error"),
        "train_loss": m.get("train_loss"),
        "lr": m.get("lr"),
        "trainer_seconds": m.get("trainer_seconds"),
        "time_total_s": m.get("wall_seconds"),
        "diverged": 1.0 if status == "diverged" else 0.0,
    }
    spectral = run.data.params.get("spectral_lr")
    if spectral is not None:
        held["spectral_lr0"] = float(spectral)
    return {
        k: v
        for k, v in held.items()
        if k in OUTCOME_METRICS and v is not None and not (isinstance(v, float) and math.isnan(v))
    }
