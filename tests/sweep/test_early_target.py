"""The target's run started while the last proxies train (mutransfer._sweep.early_target): one CPU worker's Ray
actor, or Ray Train's run for several workers.

Started without an order, its workers wait; ordered, they train exactly what a target started with its order
trains; called off, they train nothing and leave the folder to a later target. It starts only once the search has
handed out every trial, only where the target and one trial fit in the cluster together (no deadlock with a retried
trial), and only where the core target phase follows the proxies.
"""

from __future__ import annotations

import math
import pickle
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mutransfer._study import load_study
from mutransfer._study.models import merge_hyperparameters
from mutransfer._sweep.early_target import fits_beside_a_trial
from mutransfer._sweep.plan import DONE, SearchPlan
from mutransfer._sweep.runner import PHASES, target_follows_proxies
from mutransfer._sweep.train_target import train_target
from tests.sweep_helpers import write_tiny_study

#: seconds a test waits between starting a target early and ordering it
HELD_S = 2.0


def _study(tmp_path, tiny_data, **target):
    path = write_tiny_study(
        tmp_path, tiny_data, target_epochs=2, target={"num_workers": 1, "cpus_per_worker": 1, **target}
    )
    return load_study(path)[0]


def _data(tiny_data):
    from mutransfer.data._loading import load_split

    return load_split(tiny_data, n_train=32, n_test=16, resolution=64)


@pytest.mark.slow  # starts Ray
def test_a_target_called_off_then_one_started_early_in_its_folder_trains_what_one_started_with_its_order_trains(
    ray_local, tiny_data, tmp_path
):
    """Called off, a run started early trains nothing and leaves its folder; a run started early there afterwards,
    ordered after a wait, trains bit for bit what a run started with its order trains (one test: each run costs a
    process's start-up and imports: docs/architecture.md, "The suite's time")."""
    from mutransfer._sweep.target import CANCELLED
    from mutransfer._sweep.target_run import run_target, start_target

    study, data = _study(tmp_path, tiny_data), _data(tiny_data)
    folder = tmp_path / "early"
    off = start_target(study, data, folder, use_gpu=False, max_failures=0, order=None)
    off.cancel(timeout=120)
    called_off = off.outcome()
    assert called_off.status == CANCELLED and called_off.epochs == 0 and called_off.checkpoint_dir is None
    with pytest.raises(RuntimeError, match="already has its order"):
        off.order({"lr": 1e-3})

    hp = merge_hyperparameters(study, {"lr": 3e-3, "batch_size": 8})
    early = start_target(study, data, folder, use_gpu=False, max_failures=0, order=None)
    time.sleep(HELD_S)  # the run holds its CPU from its start, the order comes later
    early.order(hp)
    waited = early.outcome()
    late = run_target(study, hp, data, tmp_path / "late", use_gpu=False, max_failures=0)
    assert waited.status == late.status == "completed" and math.isfinite(waited.test_error)
    assert waited.epochs == 2 and waited.resumed_from_epoch is None  # the called-off run left nothing to resume
    assert waited.test_error == late.test_error  # bit for bit: the same training
    assert [e.val_error for e in waited.history] == [e.val_error for e in late.history]
    # trained at the order's hyperparameters (the final model records them)
    saved = torch.load(f"{waited.checkpoint_dir}/model.pt", weights_only=True)
    assert saved["hyperparameters"] == hp
    # the clocks: the wall counts from the order, the devices (1 CPU) from the run's start
    assert waited.head_start_seconds >= HELD_S and late.head_start_seconds == 0
    assert waited.device_seconds - waited.wall_seconds >= HELD_S


@pytest.mark.slow  # starts Ray
@pytest.mark.parametrize("workers", [1, 2])
def test_a_target_whose_early_run_fails_is_trained_by_a_run_started_as_usual(ray_local, tiny_data, tmp_path, workers):
    """The early run's worker lost while it waits (as when its node dies): one CPU worker's actor, or Ray Train's order
    queue for two workers (DDP); the order cannot be carried out, and the target is trained by a new run, not failed
    (tests/sweep/test_cluster.py kills such a node)."""
    import ray

    from mutransfer._sweep._executors import RayExecutor, TargetJob
    from mutransfer._sweep._ledger import Booked, Ledger
    from mutransfer._sweep.target_run import start_target
    from mutransfer._sweep.train_target import _early_outcome

    study, data = _study(tmp_path, tiny_data, num_workers=workers), _data(tiny_data)
    hp = merge_hyperparameters(study, {"lr": 3e-3, "batch_size": 8})
    early = start_target(study, data, tmp_path, use_gpu=False, max_failures=0, order=None)
    ray.kill(early._actor if workers == 1 else early._orders.actor)
    said: list[str] = []
    ctx = SimpleNamespace(say=said.append, executor=Booked(RayExecutor(), Ledger(tmp_path)))
    job = TargetJob(study, hp, data, tmp_path, False, 0)
    outcome = ctx.executor.target(job, None, run=lambda: _early_outcome(ctx, early, job, lambda: None))
    assert outcome.status == "completed" and outcome.epochs == 2 and outcome.head_start_seconds == 0
    assert outcome.num_workers == workers
    assert len(said) == 1 and said[0].startswith("note: the target's run started early failed"), said
    (booked,) = Ledger(tmp_path).bookings()  # trained once, by the new run, and booked once
    assert booked.kind == "target" and booked.epochs == 2
    early.cancel(timeout=60)


