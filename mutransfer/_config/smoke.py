"""Smoke runs: ``MUTRANSFER_SMOKE=1`` runs every command at the smallest size that still exercises it.

For checking an installation end to end in seconds, and for the test that runs the README's commands in the
order written (tests/test_readme.py). A smoke run says so on stderr; its numbers are not results:

- ``sweep``: at most :data:`TRIALS` proxy trials of :data:`EPOCHS` epoch, a target of :data:`EPOCHS` epoch
  (reported as overrides, so a resumed or repeated smoke run is the same study);
- ``train``: :data:`EPOCHS` epoch (or :data:`EPOCHS` iterations);
- ``data generate``: at most :data:`SAMPLES` samples.
"""

from __future__ import annotations

import os
import sys

SMOKE_ENV = "MUTRANSFER_SMOKE"
EPOCHS = 1
TRIALS = 2
SAMPLES = 24


def smoke() -> bool:
    """Whether this is a smoke run (``MUTRANSFER_SMOKE`` set to anything but "", "0" or "false")."""
    return os.environ.get(SMOKE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def say(command: str, what: str) -> None:
    print(f"{SMOKE_ENV}: a smoke run of `mutransfer {command}` ({what}); its numbers are not results", file=sys.stderr)


def capped(value: int | None, cap: int) -> int:
    """``value`` capped at ``cap`` (``cap`` when None)."""
    return cap if value is None else min(int(value), cap)
