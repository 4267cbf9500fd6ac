"""Who drives a study: the holder record shared by the study's file lock and its MLflow lease.

A :class:`Holder` names one driver process: host name, pid, when it took the study
(``since``, unix seconds), a random ``token`` that tells two holders apart, the
process's start time on its host (``started``: Linux ``/proc/<pid>/stat`` field 22 in
clock ticks since boot, None elsewhere) so a recycled pid is not mistaken for the
driver, and its pid namespace (``pidns``). It is stored as one JSON object.

Whether a holder is gone (:meth:`Holder.is_gone`):

- on **this host** (same host name and pid namespace): its process no longer exists (or the pid now belongs to a process
  that started at another time). Exact, no waiting.
- on **another host**: its lease's heartbeat is older than ``stale_after`` seconds (the
  driver refreshes it every :data:`HEARTBEAT_SECONDS`). A driver
  whose machine is cut off from the tracking store for longer than that is taken for
  dead; the heartbeat thread then reports that the lease was lost.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass

from mutransfer.errors import UserInputError

#: seconds between two heartbeats of a holding driver's MLflow lease
HEARTBEAT_SECONDS = 30.0
#: a holder on another host whose heartbeat is older than this (10 missed beats) is dead
STALE_SECONDS = 300.0


def process_start(pid: int) -> str | None:
    """The start time of ``pid`` on this host (clock ticks since boot, Linux), None if unknown or not running."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def pid_namespace() -> str | None:
    """This process's pid namespace (Linux): containers that share a host name may not share pids."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def process_alive(pid: int, started: str | None) -> bool:
    """True if ``pid`` runs on this host and (when ``started`` is known) is the same process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    now = process_start(pid)
    return started is None or now is None or now == started


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    since: float
    token: str
    started: str | None = None
    pidns: str | None = None

    @classmethod
    def me(cls) -> Holder:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, time.time(), uuid.uuid4().hex, process_start(pid), pid_namespace())

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Holder | None:
        """The holder in ``text``, or None for a missing or unreadable record."""
        try:
            d = json.loads(text or "")
            return cls(
                str(d["host"]), int(d["pid"]), float(d["since"]), str(d["token"]), d.get("started"), d.get("pidns")
            )
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"host {self.host}, pid {self.pid}, since {since}"

    def is_gone(self, heartbeat: float | None, *, stale_after: float, now: float | None = None) -> bool:
        """Dead: on this host its process is gone; elsewhere its heartbeat is older than ``stale_after`` s.

        "This host" is the same host name and the same pid namespace (a container started with the host's
        network shares its name, not its pids): only then can its pid be looked up here.
        """
        if self.host == socket.gethostname() and self.pidns is not None and self.pidns == pid_namespace():
            return not process_alive(self.pid, self.started)
        now = time.time() if now is None else now
        return heartbeat is None or now - heartbeat > stale_after


class StudyLocked(UserInputError):
    """Another live driver holds the study (exit 2, one line, nothing changed)."""

    def __init__(self, study: str, holder: Holder | None, where: str):
        who = holder.describe() if holder is not None else "holder not recorded yet"
        super().__init__(
            f"study {study!r} is being run by another driver ({who}; {where}); wait for it to finish, or stop it and "
            f"pass --resume (a dead driver is taken over at once on its machine, from elsewhere once its lease is "
            f"{STALE_SECONDS / 60:g} minutes silent)"
        )
        self.holder = holder
