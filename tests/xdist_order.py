"""The order in which two pytest-xdist workers take the test files (``-n 2 --dist loadfile``, the README's command).

xdist's own file scheduler hands out the files with the most tests first and gives a worker its next file while
up to two of its tests are still pending. Both hurt a suite whose longest files hold one to six tests: they went
out last, and a worker could queue three long files while the other one ran out of work. Here the files go out in
the collection's order (tests/conftest.py puts the longest first, ``tests/slow_files.json``), and a worker takes
its next file only when one test of its current file is left: a worker runs a test only once it knows the next
one, so it cannot wait for an empty queue.
"""

from __future__ import annotations

import pytest


def longest_first(config: pytest.Config, log: object) -> object | None:
    """The scheduler for ``--dist loadfile``; None (xdist's own) for any other mode or an xdist without it."""
    if config.getvalue("dist") != "loadfile":
        return None
    try:
        from xdist.scheduler import LoadFileScheduling
    except ImportError:
        return None

    class OneFileAhead(LoadFileScheduling):
        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    config.option.loadscopereorder = False  # the collection's order, not the most tests first
    return OneFileAhead(config, log)
