"""Quiet by default: third-party INFO logs and known-harmless warnings hidden unless ``--verbose``.

What is hidden is listed here and nothing else: MLflow's INFO lines (its store's "Creating initial MLflow
database tables...", the server's start-up), Ray's notice that token authentication is *enabled* (its warning
that authentication is *disabled* stays: a user may have to act on it), uvicorn's per-start INFO lines,
Starlette's deprecation of the WSGI middleware MLflow's server imports, and the server's printed note that it
accepts local requests only. Warnings and errors of every library
still reach the console.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import TextIO

#: the environment variable MLflow reads for its loggers' level (mlflow.utils.logging_utils)
MLFLOW_LEVEL_ENV = "MLFLOW_LOGGING_LEVEL"
#: the logger and the start of the one Ray notice hidden by default
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
RAY_AUTH_ENABLED = "Token authentication is enabled for this Ray cluster"
#: Python warning filters for the MLflow server's process (PYTHONWARNINGS syntax)
SERVER_WARNINGS = "ignore:starlette.middleware.wsgi is deprecated"
#: the start of the lines the MLflow server prints (not logs) that are hidden: its note that it accepts local
#: requests only, which is what `mutransfer ui` on 127.0.0.1 asks of it (the note for other hosts stays)
SERVER_NOTICES = ("[MLflow] Security middleware enabled with default settings (localhost-only)",)


class _DropNotice(logging.Filter):
    """Drops the log records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefix)


#: MLflow's SQL store logs every database error (OperationalError) with its traceback before raising it: hidden, the
#: caller says it in one line (a full disk: mutransfer.cli.main; a locked or unreachable store: the sweep's retries
#: and messages). Its warnings (an engine's retries) still show.
MLFLOW_DB_LOGGER = "mlflow.store.db.utils"
MLFLOW_DB_ERROR = "SQLAlchemy database error"


def quiet_third_party(verbose: bool) -> None:
    """Hide the notices above in this process (and in the processes it starts, through the environment), unless
    ``verbose``."""
    auth = logging.getLogger(RAY_AUTH_LOGGER)
    if verbose:  # everything shown, whatever an earlier command in this process hid
        os.environ[MLFLOW_LEVEL_ENV] = "INFO"
        logging.getLogger("mlflow").setLevel(logging.INFO)
        for logger in (auth, logging.getLogger(MLFLOW_DB_LOGGER)):
            for f in [f for f in logger.filters if isinstance(f, _DropNotice)]:
                logger.removeFilter(f)
        return
    os.environ.setdefault(MLFLOW_LEVEL_ENV, "WARNING")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    for logger, notice in ((auth, RAY_AUTH_ENABLED), (logging.getLogger(MLFLOW_DB_LOGGER), MLFLOW_DB_ERROR)):
        if not any(isinstance(f, _DropNotice) for f in logger.filters):
            logger.addFilter(_DropNotice(notice))


def server_environment(verbose: bool) -> dict[str, str]:
    """The environment of the MLflow server `mutransfer ui` starts: its INFO lines and Starlette's deprecation
    warning hidden unless ``verbose``."""
    env = dict(os.environ)
    if not verbose:
        env[MLFLOW_LEVEL_ENV] = "WARNING"
        env["PYTHONWARNINGS"] = ",".join(filter(None, [env.get("PYTHONWARNINGS"), SERVER_WARNINGS]))
    return env


def relay_server_output(lines: Iterable[str], out: TextIO, verbose: bool) -> None:
    """Copy the MLflow server's printed lines to ``out`` as they come, those of :data:`SERVER_NOTICES` left out
    unless ``verbose`` (run in a thread beside the server; returns when the server closes its output)."""
    for line in lines:
        if verbose or not line.startswith(SERVER_NOTICES):
            out.write(line)
            out.flush()


def server_options(verbose: bool) -> list[str]:
    """Extra `mlflow ui` options: uvicorn's log level (its INFO start-up lines) unless ``verbose``."""
    return [] if verbose else ["--uvicorn-opts", "--log-level warning"]
