"""`mutransfer dashboard STUDY`: optuna-dashboard on a study's journal, on 127.0.0.1; refusals in one line, exit 2."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

import mutransfer as mt
from mutransfer.cli.main import main
from tests.net_helpers import exposed, listeners, process_tree
from tests.sweep_helpers import write_tiny_data, write_tiny_study


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A tiny study searched in process (4 trials): its runs folder."""
    folder = tmp_path_factory.mktemp("dash")
    path = write_tiny_study(folder, write_tiny_data(folder / "tiny.h5"), name="dash", trials=4, epochs=2, grace=1)
    spec = mt.StudySpec.from_yaml(path)
    runs = folder / "runs"
    with mt.create_study(spec, storage=runs, executor="inprocess", tracking_uri=f"sqlite:///{folder / 'm.db'}") as s:
        s.optimize()
    return runs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_dashboard_serves_the_study_trials_on_loopback(searched):
    port = _free_port()
    cmd = [sys.executable, "-m", "mutransfer.cli.main", "dashboard", "dash", "--runs-dir", str(searched)]
    proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"optuna-dashboard: http://127.0.0.1:{port}/dashboard/"), (line, proc.stderr.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=10) as reply:
            studies = json.load(reply)["study_summaries"]
        assert [s["study_name"] for s in studies] == ["dash"]
        study_id = studies[0]["study_id"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{study_id}", timeout=10) as reply:
            trials = json.load(reply)["trials"]
        assert len(trials) == 4 and all(t["params"] for t in trials)
        pids = process_tree(proc.pid)
        assert listeners(pids) and not exposed(pids)  # it listens, on loopback only
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_a_taken_port_a_missing_study_or_journal_is_one_line_exit_2(searched, tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dashboard", "dash", "--runs-dir", str(searched), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--port {port}" in err and "already in use" in err and len(err.splitlines()) == 1

    assert main(["dashboard", "nosuch", "--runs-dir", str(searched)]) == 2
    assert "nosuch" in capsys.readouterr().err

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "state.json").write_text("{}")  # a study folder written before the journal
    assert main(["dashboard", "old", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no optuna.journal" in err and "--resume" in err and len(err.splitlines()) == 1
