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


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray with 2 CPUs for one test module (left running if the module found one already)."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def team_store(tmp_path_factory):
    """A real PostgreSQL + `mlflow server` on loopback for the session (tests/team_store.py); skipped with the reason
    where PostgreSQL or psycopg2 is missing. Tests that stop the server start their own TeamStore."""
    from tests.team_store import TeamStore, team_store_or_skip

    reason = team_store_or_skip()
    if reason:
        pytest.skip(reason)
    store = TeamStore(tmp_path_factory.mktemp("team-store"))
    yield store
    store.close()


@pytest.fixture
def cluster(tmp_path):
    """A 2-node Ray cluster on loopback, one CPU per node (tests/ray_cluster.py); skipped without the `ray` CLI."""
    import shutil

    from tests.ray_cluster import LocalCluster

    if shutil.which("ray") is None:
        pytest.skip("the `ray` CLI is not on PATH")
    c = LocalCluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()
