"""One driver per study: a file lock on this machine plus a lease in the MLflow store, held for the driver's life.

:class:`StudyLock` is taken at the end of :func:`mutransfer._sweep.prepare.prepare`
(after every input and endpoint check) and released when the study's steps end
(mutransfer._sweep.runner.sweep_steps: returned, raised, interrupted by Ctrl-C, or a Python API study closed):
``with take_lock(study) as lock: ...``.

- **file lock** ``<runs dir>/.locks/<study>.lock`` (:mod:`filelock`, an ``flock``: the
  kernel frees it when the holder dies, even by SIGKILL), with the holder written
  beside it in ``<study>.holder.json``. A holder record found under a free lock was
  left by a driver that died: it is taken over, with a line saying so.
- **MLflow lease** (:class:`mutransfer._study_folder.lease.MlflowLease`): drivers on other
  machines that log to the same tracking store see it; a heartbeat thread refreshes it.

A driver that finds either held by a live driver raises
:class:`~mutransfer._study_folder.holder.StudyLocked` (exit 2, one line naming host, pid and
since when) and changes nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

from mutransfer._study_folder.holder import Holder, StudyLocked
from mutransfer._study_folder.lease import HEARTBEAT_SECONDS, STALE_SECONDS, MlflowLease
from mutransfer._study_folder.state import StudyDir, write_atomic


def lock_paths(study_dir: StudyDir) -> tuple[Path, Path]:
    """(lock file, holder record) of a study: beside the study directory, so a failed start leaves no study folder."""
    locks = study_dir.root.parent / ".locks"
    return locks / f"{study_dir.root.name}.lock", locks / f"{study_dir.root.name}.holder.json"


def refuse_if_locked(study_dir: StudyDir) -> None:
    """Raise StudyLocked if a live driver on this machine holds the study (a peek: takes nothing)."""
    lock_file, record = lock_paths(study_dir)
    if not lock_file.exists():
        return
    probe = FileLock(lock_file, thread_local=False)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        raise StudyLocked(study_dir.root.name, _read_holder(record), f"lock {lock_file}") from None
    probe.release()


class StudyLock:
    """The study's lock, held from :meth:`acquire` until the ``with`` block around the driver ends."""

    def __init__(
        self,
        study_dir: StudyDir,
        tracking_uri: str,
        *,
        say: Callable[[str], None],
        stale_after: float = STALE_SECONDS,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
    ):
        self.study = study_dir.root.name
        self.lock_file, self.record = lock_paths(study_dir)
        self.holder = Holder.me()
        self._file = FileLock(self.lock_file, thread_local=False)
        self._lease = MlflowLease(tracking_uri, self.study, self.holder, stale_after=stale_after)
        self._say, self._every = say, heartbeat_seconds
        self._stop = threading.Event()
        self._beats: threading.Thread | None = None

    def acquire(self) -> StudyLock:
        """Take the file lock, then the lease; on refusal nothing is changed (a folder or lock file made for the
        attempt is removed again). Says so when a dead holder is taken over."""
        made = [p for p in (*reversed(self.lock_file.parents), self.lock_file) if not p.exists()]
        self.lock_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._file.acquire(timeout=0)
        except Timeout:
            raise StudyLocked(self.study, _read_holder(self.record), f"lock {self.lock_file}") from None
        try:
            dead = {h.token: h for h in (_read_holder(self.record), self._lease.acquire()) if h is not None}
        except BaseException:
            self._file.release()
            for path in reversed(made):  # the lock file, then the folders this attempt made, innermost first
                with contextlib.suppress(OSError):
                    path.unlink() if path == self.lock_file else path.rmdir()
            raise
        for h in dead.values():
            self._say(f"study {self.study!r}: taking over from a driver that is gone ({h.describe()})")
        write_atomic(self.record, self.holder.to_json())
        self._beats = threading.Thread(target=self._heartbeat, name=f"lease {self.study}", daemon=True)
        self._beats.start()
        return self

    def release(self) -> None:
        """Stop the heartbeat, give the lease back, remove the holder record, free the file lock (idempotent)."""
        if not self._file.is_locked:
            return
        self._stop.set()
        if self._beats is not None:
            self._beats.join(timeout=10)
        with contextlib.suppress(Exception):  # an unreachable store: the lease goes stale on its own
            self._lease.release()
        if _read_holder(self.record) == self.holder:
            self.record.unlink(missing_ok=True)
        self._file.release()

    def __enter__(self) -> StudyLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _heartbeat(self) -> None:
        lost_said = False
        while not self._stop.wait(self._every):
            try:
                ours = self._lease.beat()
            except Exception:  # the store is unreachable for now: try again at the next beat
                continue
            if not ours and not lost_said:
                self._say(
                    f"warning: study {self.study!r}: the MLflow lease was taken over by another driver "
                    "(this one was silent too long); stop one of them"
                )
                lost_said = True


def _read_holder(path: Path) -> Holder | None:
    try:
        return Holder.from_json(path.read_text())
    except OSError:
        return None
