"""A local Ray started by the product starts no idle Python workers (mutransfer._local_ray.NO_IDLE_WORKERS); without
the setting the same start leaves idle workers (the check can fail)."""

from __future__ import annotations

import os
import time

import pytest

from tests.net_helpers import process_tree

#: seconds the run with the setting waits for idle workers that should not come
WAIT_S = 30.0


def _idle_workers() -> int:
    """This process's descendants titled ``ray::IDLE`` (a worker of its Ray waiting for a task), not another test's."""
    count = 0
    for pid in process_tree(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                count += f.read().startswith(b"ray::IDLE")
        except OSError:
            continue
    return count


def _idle_after_start(monkeypatch, settings: dict[str, str], wait: float) -> tuple[int, float]:
    """(idle workers, seconds until the first was seen) within ``wait`` seconds of a local Ray's start."""
    import ray

    from mutransfer import _local_ray as local_ray

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setattr(local_ray, "NO_IDLE_WORKERS", settings)
    start = time.monotonic()
    assert local_ray.start_ray(None)
    try:
        while time.monotonic() - start < wait and _idle_workers() < 1:
            time.sleep(0.2)
        return _idle_workers(), time.monotonic() - start
    finally:
        ray.shutdown()


@pytest.mark.slow  # starts Ray twice
def test_a_local_ray_starts_no_idle_workers_and_without_the_setting_it_does(monkeypatch):
    from mutransfer._local_ray import NO_IDLE_WORKERS

    monkeypatch.delenv(next(iter(NO_IDLE_WORKERS)), raising=False)
    idle, _ = _idle_after_start(monkeypatch, NO_IDLE_WORKERS, wait=WAIT_S)
    assert idle == 0
    idle, seen_after = _idle_after_start(monkeypatch, {}, wait=60)
    assert idle >= 1  # Ray's default: workers prestarted when the driver connects, left idle
    assert seen_after < WAIT_S, f"idle workers took {seen_after:.1f} s to start: wait longer than {WAIT_S} s above"


def test_a_local_ray_never_joins_a_cluster_it_was_not_named(monkeypatch):
    """With no --address, the sweep starts a Ray of its own: ``address="local"``, so neither RAY_ADDRESS nor the
    last cluster file Ray leaves in /tmp/ray can send the study's trials (and data) to another cluster."""
    import ray

    from mutransfer import _local_ray

    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    assert _local_ray.start_ray(None)
    assert seen["address"] == "local"
