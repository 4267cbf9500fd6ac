"""A local Ray started by the product starts no idle Python workers (mutransfer.local_ray.NO_IDLE_WORKERS); without
the setting the same start leaves one per CPU idle (the check can fail)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest


def _idle_workers() -> int:
    """Processes titled ``ray::IDLE`` (a Ray worker waiting for a task)."""
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            count += cmdline.read_bytes().startswith(b"ray::IDLE")
        except OSError:
            continue
    return count


def _idle_after_start(monkeypatch, settings: dict[str, str], wait: float) -> tuple[int, float]:
    """(idle workers, seconds until the first was seen) within ``wait`` seconds of a local Ray's start."""
    import ray

    from mutransfer import local_ray

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
    from mutransfer.local_ray import NO_IDLE_WORKERS

    idle, seen_after = _idle_after_start(monkeypatch, {}, wait=60)
    assert idle >= 1  # Ray's default: workers prestarted when the driver connects, left idle
    idle, _ = _idle_after_start(monkeypatch, NO_IDLE_WORKERS, wait=max(5.0, 3 * seen_after))
    assert idle == 0
