"""Where a command may write the file it makes (``--out``): checked before any work, one line when refused.

Every command that writes a file a user names goes through :func:`check_out`:

- an existing file is kept unless the command was given ``--force``;
- never, even with ``--force``: the command's own input, a special file (a FIFO, a device), an SQLite database
  (a tracking store: ``mlflow.db`` holds every study of the store), or a file inside a study folder (a folder
  holding ``state.json``) or a model folder (holding ``MLmodel``) other than the one file the command itself
  keeps there (``report``'s ``report.html``);
- never where no file can be made (a read-only folder, ``/proc``): refused before the work, not after it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from mutransfer._study.inputs import check_writable
from mutransfer._study_folder.state import StudyDir
from mutransfer._tracking._sqlite_file import is_sqlite_database
from mutransfer.errors import UserInputError
from mutransfer.serving._folder_schema import MLMODEL_FILE


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


#: what keeps the files of each kind of folder :func:`_enclosing_folder` finds
_KEEPER = {"study": "study", "model": "model", "MLflow artifact": "tracking store"}


def _enclosing_folder(path: Path) -> tuple[str, Path] | None:
    """("study" | "model" | "MLflow artifact", folder) for the nearest study or model folder, or MLflow artifact
    folder (``mlruns/``, beside a SQLite store: its runs' logged files), that holds ``path``."""
    for folder in path.resolve().parents:
        if StudyDir(folder).state_file.is_file():
            return "study", folder
        if (folder / MLMODEL_FILE).is_file():
            return "model", folder
        if folder.name == "mlruns":
            return "MLflow artifact", folder
    return None


#: the files SQLite and MLflow keep beside a database ``X``: its lock, write-ahead log, shared memory, journal
_COMPANION_SUFFIXES = (".lock", "-wal", "-shm", "-journal")


def _store_or_study_companion(path: Path) -> str | None:
    """What ``path`` is if it is a file a tracking store or a study keeps beside itself (replacing a lock while a
    driver holds it would let a second driver in): ``X.lock``/``X-wal``/``X-shm``/``X-journal`` of an SQLite database
    ``X``, or a study's lock (``<runs dir>/.locks/<study>.lock``)."""
    for suffix in _COMPANION_SUFFIXES:
        if path.name.endswith(suffix) and is_sqlite_database(path.with_name(path.name[: -len(suffix)])):
            return f"the {suffix.strip('.-')} file of the SQLite database {path.with_name(path.name[: -len(suffix)])}"
    if path.parent.name == ".locks" and path.suffix == ".lock":
        return f"the lock of study {path.stem!r}"
    return None


def check_out(
    out: str | Path,
    *,
    force: bool,
    inputs: Sequence[str | Path] = (),
    own: Path | None = None,
    example: str = "out.h5",
    flag: str = "--out",
) -> Path:
    """``out`` if the command may write it (module docstring), else a one-line :class:`UserInputError`.

    ``inputs``: the files the command reads; ``own``: the one file inside a study folder that the command
    itself keeps there (it may be replaced without ``--force``); ``example``: a file name to suggest when ``out``
    is a directory.
    """
    path = Path(out)
    if path.is_dir():
        raise UserInputError(f"{flag} {out}: is a directory; name a file, e.g. {path / example}")
    for source in inputs:
        if path.exists() and Path(source).exists() and _same_file(path, Path(source)):
            raise UserInputError(f"{flag} {out}: is this command's input ({source}); write to another file")
    if own is not None and path.resolve() == own.resolve():
        return path
    if path.exists() and not path.is_file():
        raise UserInputError(f"{flag} {out}: is not a regular file (a FIFO or a device?); write to a file")
    if is_sqlite_database(path):
        raise UserInputError(
            f"{flag} {out}: is an SQLite database (a tracking store holds every study's runs); write to another file"
        )
    companion = _store_or_study_companion(path)
    if companion is not None:
        raise UserInputError(
            f"{flag} {out}: is {companion} (replacing it could let two drivers in); write to another file"
        )
    enclosing = _enclosing_folder(path)
    if enclosing is not None:
        kind, folder = enclosing
        raise UserInputError(
            f"{flag} {out}: is inside the {kind} folder {folder}, whose files the {_KEEPER[kind]} keeps; write outside it"
        )
    if path.exists() and not force:
        raise UserInputError(
            f"{flag} {out}: the file exists and is kept; pass --force to replace it, or choose another {flag}"
        )
    check_writable(path.parent, out, flag)
    return path


def check_out_dir(out: str | Path, *, flag: str = "--out") -> Path:
    """``out`` if a command may make it the folder of what it writes (`train --out`), else a one-line
    :class:`UserInputError`: a new or empty folder (so never one holding the command's input), not a file, not
    inside a study or model folder. Nothing is replaced, ``--force`` or not."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UserInputError(f"{flag} {out}: is a file; name a new folder, e.g. {path.with_suffix('')}-model")
    if path.is_dir() and any(path.iterdir()):
        raise UserInputError(f"{flag} {out}: the folder exists and is not empty; name a new folder")
    check_outside_kept_folders(path, flag=flag)
    check_writable(path.parent, out, flag)  # the model is staged beside the folder, then moved into place
    return path


def check_outside_kept_folders(folder: str | Path, *, flag: str) -> Path:
    """``folder`` if it is neither a study or model folder nor inside one (a command's folder of checkpoints or
    figures, `train --checkpoint-dir`, `coord-check --out`), else a one-line :class:`UserInputError`: a study's
    trials and a model's weights are never replaced by another command's files. A folder that may be written is
    also checked for being writable."""
    path = Path(folder)
    enclosing = _enclosing_folder(path / MLMODEL_FILE)  # the folder itself, then every folder above it
    if enclosing is not None:
        kind, held = enclosing
        raise UserInputError(
            f"{flag} {folder}: is inside the {kind} folder {held}, whose files the {_KEEPER[kind]} keeps; write outside it"
        )
    check_writable(path, folder, flag)
    return path
