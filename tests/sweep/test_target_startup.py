"""One CPU worker trains the target without torch's process group, to the same result.

Ray Train's TorchTrainer starts a gloo process group even for a single worker, where
DDP is never used; run_target then uses the plain data-parallel trainer TorchTrainer is
built on. The two paths must train the same model to the same numbers (the same loop,
data, seed and threads), and the plain one must really run without a process group.
"""

from __future__ import annotations

import math

import pytest

from tests.sweep_helpers import write_tiny_study


def _train(study, data, tmp_path, name, process_group):
    from mutransfer.study.models import merge_hyperparameters
    from mutransfer.sweep.target_run import run_target

    hp = merge_hyperparameters(study, {"lr": 3e-3, "batch_size": 8})
    return run_target(study, hp, data, tmp_path / name, use_gpu=False, max_failures=0, process_group=process_group)


@pytest.mark.slow  # starts Ray
def test_one_cpu_worker_without_a_process_group_trains_the_same_target(ray_local, tiny_data, tmp_path):
    from mutransfer.data.loading import load_split
    from mutransfer.study import load_study

    path = write_tiny_study(tmp_path, tiny_data, target_epochs=3, target={"num_workers": 1, "cpus_per_worker": 1})
    study, _ = load_study(path)
    data = load_split(tiny_data, n_train=32, n_test=16, resolution=64)
    with_group = _train(study, data, tmp_path, "torch", True)
    plain = _train(study, data, tmp_path, "plain", None)  # the default for one CPU worker
    assert with_group.status == plain.status == "completed" and math.isfinite(plain.test_error)
    assert plain.test_error == with_group.test_error  # bit for bit: the same training
    assert [e.val_error for e in plain.history] == [e.val_error for e in with_group.history]
    assert plain.epochs == 3 and plain.per_worker_batch == 8


@pytest.mark.parametrize(
    "workers, gpu, forced, group",
    [(1, False, None, False), (2, False, None, True), (1, True, None, True), (1, False, True, True)],
)
def test_the_process_group_is_started_where_it_does_something(workers, gpu, forced, group):
    from ray.train.torch import TorchTrainer

    from mutransfer.sweep.target_run import trainer_for

    trainer, backend, started = trainer_for(workers, gpu, forced)
    assert started is group and ("torch_config" in backend) is group
    if group:
        assert trainer is TorchTrainer
    else:  # the base TorchTrainer builds on: the same loop API, no torch backend
        assert trainer is not TorchTrainer and issubclass(TorchTrainer, trainer)


def test_a_process_group_cannot_be_left_out_where_it_is_needed():
    from mutransfer.sweep.target_run import trainer_for

    for workers, gpu in ((2, False), (1, True)):
        with pytest.raises(ValueError, match="needs torch's process group"):
            trainer_for(workers, gpu, False)
