"""A search's trials as its journal holds them, edited as a user or a damaged disk might, and a study folder turned
back into one written before the journal held every trial (trials/<key>/config.json, outcome.json, warm_start.json),
for the migration's tests. Only tests write the journal this way; the product writes it through TrialJournal."""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from mutransfer._sweep._journal_file import journal_storage
from mutransfer._sweep._trial_journal import FORMAT_ATTR, HeldTrial, journal_path, read_journal


def journal_of(trials_dir: Path, name: str) -> optuna.Study:
    """The Optuna study of the search in ``trials_dir`` (its journal beside it)."""
    return optuna.load_study(study_name=name, storage=journal_storage(journal_path(trials_dir)))


def set_trial_attr(trials_dir: Path, name: str, index: int, attr: str, value: object) -> None:
    """Set the user attribute ``attr`` of our trial ``index`` in the journal file, as a hand edit would: the entry is
    written before the one that ended the trial (Optuna takes no change to a finished trial afterwards)."""
    study = journal_of(trials_dir, name)
    trial = next(
        t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("mutransfer.trial_id") == f"t{index:04d}"
    )
    path = journal_path(trials_dir)
    lines = path.read_bytes().splitlines()
    entry = json.dumps({"op_code": 8, "worker_id": "edit", "trial_id": trial._trial_id, "user_attr": {attr: value}})
    ends = [
        n for n, line in enumerate(lines)
        if (op := json.loads(line))["op_code"] == 6 and op["trial_id"] == trial._trial_id and op["state"] != 0
    ]  # fmt: skip
    lines.insert(ends[0] if ends else len(lines), entry.encode())
    path.write_bytes(b"\n".join(lines) + b"\n")


def as_legacy(trials_dir: Path, name: str, *, journal: str = "none") -> None:
    """Turn the search in ``trials_dir`` into one written before the journal held every trial: each trial's
    config.json (and its outcome.json once it ended, a seed's warm_start.json) written from the journal, then the
    journal removed (``journal="none"``, a folder from before the journal existed) or marked as one from before
    (``"v1"``: no format attribute)."""
    path = journal_path(trials_dir)
    held = read_journal(path, name)
    assert held is not None, "a complete journal to turn back"
    for index, trial in held.items():
        folder = trials_dir / f"t{index:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(trial.config))
        if trial.status is not None:
            outcome = {"status": trial.status, "metrics": trial.metrics, "error": trial.error}
            (folder / "outcome.json").write_text(json.dumps(outcome))
        if trial.seed is not None:
            (folder / "warm_start.json").write_text(json.dumps(trial.seed))
    state = trials_dir.parent / "state.json"
    if state.exists():  # a folder of format 1
        state.write_text(json.dumps({**json.loads(state.read_text()), "version": 1}))
    if journal == "none":
        path.unlink()
        return
    study = journal_of(trials_dir, name)
    study._storage.set_study_user_attr(study._study_id, FORMAT_ATTR, 1)  # Optuna keeps the last value set


def held_by_key(study_root: Path, name: str | None = None) -> dict[str, HeldTrial]:
    """What the journal of the search folder ``study_root`` holds of each proxy trial, by key (``t0000`` …); ``name``:
    its study's, or the one study the journal holds. {} where it holds none yet."""
    path = study_root / "optuna.journal"
    if not path.is_file():
        return {}
    if name is None:
        names = optuna.get_all_study_names(storage=journal_storage(path))
        if not names:
            return {}
        (name,) = names
    held = read_journal(path, name)
    return {} if held is None else {f"t{index:04d}": trial for index, trial in held.items()}
