"""The per-study directory: ``<runs>/<study name>/``.

Layout::

    study.yaml          the resolved study (overrides applied) this directory belongs to
    state.json          phase (proxies|target|done), MLflow ids, search_window, proxy records, report
    trials/<key>/       what one proxy trial's worker writes (key t0000, t0001, … in hand-out order,
                        mutransfer._sweep.plan): the trainer checkpoint, history.json (its EpochRecords),
                        done.json, executions.jsonl; a folder of format 1 also holds
                        config.json and outcome.json, brought into the journal once (mutransfer._sweep._migrate)
    optuna.journal      the search's trials in Optuna's journal storage, their one store (configuration,
                        evaluations, how each ended; mutransfer._sweep._trial_journal); while a trial is written
                        there, optuna.journal.lock: Optuna's lock, a symbolic link; optuna.journal.cut: a write
                        cut short, set aside; optuna.journal.v1: a migrated folder's former journal
    costs.jsonl         one JSON line per training run (mutransfer._sweep._ledger), appended by the executor
    tune/run-<n>/       the Ray Tune experiment of the n-th session (written by Tune, never read back)
    target/             the target's checkpoint folders (epoch_NNNNN/, final/: checkpoint.pt, read with
                        weights_only=True; model.pt, summary.json) and progress.jsonl; a Ray Train run (several
                        workers, a GPU) adds checkpoint_manager_snapshot.json (JSON, read by Ray Train on a re-run)
    faults/             markers of the fault-injection hook (MUTRANSFER_FAIL_TRIALS)
    report.json/.txt    the transfer report, once the study is done

Resuming reads JSON and ``weights_only`` checkpoints only: no file of this folder is
unpickled, so a file planted in it cannot run code. state.json is rewritten atomically
(temp file + rename), so a killed driver leaves either the old or the new state, never
a torn file. Optuna's journal is appended to, one whole line per write under its lock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mutransfer._atomic import atomic_path
from mutransfer._config.checks import MAX_VERIFY_POINTS, MAX_VERIFY_SEEDS, MIN_VERIFY_POINTS
from mutransfer._version import __version__
from mutransfer.errors import UserInputError

DEFAULT_RUNS_DIR = "mutransfer-runs"
#: the way out of a lost or damaged state.json, in every message that finds one (mutransfer._sweep._rebuild_state)
REBUILD_HINT = (
    "rebuild it from the study's trials (its Optuna journal) with `mutransfer sweep --resume --rebuild-state` (this "
    "command's other flags kept; from Python, mt.load_study(NAME, rebuild_state=True)), or restore it from a copy"
)
#: the Optuna journal of a search's trials (mutransfer._sweep._trial_journal), beside its ``trials/``
JOURNAL_FILE = "optuna.journal"
#: the lock Optuna takes on the journal for each write: a symbolic link (Optuna's JournalFileSymlinkLock), made and
#: removed by Optuna and never read through. The one link a study folder may hold: a driver killed during a write
#: leaves it, and the next driver removes it (TrialJournal) instead of waiting out Optuna's 30 s grace period.
JOURNAL_LOCK = JOURNAL_FILE + ".lock"
#: the study folder's format (state.json's ``version``): a folder of a newer format is refused in one line. 1: the
#: proxy trials in their trial files (config.json, outcome.json), read and brought into a journal once
#: (mutransfer._sweep._migrate); 2: in the Optuna journal alone, which a mutransfer reading format 1 does not know
STATE_VERSION = 2


class StudyDir:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).absolute()
        self._links_checked = False

    @classmethod
    def for_study(cls, name: str, runs_dir: str | os.PathLike | None = None) -> StudyDir:
        return cls(Path(runs_dir or DEFAULT_RUNS_DIR) / name)

    # ---- paths ---------------------------------------------------------------------
    @property
    def study_file(self) -> Path:
        return self.root / "study.yaml"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def tune_dir(self) -> Path:
        return self.root / "tune"

    @property
    def trials_dir(self) -> Path:
        return self.root / "trials"

    @property
    def faults_dir(self) -> Path:
        return self.root / "faults"

    def trial_dir(self, trial_id: str) -> Path:
        return self.trials_dir / trial_id

    def exists(self) -> bool:
        return self.root.exists()

    def check_links(self) -> None:
        """One line where anything inside the folder is a symbolic link (:func:`refuse_links`), checked once per
        StudyDir, before its first file is read (its state, its study.yaml)."""
        if not self._links_checked:
            refuse_links(self.root)
            self._links_checked = True

    # ---- state ---------------------------------------------------------------------
    def read_state(self) -> dict:
        """state.json as a dict ({} where there is none yet), its fields checked (:data:`STATE_FIELDS`): a
        wrong-shaped file is one line naming the field, never a traceback further on."""
        self.check_links()
        if not self.state_file.exists():
            return {}
        if not self.state_file.is_file():  # a folder, a FIFO (whose reading would wait for ever) or a device
            raise UserInputError(f"study directory {self.root}: state.json is not a file; {REBUILD_HINT}")
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError, RecursionError):  # RecursionError: nested thousands deep
            raise UserInputError(
                f"study directory {self.root}: state.json is unreadable (empty, cut short, not JSON or nested too deeply); {REBUILD_HINT}"
            ) from None
        check_state(state, self.state_file)
        return state

    def trial_count(self) -> int:
        """How many trials the folder holds (their own files: ``trials/<key>/``)."""
        if not self.trials_dir.is_dir():
            return 0
        return sum(1 for p in self.trials_dir.iterdir() if p.is_dir())

    def write_state(self, state: dict) -> None:
        state = dict(state, version=STATE_VERSION)
        write_atomic(self.state_file, json.dumps(state, indent=2, default=str))

    def update_state(self, **changes) -> dict:
        state = self.read_state()
        state.update(changes)
        self.write_state(state)
        return state


#: the phases a sweep writes to state.json's ``phase``, in order
PHASES = ("proxies", "target", "done")

#: the type each field of state.json must have where present (None counts as absent)
STATE_FIELDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(
        ("phase", "study", "tracking_db", "tracking_uri", "experiment_id", "parent_run_id", "target_run_id"),
        (str,),
    ),
    **dict.fromkeys(("source_text", "search_summary"), (str,)),
    **dict.fromkeys(("created", "wall_seconds", "proxy_phase_seconds"), (int, float)),
    **dict.fromkeys(("search_window", "concurrency", "version"), (int,)),
    **dict.fromkeys(("trials", "overrides"), (list,)),
    **dict.fromkeys(("best", "cost_estimate", "model", "target_outcome", "report", "asked", "inputs"), (dict,)),
}
_KINDS = {str: "a string", int: "a number", float: "a number", list: "a list", dict: "a mapping"}


def check_state(state: object, path: Path) -> None:
    """A one-line UserInputError unless ``state`` has the shape the sweep writes (:data:`STATE_FIELDS`)."""
    fix = "restore the file from a copy (a sweep under another --name starts afresh)"

    def found(value: object) -> str:
        return "null" if value is None else type(value).__name__

    if not isinstance(state, dict):
        raise UserInputError(f"{path}: must be a JSON mapping of the study's state, found {found(state)}; {fix}")
    version = state.get("version")  # first: a newer format may give its fields other types
    if isinstance(version, int) and not isinstance(version, bool) and version > STATE_VERSION:
        raise UserInputError(
            f"{path}: written by a newer mutransfer (study folder format {version}; mutransfer {__version__} reads "
            f"format {STATE_VERSION}); upgrade mutransfer (pip install -U mutransfer) to open this study"
        )
    for key, types in STATE_FIELDS.items():
        value = state.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise UserInputError(f"{path}: field {key!r} must be {_KINDS[types[0]]}, found {found(value)}; {fix}")
    if state.get("phase") is not None and state["phase"] not in PHASES:
        raise UserInputError(f"{path}: field 'phase' must be one of {', '.join(PHASES)}; {fix}")
    if any(not isinstance(o, dict) for o in state.get("overrides") or []):
        raise UserInputError(f"{path}: field 'overrides' must be a list of mappings; {fix}")
    for i, trial in enumerate(state.get("trials") or []):
        problem = _trial_problem(trial)
        if problem:
            raise UserInputError(f"{path}: field 'trials' entry {i} {problem}; {fix}")
    if state.get("asked") is not None and not _asked_is_sound(state["asked"]):
        raise UserInputError(
            f"{path}: field 'asked' must map coord_check and verify to true/false, verify_points to "
            f"{MIN_VERIFY_POINTS}..{MAX_VERIFY_POINTS}, verify_seeds to 1..{MAX_VERIFY_SEEDS} and baseline to null or "
            f"'direct'; {fix}"
        )
    if state.get("target_outcome") is not None and not state.get("target_run_id"):  # the run is named before it trains
        raise UserInputError(f"{path}: holds the trained target but not its MLflow run (target_run_id); {fix}")
    if state.get("phase") == "done" and not isinstance(state.get("report"), dict):
        raise UserInputError(f"{path}: says the study is done but holds no report; {fix}")
    best, trials = state.get("best"), state.get("trials") or []
    if best is not None and trials and best.get("trial_id") not in {t["trial_id"] for t in trials}:
        raise UserInputError(f"{path}: field 'best' names no trial of field 'trials'; {fix}")


#: the fields of state.json's ``asked`` (mutransfer._sweep.asked: what a study was started to measure)
ASKED_FIELDS = ("coord_check", "verify", "verify_points", "verify_seeds", "baseline")


def _asked_is_sound(asked: object) -> bool:
    def whole(value: object, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    return (
        isinstance(asked, dict)
        and set(asked) == set(ASKED_FIELDS)
        and isinstance(asked["coord_check"], bool)
        and isinstance(asked["verify"], bool)
        and whole(asked["verify_points"], MIN_VERIFY_POINTS, MAX_VERIFY_POINTS)
        and whole(asked["verify_seeds"], 1, MAX_VERIFY_SEEDS)
        and asked["baseline"] in (None, "direct")
    )


#: the fields a trial record of state.json must have (mutransfer._study_folder.records.TrialRecord), and their types
TRIAL_FIELDS: dict[str, tuple[type, ...]] = {
    "trial_id": (str,),
    "index": (int,),
    "status": (str,),
    "config": (dict,),
    "hp": (dict,),
    "epochs": (int,),
}
#: the number fields a trial record may have (None or absent allowed)
TRIAL_NUMBERS = ("val_error", "trainer_seconds", "wall_seconds", "device_seconds", "span_seconds", "spectral_lr")


def _trial_problem(trial: object) -> str | None:
    """What is wrong with one entry of state.json's ``trials`` (None: nothing)."""
    if not isinstance(trial, dict):
        return "must be a mapping"
    for key, types in TRIAL_FIELDS.items():
        value = trial.get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            return f"needs {key!r} as {_KINDS[types[0]]}"
    for key in TRIAL_NUMBERS:
        value = trial.get(key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            return f"has {key!r} that is not a number"
    return None


def refuse_link(path: Path) -> None:
    """One line where ``path`` (a study folder's file or folder) is a symbolic link: a study folder holds its own
    files, so that what a command reads and writes stays inside it (issue "Nothing lost", item 3)."""
    if path.is_symlink():
        raise UserInputError(
            f"{path} is a symbolic link; a study folder holds its own files: put the file or folder it points to "
            "in its place, then run the command again"
        )


def refuse_links(root: Path) -> None:
    """:func:`refuse_link` for everything inside the study folder ``root`` (``root`` itself may be a link: a runs
    folder kept on another disk) but Optuna's journal lock (:data:`JOURNAL_LOCK`); links are not followed."""
    for folder, folders, files in os.walk(root):
        for name in (*folders, *files):
            if name != JOURNAL_LOCK:
                refuse_link(Path(folder) / name)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
