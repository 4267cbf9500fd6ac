"""Run a benchmark under a chosen glibc allocator setting, and say which it ran under (for its JSON).

glibc reads its tuning variables once, at start-up, so a benchmark that wants them re-executes itself once with the
environment it asked for: ``product``, the variables every process the product starts gets
(mutransfer._allocator.TUNED_ENV: every allocation from the heap, never a fresh mmap, no trimming), or
``default``, glibc as it comes (those variables removed, whoever set them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from mutransfer._allocator import TUNED_ENV

CHOICES = ("product", "default")


def run_under(allocator: str, argv: Sequence[str], script: str) -> dict[str, object]:
    """Re-execute ``script`` (the benchmark's ``__file__``; ``argv``: its arguments) unless this process's environment
    already is ``allocator``'s; then return what to record: the mode and the allocator variables set."""
    env = dict(os.environ)
    wanted = {**env, **TUNED_ENV} if allocator == "product" else {k: v for k, v in env.items() if k not in TUNED_ENV}
    if wanted != env:
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, os.path.abspath(script), *argv], wanted)
    return {"mode": allocator, "variables": {k: env[k] for k in TUNED_ENV if k in env}}
