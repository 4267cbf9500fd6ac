"""A new SQLite store is a copy of an empty one MLflow made before (mutransfer.tracking._store_template), and a
template that could decide where a store's data go is never copied."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from mutransfer.atomic import current_umask
from mutransfer.tracking import _store_template as templates
from mutransfer.tracking.runs import _client, _newest_schema_revision


def _schema(path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return sorted(db.execute("SELECT type, name, sql FROM sqlite_master"))


def _default_experiment(path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT artifact_location FROM experiments WHERE experiment_id = 0").fetchone()[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[bytes, str]:
    """A store MLflow migrated itself, in a cache of its own: the template it left (its bytes) and its revision."""
    folder = tmp_path_factory.mktemp("made")
    revision = _newest_schema_revision()
    assert revision is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MUTRANSFER_CACHE", str(folder / "cache"))
        patch.chdir(folder)
        template = templates.template_path(revision)
        assert not template.exists()
        _make_store(folder / "a")
        assert template.is_file() and templates.template_problem(template, revision) is None
        assert oct(template.parent.stat().st_mode & 0o777) == oct(0o700)
        return template.read_bytes(), revision


@pytest.fixture
def cache(tmp_path, monkeypatch, made):
    """This test's cache, holding the template ``made`` left."""
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    content, revision = made
    template = templates.template_path(revision)
    template.parent.mkdir(mode=0o700, parents=True)
    template.write_bytes(content)
    template.chmod(0o600)
    return template, revision


def _make_store(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)  # MLflow's default experiment keeps its artifacts in ./mlruns of where the store is made
    path = folder / "mlflow.db"
    _client(f"sqlite:///{path}").search_experiments()
    return path


def test_a_new_store_is_the_templates_schema_with_its_own_default_experiment(tmp_path, cache):
    template, _ = cache
    made = template.stat().st_mtime_ns
    first, second = _make_store(tmp_path / "a"), _make_store(tmp_path / "b")  # copies of the template
    assert template.stat().st_mtime_ns == made, "the template was made again: the copy was not used"
    assert _schema(second) == _schema(first)
    assert _default_experiment(first) == str(tmp_path / "a" / "mlruns" / "0")
    assert _default_experiment(second) == str(tmp_path / "b" / "mlruns" / "0")
    with sqlite3.connect(second) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert oct(second.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())


def _plant(template, statement: str) -> None:
    with sqlite3.connect(template) as db:
        db.execute(statement)


@pytest.mark.parametrize(
    ("statement", "problem"),
    [
        (
            "INSERT INTO experiments (experiment_id, name, artifact_location, lifecycle_stage, workspace) "
            "VALUES (0, 'Default', '/somewhere/else', 'active', 'default')",
            "its table experiments is not empty",
        ),
        ("UPDATE workspaces SET default_artifact_root = '/somewhere/else'", "a workspace names where data go"),
        ("UPDATE alembic_version SET version_num = 'older'", "its schema is not revision"),
    ],
)
def test_a_template_that_could_send_data_elsewhere_is_not_copied(tmp_path, cache, statement, problem):
    template, revision = cache
    _plant(template, statement)
    assert problem in templates.template_problem(template, revision)
    assert not templates.copy_template(tmp_path / "c.db", revision) and not (tmp_path / "c.db").exists()


def test_a_store_is_made_by_mlflow_where_the_template_is_refused_and_the_template_made_again(tmp_path, cache):
    template, revision = cache
    _plant(template, "UPDATE workspaces SET default_artifact_root = '/somewhere/else'")
    store = _make_store(tmp_path / "b")
    assert _default_experiment(store) == str(tmp_path / "b" / "mlruns" / "0")
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT default_artifact_root FROM workspaces").fetchall() == [(None,)]
    assert templates.template_problem(template, revision) is None, "the template was not made again"


def test_a_template_others_may_write_is_not_copied(tmp_path, cache):
    template, revision = cache
    template.chmod(0o666)
    assert "writable by others" in templates.template_problem(template, revision)
    assert not templates.copy_template(tmp_path / "c.db", revision) and not (tmp_path / "c.db").exists()
    template.chmod(0o600)
    template.parent.chmod(0o777)
    assert "writable by others" in templates.template_problem(template, revision)
    template.parent.chmod(0o700)
    assert templates.copy_template(tmp_path / "c.db", revision)


def test_a_copy_never_replaces_a_file(tmp_path, cache):
    _, revision = cache
    mine = tmp_path / "mine.db"
    mine.write_text("a user's file")
    assert not templates.copy_template(mine, revision)
    assert mine.read_text() == "a user's file" and not list(tmp_path.glob(".mine.db-*"))
