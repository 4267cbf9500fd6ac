"""One driver per study: the file lock, the MLflow lease, the takeover of a dead holder (real flock, real sqlite MLflow)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from mutransfer._study_folder.holder import Holder
from mutransfer._study_folder.lease import HEARTBEAT_TAG, HOLDER_TAG, MlflowLease, lease_name
from mutransfer._study_folder.lock import StudyLock, lock_paths, refuse_if_locked
from mutransfer._study_folder.state import StudyDir
from mutransfer.errors import UserInputError


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory):
    """An MLflow sqlite store made once (creating its tables takes seconds); each test gets a copy."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def place(tmp_path, empty_store):
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    return StudyDir.for_study("s", tmp_path / "runs"), f"sqlite:///{tmp_path / 'mlflow.db'}"


def _lease_experiments(uri):
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    return [
        e
        for e in MlflowClient(uri).search_experiments(view_type=ViewType.ALL)
        if e.name.startswith("mutransfer-lease/")
    ]


def test_a_held_study_refuses_a_second_driver_and_is_free_after_release(place):
    study_dir, uri = place
    said = []
    first = StudyLock(study_dir, uri, say=said.append).acquire()
    with pytest.raises(UserInputError) as info:
        StudyLock(study_dir, uri, say=said.append).acquire()
    message = str(info.value)
    assert f"pid {os.getpid()}" in message and "since" in message and "\n" not in message
    record = lock_paths(study_dir)[1]
    assert Holder.from_json(record.read_text()) == first.holder  # the refused driver changed nothing
    assert [e.lifecycle_stage for e in _lease_experiments(uri)] == ["active"]
    first.release()
    assert not record.exists() and all(e.lifecycle_stage == "deleted" for e in _lease_experiments(uri))
    with StudyLock(study_dir, uri, say=said.append).acquire():
        pass
    assert said == []  # nothing was taken over: every holder released


def test_another_process_holding_the_study_refuses_then_is_taken_over_once_killed(place, tmp_path):
    """The peek of `sweep --name X` (X's folder exists) and a second lock fire while the holder lives;
    after its SIGKILL (the kernel frees the flock, its record and lease stay) the next lock takes over, with a line."""
    study_dir, uri = place
    holder = _hold_in_subprocess(study_dir, uri, tmp_path)
    try:
        with pytest.raises(UserInputError, match=f"pid {holder.pid}"):
            refuse_if_locked(study_dir)
        with pytest.raises(UserInputError, match=f"pid {holder.pid}"):
            StudyLock(study_dir, uri, say=print).acquire()
        dead = Holder.from_json(lock_paths(study_dir)[1].read_text())
        assert dead.pid == holder.pid
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    refuse_if_locked(study_dir)  # the flock is free now: no error
    said = []
    lock = StudyLock(study_dir, uri, say=said.append).acquire()
    try:  # one line for the dead holder (its file record and its lease are the same holder)
        assert len(said) == 1 and "taking over from a driver that is gone" in said[0] and f"pid {dead.pid}" in said[0]
        assert Holder.from_json(lock_paths(study_dir)[1].read_text()) == lock.holder
        active = [e for e in _lease_experiments(uri) if e.lifecycle_stage == "active"]
        assert len(active) == 1 and Holder.from_json(active[0].tags[HOLDER_TAG]) == lock.holder
    finally:
        lock.release()


