"""Writes to the tracking store on a thread of their own, in order, so the caller never waits on the store.

A Tune callback runs on Tune's driver loop: while it waits on an MLflow server that is down (MLflow's client
retries with backoff for about four minutes), Tune hands out no results, so every trial stops at its next
report. :class:`Background` takes each write as a call, returns at once and runs the calls one after another
on one thread: while the server is away the calls queue up (the trials keep training) and go out, in the
order they were made, when it is back. :meth:`Background.drain` waits until the queue is empty; a call that
still fails after MLflow's retries is recorded in :attr:`Background.failures` (one line each) and the next
one runs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable


def _stop() -> None:
    """The marker that ends the thread (:meth:`Background.close`)."""


class Background:
    """One daemon thread that runs submitted calls in order (a killed driver loses what was queued: the
    study's files hold it, and ``--resume`` logs it)."""

    def __init__(self, name: str):
        self._jobs: queue.Queue[tuple[Callable[..., object], tuple]] = queue.Queue()
        #: one line per call that raised: its name and the error's first line
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., object], *args: object) -> None:
        """Queue ``fn(*args)``; returns at once."""
        self._jobs.put((fn, args))

    def pending(self) -> int:
        """Calls queued or running."""
        return self._jobs.unfinished_tasks

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every call submitted so far has run; False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._jobs.all_tasks_done:
            while self._jobs.unfinished_tasks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._jobs.all_tasks_done.wait(left)
        return True

    def close(self, timeout: float | None = None) -> int:
        """Give the queue up to ``timeout`` seconds, drop what is still waiting and end the thread after the call
        it is in (an interrupted study: its files hold what was dropped); returns how many calls were dropped."""
        self.drain(timeout)
        dropped = 0
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
            self._jobs.task_done()
            dropped += 1
        self._jobs.put((_stop, ()))
        return dropped

    def _work(self) -> None:
        while True:
            fn, args = self._jobs.get()
            if fn is _stop:
                self._jobs.task_done()
                return
            try:
                fn(*args)
            except Exception as exc:  # after MLflow's own retries: say it, keep the order of the rest
                text = " ".join(str(exc).split())[:200] or type(exc).__name__
                self.failures.append(f"{getattr(fn, '__name__', fn)}: {text}")
            finally:
                self._jobs.task_done()