@pytest.mark.parametrize(
    "cluster, target, trial, fits",
    [
        ({"CPU": 2.0}, {"cpus_per_worker": 1}, {"cpus_per_trial": 1}, True),  # the default study on 2 cores
        ({"CPU": 1.0}, {"cpus_per_worker": 1}, {"cpus_per_trial": 1}, False),  # a retried trial would wait forever
        ({"CPU": 2.0}, {"cpus_per_worker": 2}, {"cpus_per_trial": 1}, False),
        ({"CPU": 4.0}, {"num_workers": 2, "cpus_per_worker": 1}, {"cpus_per_trial": 2}, True),
        ({"CPU": 8.0, "GPU": 1.0}, {"use_gpu": True}, {"cpus_per_trial": 1, "gpus_per_trial": 1}, False),
        ({"CPU": 8.0, "GPU": 2.0}, {"use_gpu": True}, {"cpus_per_trial": 1, "gpus_per_trial": 1}, True),
    ],
)
def test_the_target_starts_early_only_where_it_and_one_trial_fit_together(
    tiny_data, tmp_path, cluster, target, trial, fits
):
    path = write_tiny_study(tmp_path, tiny_data, target={"num_workers": 1, **target}, resources=trial)
    study = load_study(path)[0]
    assert fits_beside_a_trial(study, cluster, bool(target.get("use_gpu"))) is fits


def test_the_target_starts_early_only_where_the_target_phase_follows_the_proxies():
    from mutransfer._sweep.ladder import climb_ladder
    from mutransfer._sweep.strategies.top_k import top_k_phase

    core = [(p.__name__, p) for p in PHASES]
    assert target_follows_proxies(core)
    ladder = core[:1] + [(climb_ladder.__name__, climb_ladder)] + core[1:]
    assert not target_follows_proxies(ladder)  # more searches before the target: the workers would hold a lane
    top_k = [(name, top_k_phase if name == train_target.__name__ else p) for name, p in core]
    assert not target_follows_proxies(top_k)  # top-k trains its targets another way
    assert not target_follows_proxies([(n, p) for n, p in core if n != "run_proxies"])


def test_the_plan_says_when_every_trial_is_handed_out(tiny_data, tmp_path):
    study = load_study(write_tiny_study(tmp_path, tiny_data, trials=3))[0]
    plan = SearchPlan(study, tmp_path / "trials", window=3)
    for _ in range(3):
        assert not plan.handed_out()
        assert isinstance(plan.next_trial(), tuple)
    assert plan.handed_out() and plan.next_trial() == DONE


class _Trial:
    def __init__(self, status):
        self.status = status


def test_the_start_callback_acts_once_everything_is_handed_out_a_retry_is_told_and_its_pickled_copy_never():
    from mutransfer._sweep.tune_callback import WhenHandedOut

    class Plan:
        out = False

        def handed_out(self):
            return self.out

    calls: list[int] = []
    retries: list[str] = []
    plan = Plan()
    callback = WhenHandedOut(plan, calls.append, lambda: retries.append("retried"))
    running, ending = _Trial("RUNNING"), _Trial("RUNNING")
    callback.on_trial_start(0, [running, ending], running)
    assert calls == []  # trials still to hand out
    plan.out = True
    callback.on_trial_start(0, [running, ending, _Trial("TERMINATED")], running)
    callback.on_trial_complete(0, [running, ending], ending)  # the ending trial no longer counts
    callback.on_trial_error(0, [running, ending], running)
    assert calls == [2, 1, 1] and retries == []
    callback.on_trial_recover(0, [running], running)  # Tune retries a trial (its node may be gone)
    assert retries == ["retried"] and calls == [2, 1, 1]
    copy = pickle.loads(pickle.dumps(callback))  # Tune pickles its callbacks; the copy must not start a target
    copy.on_trial_complete(0, [running], running)
    copy.on_trial_recover(0, [running], running)
    assert calls == [2, 1, 1] and retries == ["retried"]