def _hold_in_subprocess(study_dir, uri, tmp_path) -> subprocess.Popen:
    code = (
        "import sys, time; from mutransfer._study_folder.lock import StudyLock; from mutransfer._study_folder.state import StudyDir;"
        f"StudyLock(StudyDir({str(study_dir.root)!r}), {uri!r}, say=print).acquire();"
        "print('held', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _plant_lease(uri, study, holder, heartbeat):
    from mlflow.tracking import MlflowClient

    MlflowClient(uri).create_experiment(
        lease_name(study), tags={HOLDER_TAG: holder.to_json(), HEARTBEAT_TAG: repr(heartbeat)}
    )


def test_a_lease_from_another_host_is_dead_only_once_its_heartbeat_is_stale(place):
    """A driver on another machine: alive while it beats (refused), dead after stale_after (taken over)."""
    _, uri = place
    elsewhere = Holder("other-machine", 4242, time.time() - 3600, "t0ken")
    _plant_lease(uri, "s", elsewhere, time.time() - 10)
    with pytest.raises(UserInputError, match="host other-machine, pid 4242"):
        MlflowLease(uri, "s", Holder.me(), stale_after=60).acquire()
    from mlflow.tracking import MlflowClient

    exp = MlflowClient(uri).get_experiment_by_name(lease_name("s"))
    MlflowClient(uri).set_experiment_tag(exp.experiment_id, HEARTBEAT_TAG, repr(time.time() - 120))
    me = Holder.me()
    lease = MlflowLease(uri, "s", me, stale_after=60)
    assert lease.acquire() == elsewhere
    assert Holder.from_json(MlflowClient(uri).get_experiment_by_name(lease_name("s")).tags[HOLDER_TAG]) == me
    lease.release()


def test_the_heartbeat_advances_and_a_lost_lease_is_reported(place):
    from mlflow.tracking import MlflowClient

    study_dir, uri = place
    said = []
    lock = StudyLock(study_dir, uri, say=said.append, heartbeat_seconds=0.2).acquire()
    try:
        client = MlflowClient(uri)
        exp_id = client.get_experiment_by_name(lease_name("s")).experiment_id
        first = float(client.get_experiment(exp_id).tags[HEARTBEAT_TAG])
        deadline = time.time() + 30
        while float(client.get_experiment(exp_id).tags[HEARTBEAT_TAG]) == first and time.time() < deadline:
            time.sleep(0.1)
        assert float(client.get_experiment(exp_id).tags[HEARTBEAT_TAG]) > first
        assert said == []
        # another driver took the lease (as one would after 5 minutes without a heartbeat)
        client.set_experiment_tag(exp_id, HOLDER_TAG, Holder("other-machine", 1, time.time(), "x").to_json())
        while not said and time.time() < deadline:
            time.sleep(0.1)
        assert len(said) == 1 and "lease was taken over" in said[0]
    finally:
        lock.release()
    # the lease that is no longer ours is left to its new holder
    assert json.loads(client.get_experiment(exp_id).tags[HOLDER_TAG])["host"] == "other-machine"


def test_holder_liveness_on_this_host():
    me = Holder.me()
    assert not me.is_gone(None, stale_after=1)  # this process runs, whatever the heartbeat says
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    gone = Holder(me.host, proc.pid, time.time(), "t", pidns=me.pidns)
    assert gone.is_gone(time.time(), stale_after=1e9)  # its process has exited, however fresh the heartbeat
    recycled = Holder(me.host, os.getpid(), time.time(), "t", started="1", pidns=me.pidns)  # our pid, another start
    assert recycled.is_gone(time.time(), stale_after=1e9)
    # same host name, other pid namespace (a container on the host's network): judged by its heartbeat only
    other_ns = Holder(me.host, proc.pid, time.time(), "t", pidns="pid:[1]")
    assert not other_ns.is_gone(time.time(), stale_after=60) and other_ns.is_gone(time.time() - 120, stale_after=60)
    assert Holder.from_json("not json") is None and Holder.from_json(me.to_json()) == me


def test_a_driver_refused_by_the_lease_leaves_nothing_behind(place, tmp_path):
    """Edge case 6 of "A team deployment": a second folder of the same study on the same store takes its own file
    lock but not the store's lease; before, it left its new folder with an empty lock file in it."""
    study_dir, uri = place
    with StudyLock(study_dir, uri, say=lambda _: None).acquire():
        other = StudyDir.for_study("s", tmp_path / "elsewhere" / "runs")
        with pytest.raises(UserInputError, match="s"):
            StudyLock(other, uri, say=lambda _: None).acquire()
        assert not (tmp_path / "elsewhere").exists()
