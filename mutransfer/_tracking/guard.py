"""A server that dies with the command that started it, however that command ends (``kill -9`` included).

``python -m mutransfer._tracking.guard PARENT_PID -- CMD...`` runs CMD in a process group of its own and waits
for it. When PARENT_PID is gone (the guard is re-parented: the command that started it was killed, even by
SIGKILL, where it runs no code) or the guard itself is asked to stop (SIGTERM, SIGINT), the guard stops CMD's
whole group (SIGTERM, then SIGKILL after :data:`GRACE_SECONDS`), so no server is left serving its port. It exits
with CMD's exit code. ``mutransfer ui`` starts its MLflow server through it (mutransfer.cli._ui_cmd).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: seconds between looks at the parent, and the server's grace to stop after SIGTERM
POLL_SECONDS = 0.5
GRACE_SECONDS = 10.0


def guarded(command: list[str]) -> list[str]:
    """``command`` wrapped in the guard, tied to this process (an argument list: no shell)."""
    return [sys.executable, "-m", "mutransfer._tracking.guard", str(os.getpid()), "--", *command]


def _stop_group(proc: subprocess.Popen) -> int:
    for sig, wait in ((signal.SIGTERM, GRACE_SECONDS), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def run(parent: int, command: list[str]) -> int:
    proc = subprocess.Popen(command, start_new_session=True)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    while proc.poll() is None:
        if stopping or os.getppid() != parent:
            return _stop_group(proc)
        time.sleep(POLL_SECONDS)
    return proc.returncode


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: python -m mutransfer._tracking.guard PARENT_PID -- CMD...")
    sys.exit(run(int(sys.argv[1]), sys.argv[3:]))
