"""Shared test settings: quiet, deterministic, CPU-friendly."""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TQDM_DISABLE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# One thread: the suite shares 2 cores with Ray workers and subprocesses, and
# oversubscribed OpenMP threads made torch 3-10x slower in our measurements.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
