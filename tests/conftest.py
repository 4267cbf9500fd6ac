"""Shared test settings: quiet, deterministic, CPU-friendly."""

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TQDM_DISABLE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest_plugins = ["pytester"]  # tests/test_fresh_process.py runs pytest on a conftest like this one

# One thread: the suite shares 2 cores with Ray workers and subprocesses, and
# oversubscribed OpenMP threads made torch 3-10x slower in our measurements.
torch.set_num_threads(1)


#: set in the child process a ``fresh_process`` test runs in (it then runs there as usual)
FRESH_PROCESS_ENV = "MUTRANSFER_TEST_FRESH_PROCESS"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "fresh_process: runs in a child pytest of its own; the suite's in-process Ray sessions (ray.init, then "
        "ray.shutdown, many times over) can leave threads that crash a later test (ray-project/ray#31145)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A ``fresh_process`` test runs as ``python -m pytest <its node id>`` in a new interpreter; its outcome is the
    child's: passed only if the child reports it passed, skipped if it skipped there, else failed (a crash, a
    failure, nothing collected), with the child's output."""
    if pyfuncitem.get_closest_marker("fresh_process") is None or os.environ.get(FRESH_PROCESS_ENV):
        return None
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", pyfuncitem.nodeid, "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=str(pyfuncitem.config.rootpath),
        env=dict(os.environ, **{FRESH_PROCESS_ENV: "1"}),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    print(proc.stdout, proc.stderr, sep="\n")  # shown under "Captured stdout" if the test fails
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode == 0 and "1 skipped" in summary:
        pytest.skip(f"skipped in a fresh process: {summary}")
    if proc.returncode != 0 or "1 passed" not in summary:
        pytest.fail(f"{pyfuncitem.nodeid} in a fresh process: exit code {proc.returncode}, {summary!r}", pytrace=False)
    return True


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


#: what a command run in the repository's root would write there (its default tracking store, with the write-ahead
#: log where SQLite writes first, and study folders)
_ROOT_OUTPUTS = ("mlflow.db", "mlflow.db-wal", "mlruns", "mutransfer-runs")


def _root_stamps() -> dict[str, int | None]:
    """The newest modification time of each of :data:`_ROOT_OUTPUTS` and its direct entries (a run added under
    ``mlruns/<experiment>/`` changes that entry, not ``mlruns/``)."""
    # tests/conftest.py sits one below the repository's root; a pytester copy one below its own folder
    root = Path(__file__).resolve().parent.parent
    stamps: dict[str, int | None] = {}
    for name in _ROOT_OUTPUTS:
        path = root / name
        try:
            times = [path.stat().st_mtime_ns]
            if path.is_dir():
                times += [entry.stat().st_mtime_ns for entry in path.iterdir()]
            stamps[name] = max(times)
        except OSError:
            stamps[name] = None
    return stamps


@pytest.fixture(autouse=True)
def _nothing_written_in_the_repository():
    """A test that runs a command with the working directory left at the repository's root writes its tracking
    store there (and a developer's own ./mlflow.db gets the suite's runs): fail it, naming the fix."""
    before = _root_stamps()
    yield
    changed = [name for name, stamp in _root_stamps().items() if stamp != before[name]]
    if changed:
        pytest.fail(
            f"the repository's {', '.join(changed)} changed during this test (or one on the other worker): run "
            "commands in tmp_path (monkeypatch.chdir) or pass --tracking-uri and --runs-dir",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray with 2 CPUs for one test module (left running if the module found one already), without idle
    workers started ahead, as the product's local Ray (mutransfer._local_ray.NO_IDLE_WORKERS)."""
    import ray

    from mutransfer._allocator import environment
    from mutransfer._local_ray import NO_IDLE_WORKERS

    started = not ray.is_initialized()
    if started:
        with environment(NO_IDLE_WORKERS):
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


#: seconds each of the longest test files took on two workers (the slowest durations of
#: ``python -m pytest -n 2 --dist loadfile --durations=60``, calls and teardowns summed per file: a setup can be a
#: wait for an ``alone`` test), for the order below
_SLOW_FILES = Path(__file__).parent / "slow_files.json"  # absent where a test copies this conftest elsewhere
SLOW_FILES: dict[str, float] = json.loads(_SLOW_FILES.read_text()) if _SLOW_FILES.is_file() else {}


def pytest_collection_modifyitems(config, items):
    """The files that hold a slow test first, the longest first (``tests/slow_files.json``), each file's tests in
    their order; the files holding an ``alone`` test last. On two workers (``-n 2 --dist loadfile``, the README's
    test command) pytest-xdist hands out the files with the most tests first, so there this order only breaks its
    ties. Handing out the longest files first was measured and was no faster: 34:52 against 31:29 (min:s, the
    whole suite, 2026-11-28): the suite keeps both cores busy (91–93 %) in either order, and two of the longest
    files at once slowed each other (``test_sweep_resume.py`` 705 s against 460 s)."""
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow") is not None}
    alone_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("alone") is not None}

    def order(item) -> tuple[bool, bool, float]:
        path = item.nodeid.split("::")[0]
        return path in alone_files, path not in slow_files, -SLOW_FILES.get(path, 0.0)

    items.sort(key=order)  # stable: in-file order kept


@pytest.fixture(autouse=True)
def _alone_where_marked(request, tmp_path_factory):
    """On pytest-xdist workers: every test holds a shared lock on one file while it runs, a test marked ``alone`` an
    exclusive one, so it runs while no other test does (a cluster's placement needs the cores it was given). The
    lock is the OS's (``flock``) on a file in the run's temporary folder, which the workers share."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    import fcntl

    path = tmp_path_factory.getbasetemp().parent / "alone.lock"
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if request.node.get_closest_marker("alone") else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
