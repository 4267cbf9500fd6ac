"""A new SQLite tracking store as a copy of an empty one that MLflow made before.

MLflow makes a new SQLite store by creating its first schema and migrating it through every revision since (about
60): 1.9 CPU-s of a 22 CPU-s tiny study in process (``py-spy`` on ``mutransfer sweep``; docs/results.md, "A new
tracking store"). What it makes is the same for every store but one row: the default experiment, whose artifact
location is the new store's folder. So the first store made under an installed MLflow leaves, in the cache
(``$MUTRANSFER_CACHE/mlflow/``, else ``~/.cache/mutransfer/mlflow/``), a copy without that row; a later new store
is a copy of it, and MLflow adds the default experiment when it opens it, as it does in a store it migrated itself.

A template is copied only when nothing in it can decide where a store's data go (:func:`template_problem`): the
file and its folder are this user's and writable by no one else, its schema revision is the installed MLflow's
newest, and it holds no row but that revision and MLflow's default workspace (no experiment, run or artifact root).
Otherwise the store is migrated by MLflow, as before, and the template made again. Everything here is best effort:
a cache that cannot be written or read costs the migration, never the store.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
import tempfile
from pathlib import Path

from mutransfer.atomic import current_umask
from mutransfer.config.cache import cache_root

__all__ = ["copy_template", "save_template", "template_path", "template_problem"]

#: the tables a new store fills: the schema's revision, and MLflow's default workspace (no artifact root of its own)
_FILLED = {"alembic_version", "workspaces"}


def template_path(revision: str) -> Path:
    """Where the empty store of schema ``revision`` (MLflow's alembic head) is kept."""
    return cache_root() / "mlflow" / f"empty-store-{revision}.db"


def template_problem(path: Path, revision: str) -> str | None:
    """Why the file at ``path`` may not be copied as a new store of schema ``revision``, or None when it may."""
    for where in (path.parent, path):
        info = where.lstat()
        if stat.S_ISLNK(info.st_mode):
            return f"{where} is a symbolic link"
        if info.st_uid != os.getuid():
            return f"{where} belongs to another user"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{where} is writable by others"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        if db.execute("SELECT version_num FROM alembic_version").fetchall() != [(revision,)]:
            return f"its schema is not revision {revision}"
        workspaces = db.execute("SELECT default_artifact_root, trace_archival_location FROM workspaces").fetchall()
        if any(value is not None for row in workspaces for value in row) or len(workspaces) > 1:
            return "a workspace names where data go"
        for table in tables:
            if table not in _FILLED and db.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone():
                return f"its table {table} is not empty"
    return None


def copy_template(path: Path, revision: str | None) -> bool:
    """Make the store at ``path`` (which does not exist) a copy of the template of ``revision``; whether it did."""
    if revision is None:
        return False
    template = template_path(revision)
    try:
        if not template.is_file() or template_problem(template, revision) is not None:
            return False
        staging = Path(tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)[1])
        try:
            shutil.copyfile(template, staging)
            os.chmod(staging, 0o666 & ~current_umask())  # as MLflow's own file would be
            os.link(staging, path)  # never over a file made meanwhile: FileExistsError
        finally:
            staging.unlink(missing_ok=True)
    except (OSError, sqlite3.Error):
        return False
    return True


def save_template(store: Path, revision: str | None) -> None:
    """Keep an empty copy of ``store``, a store MLflow has just made and migrated to ``revision``: its default
    experiment removed (its artifact location is ``store``'s folder)."""
    if revision is None:
        return
    template = template_path(revision)
    try:
        template.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging = Path(tempfile.mkstemp(prefix=".empty-store-", dir=template.parent)[1])
        try:
            with (
                contextlib.closing(sqlite3.connect(store)) as source,
                contextlib.closing(sqlite3.connect(staging)) as copy,
            ):
                source.backup(copy)
                copy.execute("DELETE FROM experiment_tags")
                copy.execute("DELETE FROM experiments")
                copy.commit()
            if template_problem(staging, revision) is None:
                os.replace(staging, template)
        finally:
            staging.unlink(missing_ok=True)
    except (OSError, sqlite3.Error):
        return
