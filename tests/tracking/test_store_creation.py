"""Two drivers that start together on a new embedded store (edge case 2 of "A team deployment"): before, one of
them failed with MLflow's "table ... already exists" or alembic's "expected to match one row" (3 of 3 tries, 4 of
4 here); MLflow's first-time table creation now runs under a file lock beside the store."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

#: waits for a shared start time, then opens the store and makes (or finds) the experiment
RACE = """
import sys, time
from mutransfer._tracking.runs import Tracker
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
print(Tracker(sys.argv[1]).ensure_experiment("mutransfer"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_creating_a_new_store_at_once_both_succeed(tmp_path, attempt):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    start = str(time.time() + 6)  # both have imported MLflow by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, uri, start], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-1500:]
    assert [out.strip() for out, _ in results] == ["1", "1"], "one experiment, found by both"


def test_the_embedded_store_is_made_in_wal_mode(tmp_path):
    """WAL: readers do not block the writer when several drivers log to one sqlite store. A store MLflow makes on
    its own is in SQLite's default mode ("delete"): the check can fail. The mode is the file's (a later process
    reads it from the file), so both stores are made here, each at its own path (its own SQLAlchemy engine)."""
    import contextlib
    import sqlite3

    from mlflow.tracking import MlflowClient

    from mutransfer._tracking.runs import Tracker

    def mode(path) -> str:
        with contextlib.closing(sqlite3.connect(path)) as db:
            return db.execute("PRAGMA journal_mode").fetchone()[0]

    MlflowClient(f"sqlite:///{tmp_path / 'mlflow_made.db'}").search_experiments()
    assert mode(tmp_path / "mlflow_made.db") == "delete"
    Tracker(f"sqlite:///{tmp_path / 'ours.db'}").ensure_experiment("e")
    assert mode(tmp_path / "ours.db") == "wal"


def test_a_store_half_way_through_its_migrations_is_opened_only_after_its_maker(tmp_path):
    """The alembic_version row is written after MLflow's first migration and moved on after each: a store with a
    row at an older revision is one whose maker is still migrating it. A second opener waits for the maker's lock
    instead of migrating it too (CI: the sweep failed with "table _alembic_tmp_metrics already exists" while a
    client in the live test opened the store). Fails if any alembic_version row counted as a made store."""
    import contextlib
    import sqlite3
    import threading

    from filelock import FileLock

    from mutransfer._tracking.runs import _client

    path = tmp_path / "mlflow.db"
    uri = f"sqlite:///{path}"
    _client(uri)  # a made store, at the newest revision

    def set_revision(revision: str) -> str:
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            old = db.execute("SELECT version_num FROM alembic_version").fetchone()[0]
            db.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        return old

    newest = set_revision("451aebb31d03")  # MLflow's first migration: the maker is half-way
    opened = threading.Event()
    with FileLock(f"{path}.lock"):  # the maker holds the creation lock while it migrates
        opener = threading.Thread(target=lambda: (_client(uri), opened.set()), daemon=True)
        opener.start()
        assert not opened.wait(2), "a store half-way through its migrations was opened beside its maker"
        set_revision(newest)  # the maker finishes
    assert opened.wait(60)
