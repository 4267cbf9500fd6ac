"""A study folder is data, not configuration: on --resume, state.json cannot choose where the study logs.

The store comes from the command (--tracking-uri, the --study file's tracking.uri, or ./mlflow.db); the folder's
record may only confirm it. Each case plants a state.json as a hostile or careless folder would and resumes
through the real CLI: refused in one line, exit 2, before any connection or file is made.
"""

from __future__ import annotations

import http.server
import threading

import pytest

from mutransfer._study_folder.portable import stored_tracking
from mutransfer.cli.main import main
from mutransfer.errors import UserInputError
from tests.sweep_helpers import K_ONLY_STUDY


def _study_folder(tmp_path, state: dict):
    from mutransfer._study import load_study
    from mutransfer._study_folder.state import StudyDir

    study, _ = load_study(K_ONLY_STUDY)
    sdir = StudyDir(tmp_path / "mutransfer-runs" / "quick")
    sdir.root.mkdir(parents=True)
    sdir.study_file.write_text(study.to_yaml())
    sdir.write_state({"phase": "proxies", **state})
    return sdir


class _Capture(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []

    def do_GET(self):  # noqa: N802 -- http.server's name
        self.seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(404)
        self.end_headers()

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.fixture
def capture_server():
    _Capture.seen = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Capture)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Capture.seen
    server.shutdown()


def _refused(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_folder_naming_a_server_gets_neither_the_runs_nor_the_credentials(
    tmp_path, monkeypatch, capsys, capture_server
):
    url, seen = capture_server
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "secret")
    _study_folder(tmp_path, {"tracking_uri": url})
    assert main(["sweep", "--resume"]) == 2
    err = _refused(capsys)
    assert f"--resume: study 'quick' logs to {url}, but this command names sqlite:///{tmp_path / 'mlflow.db'}" in err
    assert f"pass --tracking-uri {url} to continue it there" in err
    assert seen == []  # not one request: no runs, no Basic auth header
    # naming it in the command is the user's choice (then it is checked as the flag is)
    assert main(["sweep", "--resume", "--tracking-uri", "sqlite:///other.db"]) == 2
    assert "this command names sqlite:///" in _refused(capsys) and seen == []


def test_a_folder_naming_a_file_outside_creates_nothing_there(tmp_path, monkeypatch, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "passwd"
    secret.write_text("root:x:0:0\n")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    sdir = _study_folder(home, {})
    for target in (secret, outside / "new" / "store.db", outside / "fresh.db"):
        sdir.write_state({"phase": "proxies", **stored_tracking(f"sqlite:///{target}", sdir.root)})
        assert main(["sweep", "--resume"]) == 2
        assert f"logs to sqlite:///{target}" in _refused(capsys)
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]  # no passwd.lock, no new store, no folder
    assert secret.read_text() == "root:x:0:0\n"
    assert not (home / "mlflow.db").exists()


def test_a_moved_folder_still_finds_the_store_beside_its_runs(tmp_path, monkeypatch):
    """The one case a folder's record is followed with no flag: an existing SQLite store inside the folder that holds
    the runs directory (mlflow.db beside mutransfer-runs/), whatever the working directory."""
    from mutransfer._study import load_study
    from mutransfer._study_folder.state import StudyDir
    from mutransfer._sweep.context import SweepOptions
    from mutransfer._sweep.prepare import _resumed_tracking
    from mutransfer._tracking.runs import Tracker

    beside = tmp_path / "mlflow.db"
    Tracker(f"sqlite:///{beside}").ensure_experiment("mutransfer")  # a real store
    sdir = StudyDir(tmp_path / "mutransfer-runs" / "quick")
    state = stored_tracking(f"sqlite:///{beside}", sdir.root)
    monkeypatch.chdir(tmp_path / "..")
    study, _ = load_study(K_ONLY_STUDY)
    assert _resumed_tracking(SweepOptions(resume=True), study, state, sdir) == f"sqlite:///{beside}"
    # named otherwise in the command, the folder's store is refused like any other
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    with pytest.raises(UserInputError, match=f"but this command names {elsewhere}"):
        _resumed_tracking(SweepOptions(resume=True, overrides={"tracking_uri": elsewhere}), study, state, sdir)
