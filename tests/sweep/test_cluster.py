"""`mutransfer sweep` submitted with `ray job submit` to a real 2-node Ray cluster (slow).

The cluster runs on loopback: a head and a worker node (`ray start --block`, one CPU
each, token authentication with a token generated here, every port chosen free at
run time). A tiny study (2 proxy trials, 1 CPU each, at most 2 at a time) is
submitted as a Ray job with `--address auto`; both trials can only run at the same
time if one lands on each node.

Node placement is checked without any product change: every proxy trial appends its
process id to ``trials/<trial_id>/executions.jsonl`` (mutransfer.sweep.trial), and
Ray's state API (``ray.util.state.list_actors``, asked from a subprocess that holds
the token) maps each trial actor's pid to its node id. Both nodes run on this
machine, so the pids are unique across them.

Teardown kills only what this test started: the two `ray start --block` processes
(SIGTERM makes them stop their raylet, GCS, dashboard, workers), then, as a fallback,
any process still carrying this test's unique RAY_AUTH_TOKEN in its environment.
`ray stop` is never used: other Ray clusters may run on the same machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.sweep_helpers import mlflow_runs, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow

RAY = shutil.which("ray") or "ray"
START_TIMEOUT_S = 90  # both nodes registered
JOB_TIMEOUT_S = 300  # submission to SUCCEEDED, on a loaded 2-core machine


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class LocalCluster:
    """A head + a worker node on 127.0.0.1, started with `ray start --block` as our own subprocesses."""

    def __init__(self, root: Path):
        self.root = root
        self.token = secrets.token_hex(32)
        (
            self.gcs_port,
            self.dashboard_port,
            self.client_port,
            head_agent,
            worker_agent,
            head_metrics,
            worker_metrics,
        ) = _free_ports(7)
        self._agent_ports = {"head": head_agent, "worker": worker_agent}
        self._metrics_ports = {"head": head_metrics, "worker": worker_metrics}
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
            RAY_USAGE_STATS_ENABLED="0",
            MLFLOW_DISABLE_TELEMETRY="true",
            TQDM_DISABLE="1",
            MUTRANSFER_CACHE=str(root / "cache"),
        )
        env.pop("RAY_AUTH_TOKEN_PATH", None)
        self.env = env
        self.procs: dict[str, subprocess.Popen] = {}
        # Short temp dir: Ray's unix sockets live under it (AF_UNIX paths are limited to ~107 bytes).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="mtray"))

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, role: str, args: list[str]) -> None:
        log = open(self.root / f"ray-{role}.log", "w")
        common = [
            "--num-cpus=1",
            "--num-gpus=0",
            "--block",
            "--disable-usage-stats",
            f"--dashboard-agent-listen-port={self._agent_ports[role]}",
            f"--metrics-export-port={self._metrics_ports[role]}",
        ]
        self.procs[role] = subprocess.Popen(
            [RAY, "start", *args, *common],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: ours alone to signal
        )

    def start(self) -> None:
        self._start(
            "head",
            [
                "--head",
                f"--port={self.gcs_port}",
                "--node-ip-address=127.0.0.1",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={self.client_port}",
                f"--temp-dir={self.temp_dir}",
            ],
        )
        self._wait_nodes(1)
        self._start("worker", [f"--address=127.0.0.1:{self.gcs_port}", "--node-ip-address=127.0.0.1"])
        self._wait_nodes(2)

    def run(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            list(args),
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}\n{self.logs()}"
            )
        return proc

    def state(self, what: str) -> list[dict]:
        """`ray.util.state.list_<what>` from a subprocess with the token (keeps Ray out of pytest's process)."""
        code = (
            "import json, sys\n"
            "from ray.util import state\n"
            f"rows = state.list_{what}(address={self.dashboard!r}, detail=True, limit=10000, raise_on_missing_output=False)\n"
            "json.dump([r if isinstance(r, dict) else r.__dict__ for r in rows], sys.stdout, default=str)\n"
        )
        out = self.run(sys.executable, "-c", code, timeout=90).stdout
        return json.loads(out)

    def _wait_nodes(self, n: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            for role, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(f"`ray start` ({role}) exited {proc.returncode}\n{self.logs()}")
            try:
                alive = [node for node in self.state("nodes") if node.get("state") == "ALIVE"]
                if len(alive) >= n:
                    return
                last = f"{len(alive)} alive node(s)"
            except (AssertionError, subprocess.TimeoutExpired, ValueError) as exc:
                last = str(exc)[-2000:]
            time.sleep(2)
        raise AssertionError(f"the cluster did not reach {n} node(s) in {START_TIMEOUT_S} s: {last}\n{self.logs()}")

    def logs(self) -> str:
        parts = []
        for role in self.procs:
            path = self.root / f"ray-{role}.log"
            if path.exists():
                parts.append(f"--- ray start ({role}) ---\n{path.read_text()[-3000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for role in ("worker", "head"):
            proc = self.procs.get(role)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for role in ("worker", "head"):
            proc = self.procs.get(role)
            if proc is None:
                continue
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait(timeout=10)
        # Anything left (raylet, GCS, workers, the job driver) still has our token in its environment.
        deadline = time.monotonic() + 15
        while _processes_with_env(f"RAY_AUTH_TOKEN={self.token}") and time.monotonic() < deadline:
            time.sleep(1)
        for pid in _processes_with_env(f"RAY_AUTH_TOKEN={self.token}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _processes_with_env(entry: str) -> list[int]:
    needle = entry.encode() + b"\0"
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes() + b"\0":
                found.append(int(d.name))
        except OSError:
            continue
    return found


@pytest.fixture
def cluster(tmp_path):
    if shutil.which("ray") is None:
        pytest.skip("the `ray` CLI is not on PATH")
    c = LocalCluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_sweep_job_runs_trials_on_both_nodes(cluster, tmp_path):
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    # Trials long enough (40 epochs, no ASHA stop) that the two overlap: with 2-epoch trials the first could end
    # before the second's actor had started on the worker node, and Tune then ran both on the head node.
    study = write_tiny_study(
        tmp_path, data, name="cluster-test", trials=2, epochs=40, grace=40, target_epochs=1, max_concurrent=2
    )
    runs, db = tmp_path / "runs", tmp_path / "mlflow.db"
    sweep = [
        "mutransfer", "sweep",
        "--study", str(study),
        "--address", "auto",
        "--proxy-K", "4",
        "--target-K", "8",
        "--num-trials", "2",
        "--epochs", "40",
        "--target-epochs", "1",
        "--tracking-uri", f"sqlite:///{db}",
        "--name", "cluster-test",
        "--runs-dir", str(runs),
        "--json",
    ]  # fmt: skip
    # No --working-dir: the package is installed (editable) on every node, so nothing is uploaded.
    # The entrypoint is a shell command; `cd` keeps any relative output (e.g. ./mlruns) in tmp_path.
    entrypoint = f"cd {shlex.quote(str(tmp_path))} && {shlex.join(sweep)}"
    job_id = f"cluster-test-{secrets.token_hex(4)}"
    runtime_env = {"env_vars": {"MUTRANSFER_CACHE": str(tmp_path / "cache"), "TQDM_DISABLE": "1"}}
    cluster.run(
        RAY, "job", "submit",
        "--address", cluster.dashboard,
        "--submission-id", job_id,
        "--runtime-env-json", json.dumps(runtime_env),
        "--no-wait",
        "--", "bash", "-c", entrypoint,
        timeout=120,
    )  # fmt: skip

    def job_logs() -> str:
        try:
            proc = cluster.run(RAY, "job", "logs", "--address", cluster.dashboard, job_id, timeout=60, check=False)
            return proc.stdout[-8000:] + proc.stderr[-2000:]
        except subprocess.TimeoutExpired:
            return "(`ray job logs` timed out)"

    deadline, status = time.monotonic() + JOB_TIMEOUT_S, ""
    while time.monotonic() < deadline:
        proc = cluster.run(RAY, "job", "status", "--address", cluster.dashboard, job_id, timeout=60, check=False)
        status = proc.stdout + proc.stderr
        # `ray job status` prints e.g. "Job 'x' succeeded" / "Job 'x' failed" / "... stopped".
        if any(f"' {s}" in status.lower() for s in ("succeeded", "failed", "stopped")):
            break
        time.sleep(3)
    else:
        cluster.run(RAY, "job", "stop", "--address", cluster.dashboard, job_id, timeout=60, check=False)
        pytest.fail(
            f"job {job_id} did not finish in {JOB_TIMEOUT_S} s; last status:\n{status}\njob logs:\n{job_logs()}"
        )
    logs = job_logs()
    assert "' succeeded" in status.lower(), f"job {job_id} did not succeed:\n{status}\njob logs:\n{logs}"

    # The sweep completed: report in the job's stdout, study state on disk, runs in MLflow.
    sdir = runs / "cluster-test"
    state = json.loads((sdir / "state.json").read_text()) if (sdir / "state.json").exists() else {}
    assert state.get("phase") == "done", f"study state: {state}\njob logs:\n{logs}"
    assert len(state["trials"]) == 2
    names = {r.data.tags.get("mlflow.runName", "") for r in mlflow_runs(f"sqlite:///{db}")}
    assert len(names) >= 4, names  # parent + 2 proxies + target

    # Placement: trial pid (executions.jsonl) -> actor (state API) -> node id.
    from mutransfer.sweep.trial import read_executions

    trial_pids = {}
    for tdir in sorted((sdir / "trials").iterdir()):
        execs = [e for e in read_executions(tdir) if e["kind"] == "train"]
        assert execs, f"trial {tdir.name} recorded no execution"
        trial_pids[tdir.name] = {e["pid"] for e in execs}
    assert len(trial_pids) == 2, trial_pids

    nodes = {n["node_id"]: n for n in cluster.state("nodes")}
    assert len(nodes) == 2, nodes
    actors = cluster.state("actors")
    node_of_pid = {int(a["pid"]): a["node_id"] for a in actors if a.get("pid")}
    placement = {}
    for trial, pids in trial_pids.items():
        missing = [p for p in pids if p not in node_of_pid]
        assert not missing, f"trial {trial}: pid(s) {missing} not found among the job's actors {sorted(node_of_pid)}"
        placement[trial] = {node_of_pid[p] for p in pids}
    used = set().union(*placement.values())
    assert used == set(nodes), (
        f"trials did not run on both nodes: {placement}; nodes: "
        f"{ {k: ('head' if v.get('is_head_node') else 'worker') for k, v in nodes.items()} }"
    )
