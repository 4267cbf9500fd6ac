"""Run a benchmark under a chosen glibc allocator setting, and say which it ran under (for its JSON).

glibc reads its tuning variables once, at start-up, so a benchmark that wants them re-executes itself once with the
environment it asked for: ``product``, the variables the product would give the processes it starts from this
environment (mutransfer._allocator.wanted_env: TUNED_ENV, every allocation from the heap, never a fresh mmap, no
trimming; nothing where the user set their own values, preloads another allocator or opted out), or ``default``,
glibc as it comes (those variables removed, whoever set them). It re-executes at most once (a marker in the
environment), and records what it ran under.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from mutransfer._allocator import TUNED_ENV, wanted_env

CHOICES = ("product", "default")

#: set in the re-executed benchmark's environment: it never re-executes twice
_REEXECUTED = "MUTRANSFER_BENCHMARK_REEXECUTED"


def run_under(allocator: str, argv: Sequence[str], script: str) -> dict[str, object]:
    """Re-execute ``script`` (the benchmark's ``__file__``; ``argv``: its arguments) unless this process's environment
    already is ``allocator``'s, once at most; then return what to record: the mode and the allocator variables set."""
    env = {k: v for k, v in os.environ.items() if k != _REEXECUTED}
    wanted = (
        {**env, **wanted_env(env)} if allocator == "product" else {k: v for k, v in env.items() if k not in TUNED_ENV}
    )
    if wanted != env and _REEXECUTED not in os.environ:
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, os.path.abspath(script), *argv], {**wanted, _REEXECUTED: "1"})
    os.environ.pop(_REEXECUTED, None)  # its children (workers, subprocesses) decide again for themselves
    return {
        "mode": allocator,
        "matched": wanted == env,
        "variables": {k: os.environ[k] for k in TUNED_ENV if k in os.environ},
    }
