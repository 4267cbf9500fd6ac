"""A lost or damaged ``state.json`` is refused on ``--resume``, and rebuilt with ``--resume --rebuild-state``.

A study folder's state.json holds what its trials (its Optuna journal) do not: the phase, the MLflow experiment and
runs, the search window. Without it a resume used to start MLflow afresh without a word: a second parent run, every
finished trial logged again, the old runs left RUNNING (issue "Nothing lost", finding 4). Now

- :func:`refuse_lost_state` refuses a folder holding trials whose state is missing or names no MLflow runs, and the
  runner refuses a state naming a parent run the store does not hold; each says how to rebuild;
- with ``--rebuild-state`` the resume starts from an empty state (the study file the folder holds is the study), and
  :func:`reattach_parent`, once the store is open, finds the study's MLflow runs by their tags: the newest parent run
  of this study (this folder's first) is reused, any other of its parent runs still RUNNING is closed (KILLED, with
  its open children), and the parent's target run and search window are taken back. The proxies then run from the
  trials' files as on any resume: finished trials are kept and their MLflow runs reused, unfinished ones continue
  from their checkpoints.
"""

from __future__ import annotations

from mutransfer._study_folder.state import REBUILD_HINT, StudyDir
from mutransfer._sweep._rebuild_journal import journal_lost
from mutransfer._sweep.parent_run import FOLDER_TAG, WINDOW_TAG
from mutransfer._tracking._sqlite_file import sqlite_path
from mutransfer._tracking.runs import KIND_TAG, STUDY_TAG, Tracker
from mutransfer.errors import UserInputError


def refuse_lost_state(study_dir: StudyDir, state: dict) -> None:
    """Refuse (one line, the way out) a resume of a folder that holds trials but no state naming its MLflow runs."""
    trials = study_dir.trial_count()
    if not trials:  # nothing trained yet: nothing to log twice
        return
    held = f"the folder holds {trials} trial(s), which a resume without it would log to MLflow again"
    if not study_dir.state_file.exists():
        raise UserInputError(f"study directory {study_dir.root}: state.json is missing ({held}); {REBUILD_HINT}")
    if not state.get("experiment_id") or not state.get("parent_run_id"):
        raise UserInputError(
            f"{study_dir.state_file}: names no MLflow experiment or parent run ({held}); {REBUILD_HINT}"
        )


def refuse_missing_parent(study_name: str, parent_run_id: str, tracking_uri: str) -> UserInputError:
    """The error for a state.json naming a parent run the store does not hold (deleted, or another store)."""
    return UserInputError(
        f"study {study_name!r}: its state.json names MLflow parent run {parent_run_id[:40]!r}, which the store "
        f"{tracking_uri} does not hold (deleted, or the store replaced); {REBUILD_HINT}"
    )


def check_state_runs(study_name: str, state: dict, tracking_uri: str) -> None:
    """Before anything runs or is written: the parent run a resumed state names is in the store. An SQLite store that
    does not exist is not made (it cannot hold the run); a store that cannot be asked is left to the study's start,
    whose checks say so. A finished study is not checked: it only shows its report, whatever the store holds."""
    parent = state.get("parent_run_id")
    if not parent or state.get("phase") == "done":
        return
    local = sqlite_path(tracking_uri)
    if local is not None and not local.exists():
        raise refuse_missing_parent(study_name, parent, tracking_uri)
    try:
        held = Tracker(tracking_uri).run_exists(parent)
    except Exception:  # noqa: BLE001 -- not this check's to report: the study's start asks again and says what failed
        return
    if not held:
        raise refuse_missing_parent(study_name, parent, tracking_uri)


def refuse_needless_rebuild(study_dir: StudyDir, study_name: str, tracking_uri: str) -> None:
    """``--rebuild-state`` on a folder whose state.json is intact (readable, naming its runs, which the store holds, and
    the proxies' records once they are done) and whose journal of trials is too is refused: a rebuild keeps less than
    the state does (docs/sweep.md). A lost journal is rebuilt (mutransfer._sweep._rebuild_journal)."""
    if journal_lost(study_dir.trials_dir, study_name):
        return
    try:
        state = study_dir.read_state()
        refuse_lost_state(study_dir, state)
        check_state_runs(study_name, state, tracking_uri)
    except UserInputError:
        return  # lost or damaged: rebuild it
    if not state.get("parent_run_id"):
        return
    if state.get("phase") in ("target", "done"):
        ids = {t.get("trial_id") for t in state.get("trials") or []}
        if (state.get("best") or {}).get("trial_id") not in ids:
            return
    raise UserInputError(
        f"--rebuild-state: the state.json of study {study_name!r} is intact (it names its MLflow runs, which the store "
        "holds); resume without --rebuild-state"
    )


def reattach_parent(tracker: Tracker, experiment_id: str, study_name: str, study_dir: StudyDir) -> dict | None:
    """This folder's parent run, found by its tags (the study's name, the folder it was made for), reopened (RUNNING),
    with what state.json kept of it: ``{"parent_run_id", "target_run_id" (or None), "search_window" (or None)}``;
    None where the store holds no parent run made for this folder (a moved folder, or runs purged: a new parent run
    is made; a run of another folder of the same name is never taken). Any other parent run made for this folder
    that is still RUNNING is closed (KILLED), its open children too."""
    query = f"tags.`{KIND_TAG}` = 'study' and tags.`{STUDY_TAG}` = '{study_name}'"  # names: letters, digits, -_.
    runs = tracker.client.search_runs([experiment_id], filter_string=query, order_by=["attributes.start_time DESC"])
    runs = [r for r in runs if r.data.tags.get(FOLDER_TAG) == str(study_dir.root)]
    if not runs:
        return None
    chosen = runs[0]
    for other in runs[1:]:
        if other.info.status == "RUNNING":
            tracker.set_status(other.info.run_id, "KILLED")
            tracker.end_open_children(other.info.run_id, "KILLED")
    parent = chosen.info.run_id
    tracker.set_status(parent, "RUNNING")
    targets = tracker.children(experiment_id, parent, kind="target")
    target = max(targets, key=lambda r: r.info.start_time).info.run_id if targets else None
    window = chosen.data.tags.get(WINDOW_TAG)
    return {
        "parent_run_id": parent,
        "target_run_id": target,
        "search_window": int(window) if window and window.isdigit() else None,
    }
