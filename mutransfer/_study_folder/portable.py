"""Paths a study stores, kept relative to its directory, so a copied or moved study folder still works.

A study folder is typically::

    mlflow.db                     the MLflow store (sqlite)
    mlruns/<experiment>/…         its artifacts (the experiment's artifact location, beside the store)
    mutransfer-runs/<study>/      the study directory (study.yaml, state.json, target/, model/, …)
    data.h5                       a data file the study names (optional)

``state.json`` keeps the sqlite store as ``tracking_db``, a path relative to the
study directory (``../../mlflow.db``); other stores (``http://…``) keep their URI
in ``tracking_uri``. ``study.yaml`` keeps ``problem.data`` relative to the study
directory when the file lies inside the folder that holds the runs directory
(data elsewhere is a shared resource and keeps its absolute path). Checkpoint
directories are stored relative to the study directory.

MLflow itself records artifact locations as absolute paths. Experiments created
by a sweep put their artifacts under ``mlruns/`` beside the sqlite store and carry
the tag :data:`ARTIFACT_TAG` (that location relative to the store), from which
:func:`relocated_artifact_path` finds an artifact of a moved store.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from mutransfer._study import study_from_yaml_text
from mutransfer._tracking._sqlite_file import sqlite_path
from mutransfer._tracking.runs import ARTIFACT_TAG
from mutransfer.errors import UserInputError


def _relative(path: Path, root: Path) -> str:
    return Path(os.path.relpath(Path(path).absolute(), Path(root).absolute())).as_posix()


def stored_tracking(uri: str, root: Path) -> dict:
    """What state.json keeps of the tracking URI: {"tracking_db": relative path} for sqlite, else {"tracking_uri": uri}."""
    path = sqlite_path(uri)
    if path is None:
        return {"tracking_uri": uri}
    return {"tracking_db": _relative(path, root)}


def study_tracking_uri(state: dict, root: Path) -> str | None:
    """The study's tracking URI from its state (None when the state names none), resolved where the study now is."""
    if state.get("tracking_db"):
        return f"sqlite:///{os.path.normpath(Path(root).absolute() / state['tracking_db'])}"
    return state.get("tracking_uri")


def stored_path(path: str | os.PathLike | None, root: Path) -> str | None:
    """A path as the study stores it: relative to ``root`` (the study directory)."""
    return None if path is None else _relative(Path(path), root)


def resolved_path(text: str | None, root: Path) -> str | None:
    """A stored path made absolute again: relative ones are taken from ``root``; absolute ones pass."""
    if text is None:
        return None
    path = Path(text)
    return str(path if path.is_absolute() else os.path.normpath(Path(root).absolute() / path))


def stored_data_path(data: str | None, root: Path) -> str | None:
    """problem.data as study.yaml keeps it: relative when it lies in the folder that holds the runs directory."""
    if data is None:
        return None
    home = Path(root).absolute().parents[1]
    path = Path(data).absolute()
    return _relative(path, root) if path.is_relative_to(home) else str(path)


def relocated_artifact_path(uri: str, experiment, recorded: str) -> Path | None:
    """Where an artifact recorded at ``recorded`` (a local path or file: URI) is now, for a moved sqlite store.

    None when it is where MLflow says, when the store is not sqlite, or when the
    experiment was not created by a sweep (no :data:`ARTIFACT_TAG`).
    """
    local = Path(recorded[len("file://") :] if recorded.startswith("file://") else recorded)
    db = sqlite_path(uri)
    relative = experiment.tags.get(ARTIFACT_TAG)
    if local.exists() or db is None or relative is None:
        return None
    base = Path(experiment.artifact_location.removeprefix("file://"))
    try:
        tail = local.relative_to(base)
    except ValueError:
        return None
    moved = db.absolute().parent / relative / tail
    return moved if moved.exists() else None


def write_study_file(study_dir, study) -> None:
    """study.yaml of a new study: the resolved study, problem.data as :func:`stored_data_path` keeps it."""

    mapping = study.to_dict()
    mapping["problem"]["data"] = stored_data_path(study.problem.data, study_dir.root)
    study_dir.study_file.write_text(yaml.safe_dump(mapping, sort_keys=False))


def read_study_file(study_dir, factory_search: tuple[Path, ...] = ()):
    """The study of ``study_dir`` (study.yaml) with problem.data made absolute where the study now is;
    ``factory_search``: where a factory it names may be imported from (default: the working directory only).

    A study.yaml written before validation splits has no ``problem.n_val``: that study selected on its test
    split, and it resumes so (``n_val = 0``, which no study file may ask for); its report says so.
    """

    study_dir.check_links()
    source = str(study_dir.study_file)
    try:
        text = study_dir.study_file.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise UserInputError(f"study {source}: cannot be read as UTF-8 text; restore the file") from None
    try:
        mapping = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        mapping = None  # study_from_yaml_text says so, in one line
    problem = mapping.get("problem") if isinstance(mapping, dict) else None
    if isinstance(problem, dict) and isinstance(problem.get("data"), str):
        problem["data"] = resolved_path(problem["data"], study_dir.root)
        text = yaml.safe_dump(mapping, sort_keys=False)
    study = study_from_yaml_text(text, source, factory_search)
    if isinstance(problem, dict) and "n_val" not in problem:
        study.problem.n_val = 0
    return study
