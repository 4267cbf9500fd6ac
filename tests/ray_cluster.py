"""A 2-node Ray cluster on loopback for the tests: a head and a worker node (`ray start --block`, one CPU each).

Token authentication with a token generated here, every port chosen free at run time. Teardown kills only what
:class:`LocalCluster` started: the two `ray start --block` processes (SIGTERM makes them stop their raylet, GCS,
dashboard, workers), then, as a fallback, any process still carrying its unique RAY_AUTH_TOKEN in its
environment. `ray stop` is never used: other Ray clusters may run on the same machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = shutil.which("ray") or "ray"
START_TIMEOUT_S = 150  # both nodes registered (a raylet may take up to RAY_raylet_start_wait_time_s)


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
            # a raylet registering late on a loaded 2-core machine (the full suite of 2026-11-30 at cce3564: the head's
            # `ray start` gave up after Ray's 30 s, "Try increase the RAY_raylet_start_wait_time_s config")
            RAY_raylet_start_wait_time_s="120",
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

    def kill_node(self, role: str) -> list[int]:
        """SIGKILL a node as a machine loss would: its `ray start`, raylet and every worker. Ray 2.60 puts each
        worker in a process group of its own (``process_group_cleanup_enabled``), so a signal to the group of
        `ray start` leaves the workers running: a trial on the node went on to the end and was never retried (CI).
        Returns the pids killed."""
        pids = _descendants(self.procs[role].pid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

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
                proc.wait(timeout=5)  # `ray start --block` on SIGTERM: often 30 s and more, cleaning up gracefully
            except subprocess.TimeoutExpired:
                self.kill_node(role)  # its whole tree: Ray's workers have process groups of their own
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


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid, read from /proc), the root first."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
        children.setdefault(ppid, []).append(int(d.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


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
