"""One CPU worker trains the target in one Ray actor, without Ray Train, to the same result.

Ray Train's run of one worker starts a controller and six helper actors (about 22 CPU-s on 2 cores) and
TorchTrainer a gloo process group, where DDP is never used; run_target then trains it in one Ray actor
(mutransfer._sweep._target_actor) with the in-process trainer. The two paths must train the same model to the
same numbers (the same loop, data, seed and threads); the actor's run must retry a lost worker from its last
checkpoint as Ray Train does, and fail once its budget is spent.
"""

from __future__ import annotations

import math
import time

import pytest

from tests.sweep_helpers import write_tiny_study


def _train(study, data, tmp_path, name, ray_train):
    from mutransfer._study.models import merge_hyperparameters
    from mutransfer._sweep.target_run import run_target

    hp = merge_hyperparameters(study, {"lr": 3e-3, "batch_size": 8})
    return run_target(study, hp, data, tmp_path / name, use_gpu=False, max_failures=0, ray_train=ray_train)


@pytest.mark.slow  # starts Ray
def test_one_cpu_worker_in_a_ray_actor_trains_the_same_target_as_ray_train(ray_local, tiny_data, tmp_path):
    from mutransfer._study import load_study
    from mutransfer.data._loading import load_split

    path = write_tiny_study(tmp_path, tiny_data, target_epochs=3, target={"num_workers": 1, "cpus_per_worker": 1})
    study, _ = load_study(path)
    data = load_split(tiny_data, n_train=32, n_test=16, resolution=64)
    with_group = _train(study, data, tmp_path, "torch", True)  # Ray Train's TorchTrainer
    plain = _train(study, data, tmp_path, "plain", False)  # the default for one CPU worker: one Ray actor
    assert with_group.status == plain.status == "completed" and math.isfinite(plain.test_error)
    assert plain.test_error == with_group.test_error  # bit for bit: the same training
    assert [e.val_error for e in plain.history] == [e.val_error for e in with_group.history]
    assert plain.epochs == 3 and plain.per_worker_batch == 8
    assert sorted(p.name for p in (tmp_path / "plain" / "target").glob("*_*")) == ["epoch_00001", "epoch_00002"]
    assert plain.checkpoint_dir == str(tmp_path / "plain" / "target" / "final")


def _kill_at_first_checkpoint(run, folder):
    """Kill the run's actor once it has published a checkpoint (as a lost node or an OOM kill would)."""
    import ray

    deadline = time.monotonic() + 300
    while not any(folder.glob("epoch_*/checkpoint.pt")):
        assert time.monotonic() < deadline and not run.finished(), "no checkpoint came"
        time.sleep(0.05)
    ray.kill(run._actor)


@pytest.mark.slow  # starts Ray
def test_the_actors_run_retries_a_lost_worker_from_its_checkpoint_and_fails_past_its_budget(
    ray_local, tiny_data, tmp_path
):
    import ray

    from mutransfer._study import load_study
    from mutransfer._study.models import merge_hyperparameters
    from mutransfer._sweep.target_run import start_target
    from mutransfer.data._loading import load_split

    # 300 epochs (about 10 s here): the kill lands long before the end, whatever the machine's load
    path = write_tiny_study(tmp_path, tiny_data, target_epochs=300, target={"num_workers": 1, "cpus_per_worker": 1})
    study, _ = load_study(path)
    data = load_split(tiny_data, n_train=32, n_test=16, resolution=64)
    hp = merge_hyperparameters(study, {"lr": 3e-3, "batch_size": 8})
    for budget, name in ((1, "retried"), (0, "failed")):
        run = start_target(study, data, tmp_path / name, use_gpu=False, max_failures=budget, order=None)
        run.order(hp)
        _kill_at_first_checkpoint(run, tmp_path / name / "target")
        if budget:
            outcome = run.outcome()
            assert outcome.status == "completed" and outcome.epochs == 300
            assert (outcome.resumed_from_epoch or 0) > 0  # the new actor went on from the checkpoint
        else:
            with pytest.raises(ray.exceptions.RayActorError):
                run.outcome()


@pytest.mark.parametrize("workers, gpu, actor", [(1, False, True), (2, False, False), (1, True, False)])
def test_one_cpu_worker_trains_in_an_actor_and_ddp_or_a_gpu_on_ray_train(workers, gpu, actor):
    """The one rule (start_target's, and the summary line's "a Ray actor" / "Ray Train"): only several workers
    (DDP's all-reduce) or a GPU (TorchTrainer's device placement) need Ray Train."""
    from mutransfer._sweep.target_run import on_one_actor

    assert on_one_actor(workers, gpu) is actor
