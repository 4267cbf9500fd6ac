"""Quiet by default (mutransfer.cli._quiet): the listed third-party notices are hidden, warnings a user may act on
are not, and ``--verbose`` shows everything."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from mutransfer.cli import _quiet as quiet
from tests.sweep_helpers import write_tiny_data, write_tiny_study


@pytest.fixture
def restore_logging(monkeypatch):
    monkeypatch.delenv(quiet.MLFLOW_LEVEL_ENV, raising=False)
    auth = logging.getLogger(quiet.RAY_AUTH_LOGGER)
    db = logging.getLogger(quiet.MLFLOW_DB_LOGGER)
    filters, db_filters, level = list(auth.filters), list(db.filters), logging.getLogger("mlflow").level
    yield
    auth.filters[:] = filters
    db.filters[:] = db_filters
    logging.getLogger("mlflow").setLevel(level)
    os.environ.pop(quiet.MLFLOW_LEVEL_ENV, None)


def _passes(logger: logging.Logger, message: str) -> bool:
    record = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, message, None, None)
    return logger.filter(record)


def test_the_enabled_token_notice_is_hidden_and_the_disabled_warning_is_not(restore_logging):
    auth = logging.getLogger(quiet.RAY_AUTH_LOGGER)
    quiet.quiet_third_party(verbose=False)
    quiet.quiet_third_party(verbose=False)  # twice: one filter
    assert sum(isinstance(f, quiet._DropNotice) for f in auth.filters) == 1
    assert not _passes(auth, "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled ...")
    assert _passes(auth, "Token authentication is disabled for this Ray cluster. Anyone with network access ...")
    assert not logging.getLogger("mlflow.store.db.utils").isEnabledFor(logging.INFO)
    assert logging.getLogger("mlflow.store.db.utils").isEnabledFor(logging.WARNING)
    db = logging.getLogger(quiet.MLFLOW_DB_LOGGER)  # its traceback of a database error hidden, its retries not
    assert not _passes(db, "SQLAlchemy database error. The following exception is caught.\ndatabase or disk is full")
    assert _passes(db, "SQLAlchemy engine could not be created. The following exception is caught.")
    assert os.environ[quiet.MLFLOW_LEVEL_ENV] == "WARNING"


def test_verbose_hides_nothing(restore_logging):
    quiet.quiet_third_party(verbose=False)  # an earlier command in the same process hid them
    quiet.quiet_third_party(verbose=True)
    assert logging.getLogger("mlflow.store.db.utils").isEnabledFor(logging.INFO)
    assert os.environ[quiet.MLFLOW_LEVEL_ENV] == "INFO"
    assert not any(isinstance(f, quiet._DropNotice) for f in logging.getLogger(quiet.RAY_AUTH_LOGGER).filters)
    assert not any(isinstance(f, quiet._DropNotice) for f in logging.getLogger(quiet.MLFLOW_DB_LOGGER).filters)
    assert quiet.server_options(True) == [] and quiet.server_options(False) == ["--uvicorn-opts", "--log-level warning"]
    assert "PYTHONWARNINGS" not in quiet.server_environment(True) or os.environ.get("PYTHONWARNINGS")
    assert quiet.SERVER_WARNINGS in quiet.server_environment(False)["PYTHONWARNINGS"]


@pytest.mark.slow
def test_a_sweep_prints_no_third_party_info_unless_verbose(tmp_path):
    """A real tiny sweep through the CLI: MLflow's "Creating initial MLflow database tables" INFO line and Ray's
    token notice do not reach stderr; with --verbose MLflow's INFO lines do (that run in process: no Ray needed to
    see MLflow's lines)."""
    data = write_tiny_data(tmp_path / "tiny.h5")
    study = write_tiny_study(tmp_path, data, name="q", trials=1, epochs=1, target_epochs=1)
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    env.pop(quiet.MLFLOW_LEVEL_ENV, None)

    def sweep(cwd, *extra):
        cwd.mkdir(exist_ok=True)  # a new MLflow store in each: its tables are created, with an INFO line
        return subprocess.run(
            [sys.executable, "-m", "mutransfer", "sweep", "--study", str(study), *extra],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    quiet_run = sweep(tmp_path / "quiet")
    assert quiet_run.returncode == 0, quiet_run.stderr[-2000:]
    assert "INFO mlflow" not in quiet_run.stderr and RAY_NOTICE not in quiet_run.stderr
    assert "verdict:" in quiet_run.stdout
    loud = sweep(tmp_path / "loud", "--verbose", "--executor", "inprocess")
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert "INFO mlflow" in loud.stderr


RAY_NOTICE = quiet.RAY_AUTH_ENABLED


def test_the_ui_servers_local_only_note_is_hidden_and_its_other_lines_are_relayed():
    """`mutransfer ui` relays the MLflow server's printed lines (mutransfer.cli._quiet.relay_server_output): the note
    that it serves local requests only is left out unless --verbose; anything else, a warning for another host
    included, passes. The registry line is not printed at all: the command names the registry store."""
    import io

    from mutransfer.cli._ui_cmd import ui_command

    lines = [
        "[MLflow] Security middleware enabled with default settings (localhost-only). To allow connections ...\n",
        "[MLflow] WARNING: Security middleware is DISABLED. Your MLflow server is vulnerable to various attacks.\n",
        "Traceback (most recent call last):\n",
    ]
    shown = io.StringIO()
    quiet.relay_server_output(iter(lines), shown, verbose=False)
    assert shown.getvalue() == "".join(lines[1:])
    everything = io.StringIO()
    quiet.relay_server_output(iter(lines), everything, verbose=True)
    assert everything.getvalue() == "".join(lines)
    command = ui_command("sqlite:////tmp/m.db")
    assert command[command.index("--registry-store-uri") + 1] == "sqlite:////tmp/m.db"
