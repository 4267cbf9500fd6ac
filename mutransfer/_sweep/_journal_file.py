"""Optuna's journal file of a search (``<study folder>/optuna.journal``), opened, checked and mended: a damaged
journal is refused in one line (:func:`check_journal`); a write cut short at its end (a process killed as it wrote) is
set aside as ``optuna.journal.cut`` before the next write (:func:`repair_cut`, :class:`_MendingBackend`); a write the
file system refuses is an OSError naming the journal (:func:`refused_writes`). What the journal holds is
mutransfer._sweep._trial_journal's."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from mutransfer._study_folder.state import JOURNAL_FILE
from mutransfer.errors import UserInputError

#: where the bytes of a journal write cut short go (:func:`repair_cut`)
CUT_FILE = JOURNAL_FILE + ".cut"


class _MendingBackend(JournalFileBackend):
    """Optuna's journal file, whose every write first sets aside a write cut short before it (:func:`repair_cut`):
    a process that holds the journal open (the dashboard, ``Study.optuna_study``) while a driver is killed as it
    writes would otherwise join its next entry to the cut line, damaging the trials' one store."""

    def __init__(self, path: str):
        super().__init__(path)
        self.path = Path(path)

    def append_logs(self, logs: list[dict[str, object]]) -> None:
        repair_cut(self.path)
        super().append_logs(logs)


def journal_storage(path: str | Path) -> JournalStorage:
    """Optuna's storage on the journal file ``path`` (made on first write). A damaged journal is refused first
    (:func:`check_journal`); a write cut short at its end is skipped by Optuna's reads and set aside before each
    write (:class:`_MendingBackend`), so opening it writes nothing."""
    check_journal(Path(path))
    return JournalStorage(_MendingBackend(str(path)))


def load_journal(path: Path, name: str) -> optuna.Study | None:
    """The Optuna study ``name`` of the journal at ``path``, opened without writing anything; None where there is no
    journal file (Optuna would make one) or it holds no study of that name. A damaged journal is one line
    (:func:`check_journal`)."""
    if not path.is_file():
        return None
    try:
        return optuna.load_study(study_name=name, storage=journal_storage(path))
    except KeyError:
        return None


def check_journal(path: Path) -> None:
    """One line (UserInputError) if the journal at ``path`` is not Optuna's: every line a JSON object with an
    ``op_code``. A last line without its end is a write cut short, which Optuna's reads skip: :func:`repair_cut` sets
    it aside. The journal alone holds the search's trials (their folders keep checkpoints only), so the way out is a
    copy of it."""
    if not path.exists():
        return
    fix = (
        "restore it from a copy (it alone holds the search's trials), or rebuild it from the study's MLflow runs with "
        "`mutransfer sweep --resume --rebuild-state` (from Python, mt.load_study(NAME, rebuild_state=True))"
    )
    if not path.is_file():
        raise UserInputError(f"{path} is not a file; {fix}")
    lines = path.read_bytes().split(b"\n")[:-1]  # the part after the last line end: a write cut short
    for number, line in enumerate(lines, 1):
        try:
            op = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8
            op = None
        if not isinstance(op, dict) or not isinstance(op.get("op_code"), int):
            raise UserInputError(f"{path}: line {number} is not an Optuna journal entry; {fix}")


def repair_cut(path: Path) -> bool:
    """Set aside a write cut short at the end of the journal at ``path`` (a process killed as it wrote): its bytes are
    appended to :data:`CUT_FILE` beside it and the journal ends at its last whole line, under Optuna's lock, so the
    next write starts a line of its own instead of joining them. True where there was one. A journal this process may
    not write (a dashboard of another user's study) is left as it is: Optuna's reads skip the cut line."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return False
    if not os.access(path, os.W_OK):
        return False
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end == len(data):
            return False  # another process mended it first
        with refused_writes(path):
            with path.with_name(CUT_FILE).open("ab") as cut:
                cut.write(data[end:] + b"\n")
            with path.open("r+b") as f:
                f.truncate(end)
        return True
    finally:
        lock.release()


@contextlib.contextmanager
def refused_writes(path: Path) -> Iterator[None]:
    """A write the file system refuses, as an OSError naming the journal (the CLI's one line: mutransfer.cli.main).
    Optuna's file lock turns a refused release into ``RuntimeError("did not possess lock")``; the refusal is its
    context."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        cause: BaseException | None = exc
        while cause is not None and not (isinstance(cause, OSError) and cause.errno):
            cause = cause.__context__
        if not isinstance(cause, OSError):
            raise
        raise OSError(cause.errno, cause.strerror, str(path)) from exc
