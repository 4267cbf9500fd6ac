"""A SQLite tracking store's file, checked before MLflow opens it: a directory, a file of something else, a
missing folder, or a truncated or damaged database is one line naming the path (MLflow's own errors are tracebacks)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from mutransfer.errors import UserInputError


def sqlite_path(uri: str) -> Path | None:
    """The file a ``sqlite:///`` URI names (None for any other URI)."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    return None


#: the first 16 bytes of every SQLite 3 database file
SQLITE_HEADER = b"SQLite format 3\x00"


def is_sqlite_database(path: Path) -> bool:
    """Whether ``path`` is a readable file that starts as every SQLite database does (a FIFO or device is not read)."""
    if not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def check_sqlite_file(uri: str) -> None:
    """A sqlite store must be a database file or not exist yet (MLflow creates it): a directory, a file of
    something else, or a missing folder is a one-line UserInputError naming the path, before MLflow opens it."""
    path = sqlite_path(uri)
    if path is None:
        return
    if path.is_dir():
        raise UserInputError(
            f"tracking store {path}: is a directory; name a database file in it, e.g. sqlite:///{path / 'mlflow.db'}"
        )
    if path.exists() and not path.is_file():  # /dev/null: SQLite would make /dev/null-journal; a FIFO: wait for ever
        raise UserInputError(
            f"tracking store {path}: is not a regular file (a FIFO or a device); name a database file, e.g. "
            "sqlite:///mlflow.db"
        )
    if not path.exists():
        if not path.parent.is_dir():
            raise UserInputError(f"tracking store {path}: its folder {path.parent} does not exist; create it first")
        return
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(100)  # SQLite's header (https://www.sqlite.org/fileformat.html)
    except OSError as exc:
        raise UserInputError(f"tracking store {path}: cannot be read ({exc.strerror}); check its permissions") from None
    if head and not head.startswith(SQLITE_HEADER):
        raise UserInputError(
            f"tracking store {path}: is not an SQLite database (MLflow's store); name another file, e.g. "
            f"sqlite:///{path.with_suffix('.db')}"
        )
    damage = _damage(path, head, size) if head else None
    if damage is not None:
        raise UserInputError(
            f"tracking store {path}: {damage}, not a store MLflow can open; restore it from a copy, or name another "
            "store with --tracking-uri sqlite:///other.db (the study folders keep every trial's files)"
        )


def _damage(path: Path, header: bytes, size: int) -> str | None:
    """What is wrong with the SQLite database file at ``path`` (``header``: its first 100 bytes, which start as
    SQLite's; ``size``: its bytes), or None: one shorter than the pages its header declares (truncated), or one SQLite
    reports corrupt or not a database when it reads the schema (read-only). The size is not compared while a journal
    or a write-ahead log sits beside it (a commit or a checkpoint writes the header before the file grows); any other
    SQLite error is not called damage (MLflow's own opening says what it is). It shows none of the file's bytes."""
    if len(header) < 100:
        return "truncated (shorter than its header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    live = Path(f"{path}-journal").exists() or _non_empty(Path(f"{path}-wal"))
    if not live and pages and header[92:96] == header[24:28] and size < pages * page_size:  # a valid page count
        return f"truncated ({size} bytes of the {pages * page_size} its header declares)"
    import sqlite3  # noqa: PLC0415 -- deferred: only when a store is opened

    try:
        with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=30)) as db:
            db.execute("SELECT name, sql FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
            return f"damaged ({exc})"
    return None


def _non_empty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


#: free bytes below which SQLite's "disk I/O error" on a store counts as a full file system (the store's write-ahead
#: log and shared-memory files could not be made or grown)
NEARLY_FULL = 1 << 20


def _said(exc: BaseException) -> str:
    """What ``exc`` and the exceptions it was raised from say (MLflow's error, raised from SQLAlchemy's, from
    sqlite3's)."""
    text: list[str] = []
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        text.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    return " ".join(text)


def store_full(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised from, SQLite's "database or disk is full" (a write to a store on a full disk)."""
    return "database or disk is full" in _said(exc)


def full_store_error(path: Path, exc: BaseException) -> OSError | None:
    """An ENOSPC ``OSError`` naming the store ``path`` when ``exc`` is SQLite's "database or disk is full"
    (:func:`store_full`), or its "disk I/O error" on a file system with less than :data:`NEARLY_FULL` bytes free (the
    store could not be opened); None for any other error. The CLI turns it into its one line for a full disk."""
    try:
        free = shutil.disk_usage(path.absolute().parent).free
    except OSError:
        free = NEARLY_FULL
    if store_full(exc) or ("disk I/O error" in _said(exc) and free < NEARLY_FULL):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return None