def test_a_retried_trial_calls_the_waiting_target_off_at_once_and_none_starts_early_after(tiny_data, tmp_path):
    """EarlyTarget.trial_retried: a run waiting for its order is called off without waiting for its end (Tune's
    loop calls this), and no run is started early after it (the cluster may have lost a node)."""
    from mutransfer._sweep.early_target import EarlyTarget

    study = load_study(write_tiny_study(tmp_path, tiny_data))[0]
    said: list[str] = []

    class Waiting:  # what EarlyTarget holds of a started run: its calling off
        def __init__(self) -> None:
            self.timeouts: list[float] = []

        def cancel(self, timeout: float = 10.0) -> None:
            self.timeouts.append(timeout)

    early, waiting = EarlyTarget(study, None, tmp_path / "s", said.append), Waiting()  # type: ignore[arg-type]
    early.run, early.started = waiting, True  # type: ignore[assignment]
    early.trial_retried()
    assert waiting.timeouts == [0.0] and early.run is None
    assert said and "called off" in said[0]
    fresh = EarlyTarget(study, None, tmp_path / "s", said.append)  # type: ignore[arg-type]
    fresh.trial_retried()  # before any start: none will be made (start() returns at once, Ray untouched)
    assert fresh.started and fresh.run is None
    fresh.start(live_trials=0)
    assert fresh.run is None


def test_the_target_waits_until_the_live_trials_leave_room(tiny_data, tmp_path):
    from mutransfer._sweep.early_target import free_beside, room_for, target_resources

    study = load_study(write_tiny_study(tmp_path, tiny_data, target={"num_workers": 1, "cpus_per_worker": 1}))[0]
    need = target_resources(study, False)
    assert not room_for(need, free_beside(study, {"CPU": 2.0}, live_trials=2))  # both cores train proxies
    assert room_for(need, free_beside(study, {"CPU": 2.0}, live_trials=1))
    assert room_for(need, free_beside(study, {"CPU": 16.0}, live_trials=8))  # a big machine: at once


def test_room_for_the_target_is_counted_per_resource():
    from mutransfer._sweep.early_target import room_for

    assert room_for({"CPU": 1.0, "GPU": 0.0}, {"CPU": 1.0})
    assert not room_for({"CPU": 1.0, "GPU": 0.0}, {"CPU": 0.5, "GPU": 4.0})
    assert not room_for({"CPU": 1.0, "GPU": 1.0}, {"CPU": 8.0})


class _Queue:
    """ray.util.queue.Queue's get/put, in one process (an empty queue fails the test instead of waiting)."""

    def __init__(self, *items):
        self.items = list(items)

    def get(self, timeout=None):
        assert self.items, "no order left: a restarted worker would wait for one forever"
        return self.items.pop(0)

    def put(self, item):
        self.items.append(item)


def test_an_order_stays_for_a_worker_ray_train_restarts():
    """A worker that fails after its order is restarted by Ray Train (budget.max_failures): it must find the order."""
    from mutransfer._sweep.target import TargetOrder, await_order

    order = TargetOrder({"lr": 1e-3})
    orders = _Queue(order)
    assert await_order(orders, None) == order
    assert await_order(orders, None) == order  # the restarted worker's read (it waited forever before)
    assert await_order(_Queue(None), None) is None  # called off


class _Run:
    def __init__(self, finished: bool):
        self._finished, self.cancelled = finished, False

    def finished(self):
        return self._finished

    def cancel(self):
        self.cancelled = True


@pytest.mark.parametrize(
    "finished, folder, taken", [(False, "study", True), (True, "study", False), (False, "elsewhere", False)]
)
def test_the_target_phase_takes_only_a_waiting_run_for_its_folder(tmp_path, finished, folder, taken):
    from mutransfer._sweep.early_target import EarlyTarget

    early = EarlyTarget(None, None, tmp_path / "study", print)  # type: ignore[arg-type]
    run = early.run = _Run(finished)
    got = early.take(Path(tmp_path / folder))
    assert (got is run) is taken and run.cancelled is not taken  # a run it does not take is called off
    assert early.take(tmp_path / "study") is None  # taken once


@pytest.mark.parametrize("value, read", [("false", False), ("true", True)])
def test_the_study_key_reads_true_or_false(tiny_data, tmp_path, value, read):
    path = write_tiny_study(tmp_path, tiny_data, target={"num_workers": 1})
    path.write_text(path.read_text().replace("  num_workers: 1\n", f"  num_workers: 1\n  start_early: {value}\n", 1))
    assert load_study(path)[0].target.start_early is read


def test_a_start_early_that_is_not_a_boolean_is_refused_in_one_line_with_exit_2(tiny_data, tmp_path):
    import subprocess
    import sys

    path = write_tiny_study(tmp_path, tiny_data, target={"num_workers": 1})
    path.write_text(path.read_text().replace("  num_workers: 1\n", "  num_workers: 1\n  start_early: maybe\n", 1))
    done = subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", "plan", "--study", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "target.start_early: must be true or false, got a string ('maybe')" in lines[0]
