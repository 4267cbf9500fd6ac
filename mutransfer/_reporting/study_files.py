"""A study folder read back from disk: what ``mutransfer report`` and ``mutransfer trials`` show.

``STUDY`` is either a path to a study folder (one holding ``state.json``) or a study name looked up
in the runs directory (``./mutransfer-runs/<name>`` unless ``--runs-dir`` says otherwise), the folder
``mutransfer sweep`` writes. Only files are read (no MLflow), so a copied folder works offline.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mutransfer._study_folder.records import HISTORY_FILE, TrialRecord
from mutransfer._study_folder.state import DEFAULT_RUNS_DIR, StudyDir
from mutransfer._training.records import EpochRecord, load_history
from mutransfer.errors import UserInputError


@dataclass
class StudyFiles:
    """Everything a study folder holds that the report shows.

    ``histories`` maps a trial id to its evaluations (one :class:`EpochRecord` per evaluated epoch);
    a trial whose ``history.json`` is missing or unreadable is absent from it and has a line in ``notes``.
    """

    root: Path
    name: str
    state: dict
    report: dict | None
    study_text: str
    study: dict
    trials: list[TrialRecord]
    histories: dict[str, list[EpochRecord]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def phase(self) -> str:
        return "done" if self.report is not None else str(self.state.get("phase") or "started")

    @property
    def search_space(self) -> dict:
        """The study's ``search_space`` section as written in study.yaml (``{name: {type, low, high | values}}``)."""
        return dict(self.study.get("search_space") or {})

    @property
    def target_history(self) -> list[EpochRecord]:
        """The target's evaluations (state.json keeps the target's outcome with its history)."""
        outcome = self.state.get("target_outcome") or {}
        return load_history(outcome.get("history") or [])


def resolve_study_dir(study: str, runs_dir: str | None = None) -> Path:
    """The folder of ``study`` (a folder path, or a name under the runs directory); one-line error if none."""
    path = Path(study)
    if (path / "state.json").exists() or (path / "state.json").is_symlink():  # read_state names a FIFO or link
        return path.absolute()
    by_name = StudyDir.for_study(study, runs_dir).root
    if "/" not in study and ((by_name / "state.json").exists() or (by_name / "state.json").is_symlink()):
        return by_name
    where = runs_dir or DEFAULT_RUNS_DIR
    known = study_names(by_name.parent)
    close = difflib.get_close_matches(study, known, n=1, cutoff=0.6)
    listing = (f"; did you mean {close[0]!r}?" if close else "") + (
        f" The studies under {where}: {', '.join(known)}" if known else f" There is no study under {where} yet."
    )
    raise UserInputError(
        f"STUDY {study!r}: no study folder with a state.json at {path} or {by_name}; pass a study folder or the "
        f"name of a study under {where} (--runs-dir DIR for another runs directory){listing}"
    )


def study_names(runs_root: Path, limit: int = 20) -> list[str]:
    """Names of the study folders (those with a state.json) under ``runs_root``, sorted; at most ``limit``."""
    if not runs_root.is_dir():
        return []
    return sorted(p.name for p in runs_root.iterdir() if (p / "state.json").is_file())[:limit]


def _read_json(path: Path, what: str):
    if path.exists() and not path.is_file():  # a folder, a FIFO (whose reading would wait for ever) or a device
        raise UserInputError(f"{what} {path} is not a file; restore it from a copy")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
        raise UserInputError(f"{what} {path} is unreadable ({type(exc).__name__}); restore it from a copy") from None


#: report.json's top-level fields by the type the pages read them as (each may also be null)
_REPORT_FIELDS: dict[type, tuple[str, ...]] = {
    dict: (
        "selection", "trials", "best_proxy", "pareto_front", "transfer", "target_hyperparameters", "target",
        "compute", "mlflow", "proxy_to_target", "rungs", "top_k", "verification", "direct_baseline", "warm_start",
        "model", "coord_check", "k_rule",
    ),
    list: ("grid", "overrides", "trial_table", "verdict", "command"),
    str: (
        "study", "problem", "operator", "parametrization", "width_parametrization", "proxy_model", "target_model",
        "scaling", "study_dir",
    ),
}  # fmt: skip


def check_report(report: object, path: Path) -> dict:
    """``report`` (report.json, or the copy in state.json) if its fields have the types the report pages read; one line
    naming the first that does not (the file was edited or damaged)."""
    fix = "restore it from a copy (a report.json deleted: the copy in state.json is shown)"
    if not isinstance(report, dict):
        raise UserInputError(f"study report {path} is not a JSON object; {fix}")
    for kind, keys in _REPORT_FIELDS.items():
        for key in keys:
            value = report.get(key)
            if value is not None and not isinstance(value, kind):
                raise UserInputError(f"study report {path}: {key!r} is not a {kind.__name__}; {fix}")
    for row in report.get("trial_table") or []:
        if not isinstance(row, dict):
            raise UserInputError(f"study report {path}: 'trial_table' holds a row that is not an object; {fix}")
    return report


def load_study_files(study: str, runs_dir: str | None = None) -> StudyFiles:
    """Read the study folder named by ``study``: its state, report (if done), study.yaml and trial histories."""
    root = resolve_study_dir(study, runs_dir)
    state = StudyDir(root).read_state()  # checked: a link, a FIFO, a wrong shape are one line
    report_file = root / "report.json"
    report: dict | None = None
    if report_file.is_file():
        report = check_report(_read_json(report_file, "study report"), report_file)
    elif state.get("report") is not None:  # the copy a finished study keeps in its state
        report = check_report(state["report"], root / "state.json")
    study_path = root / "study.yaml"
    # a study.yaml that is damaged is shown as it is (what cannot be decoded as U+FFFD); its fields as none
    study_text = (
        study_path.read_bytes().decode("utf-8", errors="replace")
        if study_path.is_file()
        else str(state.get("source_text") or "")
    )
    try:
        mapping = yaml.safe_load(study_text) or {}
    except (yaml.YAMLError, RecursionError):
        mapping = {}
    trials = [TrialRecord.from_dict(t) for t in state.get("trials") or []]
    name = str(mapping.get("name") or state.get("study") or root.name) if isinstance(mapping, dict) else root.name
    files = StudyFiles(
        root=root,
        name=name,
        state=state,
        report=report,
        study_text=study_text,
        study=mapping if isinstance(mapping, dict) else {},
        trials=trials,
    )
    if not trials:
        files.notes.append(f"no proxy trial records yet (phase {files.phase}): the proxy phase has not finished")
    for trial in trials:
        history, problem = read_history(root / "trials" / trial.trial_id)
        if problem:
            files.notes.append(f"trial {trial.index} ({trial.trial_id}): {problem}; its learning curve is left out")
        else:
            files.histories[trial.trial_id] = history
    return files


def read_history(trial_dir: Path) -> tuple[list[EpochRecord], str | None]:
    """A trial's evaluations from its ``history.json``, or ``([], why)`` when the file is missing or corrupt."""
    path = trial_dir / HISTORY_FILE
    if not path.is_file():
        return [], f"{path} is missing"
    try:
        return load_history(json.loads(path.read_text())), None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [], f"{path} is unreadable ({type(exc).__name__})"
