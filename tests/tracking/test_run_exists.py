"""`Tracker.run_exists`: a run the store does not hold is False; a store that cannot be asked is an error, never
False (issue "Nothing lost", finding 4: taken for a missing run, a resumed target or nested search made a second run
beside the first, and the first stayed RUNNING)."""

from __future__ import annotations

import socket

import pytest
from mlflow.exceptions import MlflowException

from mutransfer._tracking.runs import Tracker


def test_a_held_run_is_true_and_an_unknown_one_false(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = tracker.client.create_run(tracker.ensure_experiment("e")).info.run_id
    assert tracker.run_exists(run)
    assert not tracker.run_exists("0123456789abcdef0123456789abcdef")
    tracker.client.delete_run(run)
    assert tracker.run_exists(run)  # deleted, still held: resuming it must not make another


def test_a_store_that_cannot_be_asked_is_raised_not_taken_for_a_missing_run(monkeypatch):
    with socket.socket() as s:  # a loopback port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with pytest.raises(MlflowException):
        Tracker(f"http://127.0.0.1:{port}").run_exists("0123456789abcdef0123456789abcdef")


def test_an_experiments_artifact_folder_is_its_name_or_a_safe_name_with_a_digest():
    """Plain names keep their folder (existing stores unchanged); a name with a path, '%', a space or dots alone gets
    only safe characters and a digest (MLflow URL-decodes the location: `../../x` quoted had escaped the store), and
    two such names stay apart."""
    from mutransfer._tracking.runs import artifact_folder

    assert artifact_folder("mutransfer") == "mutransfer" and artifact_folder("quick.v2") == "quick.v2"
    unsafe = ["../../escape", "..", "a%2Fb", "/Users/me/exp", "my exp", "a/b", "a_b-x"]
    folders = [artifact_folder(name) for name in unsafe]
    assert all("/" not in f and "%" not in f and f not in (".", "..") for f in folders), folders
    assert folders[-1] == "a_b-x" and len(set(folders[:-2])) == len(folders[:-2]), folders
    assert artifact_folder("a/b") != artifact_folder("a_b")
