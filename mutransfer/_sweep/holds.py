"""A fault-testing hook: hold the driver at a named point so that a test can kill it there.

With ``MUTRANSFER_HOLD_AT=<point>`` in the driver's environment, the driver writes
``<study dir>/held-at-<point>`` (its pid) when it reaches that point and then waits
until it is killed. The points are the names of the phases in
``mutransfer._sweep.runner.PHASES`` and of the search strategies' phases placed among them
(mutransfer._sweep.strategies; held before the phase starts, e.g. ``transfer_phase``, ``train_target``,
``verify_phase``, ``write_report``) and ``report_logged`` (inside
the report phase, after the report was written and logged to MLflow, before the study
is marked done), and ``topk_next_candidate`` (with ``--top-k``: before each target candidate after
the first, once the earlier ones finished). ``tests/sweep/test_sweep_resume.py`` kills the driver with SIGKILL at these
points and checks that ``--resume`` finishes the study without repeating work.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HOLD_ENV = "MUTRANSFER_HOLD_AT"


def hold_if_asked(study_dir: str | os.PathLike, point: str) -> None:
    """Wait forever at ``point`` if ``MUTRANSFER_HOLD_AT`` names it (see the module docstring); else return at once."""
    if os.environ.get(HOLD_ENV) != point:
        return
    (Path(study_dir) / f"held-at-{point}").write_text(str(os.getpid()))
    while True:
        time.sleep(1.0)
