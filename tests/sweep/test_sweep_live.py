"""Watching a study while it runs: MLflow shows RUNNING runs with per-epoch metrics, a terminal shows live bars (slow).

A real `mutransfer sweep` in a subprocess (real local Ray, real MLflow sqlite store), its stderr on a
pseudo-terminal; the test reads the store while the sweep runs. No timing assertions: it polls until the
sweep ends and checks what it saw.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from tests.sweep_helpers import write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow

# A proxy trial must outlast the logger's 1-second live interval on a fast machine (60 epochs took under a second
# on an idle 2-core machine, and the run was then only ever seen with its first epoch): 400 epochs, about 5 s.
# The target too: its 40 epochs once ended within one interval (2026-11-29, seen with 0 and then all 40): 200; in a
# full suite on 2 busy cores its 200 were once never seen RUNNING (2026-11-30: the watcher's looks fall on the
# store's write locks and are skipped): 600, so that many looks fall inside the target's run.
EPOCHS, TARGET_EPOCHS = 400, 600


def _read_all(fd: int, chunks: list[bytes]) -> None:
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the other side closed
            return
        if not data:
            return
        chunks.append(data)


class StoreWatcher:
    """Reads the sweep's MLflow store from outside: the epoch counts seen on RUNNING runs, per run kind."""

    def __init__(self, uri: str):
        self.uri = uri
        self.client = None
        self.running_steps: dict[str, set[int]] = {}

    def look(self) -> None:
        from mlflow.tracking import MlflowClient

        from mutransfer._tracking._sqlite_file import sqlite_path
        from mutransfer._tracking.runs import _has_tables

        # A client opened on a store still being made runs MLflow's migrations too, racing the sweep's
        # ("table ... already exists" in the sweep): read it only once the sweep has made its tables.
        if self.client is None and not _has_tables(sqlite_path(self.uri)):
            return
        try:
            self.client = self.client or MlflowClient(self.uri)
            ids = [e.experiment_id for e in self.client.search_experiments()]
            for run in self.client.search_runs(ids, filter_string="attributes.status = 'RUNNING'") if ids else []:
                kind = run.data.tags.get("mutransfer.kind")
                metric = "val_error" if kind == "proxy_trial" else "test_error"  # a proxy never sees the test split
                steps = len(self.client.get_metric_history(run.info.run_id, metric))
                self.running_steps.setdefault(kind, set()).add(steps)
        except Exception:  # the store is being created, or briefly locked by the sweep's writes
            return


def test_a_study_is_visible_in_mlflow_and_on_the_terminal_while_it_runs(tmp_path):
    from mlflow.tracking import MlflowClient

    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(
        tmp_path,
        data,
        name="live",
        trials=2,
        epochs=EPOCHS,
        grace=EPOCHS,
        target_epochs=TARGET_EPOCHS,
        max_concurrent=1,
    )
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", MUTRANSFER_CACHE=str(tmp_path / "cache"))
    env.pop("TQDM_DISABLE", None)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))  # a 200-column terminal
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(master, chunks), daemon=True)
    watcher = StoreWatcher(uri)
    with open(tmp_path / "report.txt", "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        reader.start()
        try:
            deadline = time.time() + 900
            while proc.poll() is None and time.time() < deadline:
                watcher.look()
                time.sleep(0.5)  # the logger writes at most once a second: two looks per write (each look costs CPU)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
            proc.wait(timeout=60)
    reader.join(timeout=10)
    os.close(master)
    terminal = b"".join(chunks).decode(errors="replace")
    (tmp_path / "terminal.txt").write_text(terminal)  # for a look when the test fails
    assert proc.returncode == 0, terminal[-3000:]

    # While the sweep ran, a proxy trial's run and the target's run were RUNNING with more than one epoch logged
    # and fewer than all (logged as they trained, not in one batch at the end).
    seen = watcher.running_steps
    assert any(1 < n < EPOCHS for n in seen.get("proxy_trial", ())), seen
    assert any(1 < n < TARGET_EPOCHS for n in seen.get("target", ())), seen

    # At the end: one finished child run per trial, each with every epoch once (step = epoch), and the target's.
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    trials = [r for r in runs if r.data.tags.get("mutransfer.kind") == "proxy_trial"]
    assert len(trials) == 2 and len({r.data.tags["mutransfer.trial_id"] for r in trials}) == 2
    target = next(r for r in runs if r.data.tags.get("mutransfer.kind") == "target")
    for run, epochs in [(t, EPOCHS) for t in trials] + [(target, TARGET_EPOCHS)]:
        assert run.info.status == "FINISHED" and run.data.tags["mutransfer.status"] == "completed"
        metric = "val_error" if run in trials else "test_error"
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, metric))
        assert steps == list(range(1, epochs + 1))
    for t in trials:
        assert int(t.data.metrics["epochs"]) == EPOCHS and "spectral_lr" in t.data.params

    # The terminal showed bars redrawn in place: the search's counts and best, then the target's epochs.
    assert "\r" in terminal
    assert "proxies:" in terminal and "1 done, 1 running, 0 pending | best " in terminal
    assert "2 done, 0 running, 0 pending" in terminal and "[trial 2/2] completed" in terminal
    assert f"/{TARGET_EPOCHS} epochs" in terminal and "test error" in terminal
