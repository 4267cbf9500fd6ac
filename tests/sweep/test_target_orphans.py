"""The target's workers stop with their driver (edge case 6 of "A team deployment").

Before, a Ray Train worker went on training and writing checkpoints and progress for seconds after its
driver's process group was SIGKILLed (Ray notices a dead driver late). Each worker now asks, at every epoch
and before it writes, whether the driver that started it (its pid, on this host) is still there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.sweep_helpers import driver_command, write_tiny_study


def test_driver_gone_tells_a_live_driver_from_a_dead_one_a_zombie_and_a_reused_pid():
    from mutransfer._sweep.target import driver_gone, driver_identity

    me = driver_identity()
    assert not driver_gone(me) and not driver_gone(None)
    assert not driver_gone(dict(me, host="another-host"))  # cannot see its pids: left to Ray
    assert not driver_gone(dict(me, where="another-namespace"))  # same hostname, another container
    assert driver_gone(dict(me, start="1"))  # the pid now belongs to another process

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    stat = open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()
    driver = dict(me, pid=child.pid, start=stat[19])
    assert not driver_gone(driver)
    child.stdin.close()
    deadline = time.monotonic() + 30
    while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert driver_gone(driver)  # exited, not reaped yet: a zombie
    child.wait()
    assert driver_gone(driver)  # reaped: no such process


@pytest.mark.slow
def test_a_killed_drivers_target_workers_write_nothing_more(tiny_data, tmp_path):
    """SIGKILL the driver's process group while the target trains: its progress file gets no further epoch
    (before: 2 more on this loaded 2-core machine, with their checkpoints)."""
    study = write_tiny_study(tmp_path, tiny_data, name="orphan", trials=2, epochs=2, target_epochs=2000)
    cmd, env = driver_command(study, tmp_path)
    progress = tmp_path / "mutransfer-runs" / "orphan" / "target" / "progress.jsonl"
    err = tmp_path / "driver.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 600
            while not (progress.exists() and len(progress.read_text().splitlines()) >= 5):
                assert proc.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
                time.sleep(0.05)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
    # counted from when the driver is gone, not from the signal: its exit takes some milliseconds, in which a
    # worker whose epoch takes about one still writes (4 epochs, once, on a fast machine, 2026-11-29)
    proc.wait(timeout=60)
    at_kill = len(progress.read_text().splitlines())
    time.sleep(8)  # Ray's own notice of the dead driver comes within seconds
    after = len(progress.read_text().splitlines()) - at_kill
    assert after == 0, f"{after} epochs written after the driver was gone"
