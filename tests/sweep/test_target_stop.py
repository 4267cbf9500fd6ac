"""Ctrl-C while the target trains: the driver asks the workers to stop and waits for Ray Train's ``fit()`` to return
before it goes on to shut Ray down (a ``fit()`` still running under ``ray.shutdown`` crashed a driver with SIGSEGV in
CI). No Ray here: the run's ``fit()`` is a stand-in that trains nothing and returns once the stop is asked for, as the
workers' loop does (mutransfer._sweep.target.target_loop). End to end, tests/sweep/test_sweep_resume.py interrupts
the default target of one CPU worker, a Ray actor (mutransfer._sweep._target_actor), not a Ray Train run."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from mutransfer._sweep.target import STOP_FILE, ask_to_stop, clear_stop
from mutransfer._sweep.target_run import TargetRun


class _Trainer:
    """``fit()`` returns a while after the stop file appears (a worker finishing its epoch)."""

    def __init__(self, folder: Path):
        self.folder, self.returned = folder, threading.Event()

    def fit(self) -> str:
        while not (self.folder / STOP_FILE).exists():
            time.sleep(0.01)
        time.sleep(0.3)
        self.returned.set()
        return "stopped"


def _interrupt_soon(delay: float) -> threading.Timer:
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_ctrl_c_asks_the_workers_to_stop_and_waits_for_the_run_to_end(tmp_path):
    trainer = _Trainer(tmp_path)
    run = TargetRun(lambda: trainer, None, None, False, tmp_path)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_soon(0.3)  # a real SIGINT: it lands wherever the main thread is in the wait loop
        with pytest.raises(KeyboardInterrupt):
            run.outcome()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (tmp_path / STOP_FILE).exists()
    # fit() had returned before outcome() re-raised: Ray may shut down now
    assert trainer.returned.is_set() and run.finished()


def test_a_run_whose_join_ctrl_c_interrupted_is_not_reported_finished(tmp_path):
    """CPython 3.11 marks a thread as ended when Ctrl-C interrupts a ``Thread.join()`` on it (shown first, so the case
    is real here); ``finished()`` does not rely on the thread's bookkeeping and stays False until fit() returns."""
    trainer = _Trainer(tmp_path)
    run = TargetRun(lambda: trainer, None, None, False, tmp_path)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_soon(0.2)
        with pytest.raises(KeyboardInterrupt):
            run._thread.join(5)  # what the wait was before
    finally:
        signal.signal(signal.SIGINT, previous)
    bookkeeping_says_ended = not run._thread.is_alive()
    assert not run.finished() and not trainer.returned.is_set()
    ask_to_stop(tmp_path)
    assert trainer.returned.wait(10) and _eventually(run.finished)
    if not bookkeeping_says_ended:
        pytest.skip("this Python keeps the interrupted thread alive: the case the test guards does not arise here")


def test_a_resumed_run_starts_without_the_earlier_stop(tmp_path):
    ask_to_stop(tmp_path / "target")
    assert (tmp_path / "target" / STOP_FILE).exists()
    clear_stop(tmp_path / "target")
    assert not (tmp_path / "target" / STOP_FILE).exists()
    clear_stop(tmp_path / "target")  # nothing to clear: no error


def _eventually(check, seconds: float = 5.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def _rank(rank: int, port: int, folders: list[str], out: str) -> None:
    import torch
    import torch.distributed as dist

    from mutransfer._sweep.target import _stop_asked

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        decided = _stop_asked(Path(folders[rank]) / STOP_FILE, 2, torch.device("cpu"))
        alone = _stop_asked(Path(folders[rank]) / STOP_FILE, 1, torch.device("cpu"))  # what one rank sees by itself
        Path(out, f"answer{rank}").write_text(f"{decided} {alone}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two processes with a gloo process group (a few seconds)
def test_with_two_workers_both_stop_when_one_sees_the_stop(tmp_path):
    """The stop is decided for all ranks at once: rank 0 sees the stop file, rank 1 (its own folder here, standing for
    a rank that looked a moment before the file appeared) does not; all-reduced, both stop at that epoch. Each rank
    alone (``world`` 1) disagrees: the check can fail."""
    import socket

    import torch.multiprocessing as mp

    views = [tmp_path / "view0", tmp_path / "view1"]
    for view in views:
        view.mkdir()
    ask_to_stop(views[0])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, [str(v) for v in views], str(tmp_path)), nprocs=2, join=True)
    answers = [(tmp_path / f"answer{rank}").read_text() for rank in (0, 1)]
    assert answers == ["True True", "True False"], answers  # decided together; alone, rank 1 would train on
