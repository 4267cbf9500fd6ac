"""The tuned allocator reaches the processes the product starts, and stops the per-step page faults.

The fault count is measured, not assumed: a 2D FNO training step (64×64, width 32,
batch 20) in a Ray worker started the way a sweep starts its trial workers page-faults
about 80,000 times every step under glibc's defaults. Under the tuned allocator most steps
fault about once; a step that grows the heap faults a few thousand times (2,561 to 12,802
seen, in 4 runs of 12 steps), so the check takes the median of 11 steps against a line
far from both (FAULT_LINE).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mutransfer._allocator import (
    OPT_OUT_ENV,
    SET_BY_US_ENV,
    TUNED_ENV,
    allocator_env,
    cluster_env,
    tuned_for_children,
    wanted_env,
)
from mutransfer._local_ray import start_ray

ROOT = Path(__file__).resolve().parents[1]
GLIBC = allocator_env({}) != {}
needs_glibc = pytest.mark.skipif(not GLIBC, reason="the tuned allocator is glibc's")


#: minor faults per step that tell the two allocators apart: the default's every step is far above, the tuned
#: allocator's median step far below
FAULT_LINE = 10_000


def faults_per_2d_step(steps: int = 11) -> float:
    """Median minor page faults of one training step of a 2D FNO in this process (after three warm-up steps:
    the heap's first growth faults once, the default allocator's mmaps fault every step)."""
    import resource
    import statistics

    import torch

    from operators.fno import FNO

    torch.manual_seed(0)
    model = FNO(dim=2, in_channels=1, out_channels=1, modes=12, width=32, layers=4)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    x, y = torch.randn(20, 64, 64, 1), torch.randn(20, 64, 64, 1)

    def step():
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()

    for _ in range(3):
        step()
    counts = []
    for _ in range(steps):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step()
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return statistics.median(counts)


def worker_faults(monkeypatch, **env: str) -> float:
    """Faults per 2D step in a worker of a Ray started by the product (start_ray), under ``env``."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    for name in (*TUNED_ENV, OPT_OUT_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # the workers import this module's step function: the checkout on their path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])))
    assert start_ray(None)
    try:
        return ray.get(ray.remote(num_cpus=1)(faults_per_2d_step).remote())
    finally:
        ray.shutdown()


@pytest.mark.slow  # starts Ray
@needs_glibc
def test_a_trial_worker_runs_without_per_step_page_faults(monkeypatch):
    assert worker_faults(monkeypatch) < FAULT_LINE


@pytest.mark.slow  # starts Ray
@needs_glibc
def test_the_fault_count_sees_the_default_allocator(monkeypatch):
    """The check can fail: with the tuned allocator turned off, the same worker page-faults every step."""
    assert worker_faults(monkeypatch, **{OPT_OUT_ENV: "0"}) > FAULT_LINE


@needs_glibc
def test_what_is_set_and_what_is_left_alone():
    assert wanted_env({}) == TUNED_ENV == allocator_env({})
    assert allocator_env(dict(TUNED_ENV)) == {}  # already tuned: nothing to add
    assert wanted_env(dict(TUNED_ENV)) == TUNED_ENV  # ... and a cluster's workers still get it
    assert wanted_env({"MALLOC_MMAP_MAX_": "4"}) == {}  # the user's own value
    assert wanted_env({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}) == {}
    for off in ("0", "false", "off"):
        assert wanted_env({OPT_OUT_ENV: off}) == {}


@needs_glibc
def test_a_clusters_workers_get_what_the_command_set_and_never_a_key_the_job_already_holds():
    """A submitted Ray job's env_vars are in its driver's environment, and Ray refuses the same key from the job and
    from ray.init: sent only when missing, or when this product's command set them."""
    assert cluster_env({}) == TUNED_ENV  # a plain driver: the workers get them with the job
    assert cluster_env({**TUNED_ENV, SET_BY_US_ENV: ",".join(TUNED_ENV)}) == TUNED_ENV  # the command added both
    # a job that set one of them: the command added the other, and only that one goes with ray.init
    job_one = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**36), SET_BY_US_ENV: "MALLOC_TRIM_THRESHOLD_"}
    assert cluster_env(job_one) == {"MALLOC_TRIM_THRESHOLD_": str(2**36)}
    assert cluster_env(dict(TUNED_ENV)) == {}  # the job's env_vars (or the user's shell) already hold them
    assert cluster_env({"MALLOC_MMAP_MAX_": "0"}) == {"MALLOC_TRIM_THRESHOLD_": str(2**36)}
    assert cluster_env({OPT_OUT_ENV: "0"}) == {}


@needs_glibc
def test_the_driver_environment_is_restored_after_the_children_start(monkeypatch):
    for name in TUNED_ENV:
        monkeypatch.delenv(name, raising=False)
    with tuned_for_children() as added:
        assert added == TUNED_ENV and all(os.environ[k] == v for k, v in TUNED_ENV.items())
    assert not any(name in os.environ for name in TUNED_ENV)


def launch(env: dict[str, str]) -> list[str]:
    """Run the command's entry point in a fresh interpreter; each start prints MALLOC_MMAP_MAX_ as it found it."""
    code = (
        "import os, sys; print(os.environ.get('MALLOC_MMAP_MAX_'), flush=True); "
        "sys.argv = ['mutransfer', '--version']; from mutransfer.cli.launch import main; sys.exit(main())"
    )
    base = {k: v for k, v in os.environ.items() if k not in (*TUNED_ENV, OPT_OUT_ENV, SET_BY_US_ENV)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout.split()


@needs_glibc
def test_the_command_restarts_itself_once_under_the_tuned_allocator():
    assert launch({}) == ["None", "0", "mutransfer", "0.1.0"]  # started without, re-executed with it
    assert launch({OPT_OUT_ENV: "0"}) == ["None", "mutransfer", "0.1.0"]  # turned off: no restart
    assert launch({"MALLOC_MMAP_MAX_": "7"}) == ["7", "mutransfer", "0.1.0"]  # the user's own: kept
    # never twice: a re-executed process whose variables were dropped (secure exec) carries on untuned
    assert launch({SET_BY_US_ENV: ",".join(TUNED_ENV)}) == ["None", "mutransfer", "0.1.0"]
