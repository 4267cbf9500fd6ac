"""The `mutransfer` command's entry point: start under the tuned allocator, then run the CLI.

glibc reads its allocator settings once, at process start (see :mod:`mutransfer._allocator`),
so when they are missing the command re-executes itself once with them, before torch
is imported. ``MUTRANSFER_TUNED_ALLOCATOR=0`` runs it as it is.

:func:`main` is the console script's entry point and re-executes ``sys.orig_argv``: from inside
another Python program call :func:`mutransfer.cli.main.main` with an argument list instead.
"""

from __future__ import annotations

import os
import sys

from mutransfer._allocator import SET_BY_US_ENV, allocator_env


def restart_tuned() -> None:
    """Re-execute this process's own command line under the tuned allocator where it is missing; else return.

    Once only: a process that is itself the re-execution (``SET_BY_US_ENV`` set) carries on as it
    is, even if the variables did not survive (a secure-exec interpreter drops ``MALLOC_*``), and
    so does one that cannot be re-executed.
    """
    added = allocator_env()
    if not added or SET_BY_US_ENV in os.environ:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, **added, SET_BY_US_ENV: ",".join(added)}
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)  # the same command line
    except OSError:
        return  # e.g. no sys.executable: run untuned


def main() -> int:
    """The `mutransfer` command: under the tuned allocator, the CLI on ``sys.argv``."""
    restart_tuned()
    from mutransfer.cli.main import main as cli_main  # noqa: PLC0415 -- deferred: torch loads after the re-exec

    return cli_main()
