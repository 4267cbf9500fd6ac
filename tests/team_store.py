"""A team's tracking store for the tests: a real PostgreSQL server and a real `mlflow server` on it, on loopback.

:class:`Postgres` makes a fresh database cluster in a temporary folder (``initdb``), starts it on
127.0.0.1 with a free port (``pg_ctl start -w``) and creates a database ``mlflow``. When the tests
run as root (CI's containers do), PostgreSQL refuses to run as root, so ``initdb`` and ``pg_ctl``
run as the ``postgres`` user that Debian's package creates (``runuser -u postgres``), and the folder
is given to that user.

:class:`MlflowServer` is ``mlflow server --backend-store-uri postgresql://... --artifacts-destination
DIR --serve-artifacts`` on 127.0.0.1 and a free port: clients send their artifacts to the server
(``mlflow-artifacts:/``), which writes them under DIR. :meth:`MlflowServer.stop` and
:meth:`MlflowServer.start` stop and restart it on the same port and store (the outage tests); its
output goes to ``server.log`` in its folder, so a test can read the server's error log.

:func:`team_store_or_skip` says why the fixture cannot run (no PostgreSQL binaries, no psycopg2)
in one line for ``pytest.skip``; Debian: ``apt-get install postgresql`` (``.ci/run`` does it).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from mutransfer.cli._ui_cmd import JOB_EXECUTION_ENV

START_TIMEOUT_S = 120  # a fresh store's migrations run when the server first opens it (tens of seconds on 2 cores)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The folder of ``initdb``/``pg_ctl``: on PATH, else Debian's /usr/lib/postgresql/<version>/bin (newest)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def team_store_or_skip() -> str | None:
    """None when the fixture can run, else the one-line reason it is skipped."""
    if postgres_bin() is None:
        return "PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run installs it)"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (pip install -e '.[test]' brings psycopg2-binary)"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root without runuser: PostgreSQL cannot be started as root"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no `postgres` user (Debian's postgresql package makes it)"
    return None


class Postgres:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (trust authentication: it only listens on loopback)."""

    def __init__(self):
        self.bin = postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="mutransfer-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self.user = "postgres" if self._as_root else os.environ.get("USER", "postgres")

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> None:
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "--no-sync", "-E", "UTF8")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "postgres.log"), "-o", options, "-w", "start")

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its SQLAlchemy URI."""
        import psycopg2

        db = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres")
        try:
            db.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with db.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            db.close()
        return self.uri(name)

    def uri(self, name: str) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{name}"  # SQLAlchemy 2.1 defaults to psycopg 3

    def query(self, name: str, sql: str) -> list[tuple]:
        import psycopg2

        db = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname=name)
        try:
            with db.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            db.close()

    def stop(self) -> None:
        if self.data.exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


class MlflowServer:
    """``mlflow server`` on a backend store, artifacts served from ``folder/artifacts``, on 127.0.0.1."""

    def __init__(self, backend_uri: str, folder: Path):
        self.backend_uri = backend_uri
        self.folder = folder
        self.artifacts = folder / "artifacts"
        self.log_path = folder / "server.log"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.artifacts.mkdir(parents=True, exist_ok=True)
        cmd = [
            *(sys.executable, "-m", "mlflow", "server"),
            *("--backend-store-uri", self.backend_uri),
            *("--artifacts-destination", str(self.artifacts), "--serve-artifacts"),
            *("--host", "127.0.0.1", "--port", str(self.port), "--workers", "2"),
        ]
        # without MLflow's GenAI job runner (eight processes, about 30 CPU-s a start), as `mutransfer ui` starts it
        env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", **{JOB_EXECUTION_ENV: "false"})
        with self.log_path.open("a") as log:
            log.write(f"--- start {self.starts}\n")
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not up in {START_TIMEOUT_S} s:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        """Stop the server and every worker it started (its own process group); the store is kept."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        with self.log_path.open("a") as log:
            log.write("--- stopped\n")

    def errors(self) -> list[str]:
        """The lines of the server's log that report an error (a traceback, an HTTP 5xx, a level ERROR record)."""
        lines = self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        markers = ("Traceback", " ERROR ", "ERROR:", '" 500', '" 502', '" 503')
        return [line for line in lines if any(m in line for m in markers)]


class TeamStore:
    """PostgreSQL + an MLflow server on it: ``uri`` is what ``--tracking-uri`` is given."""

    def __init__(self, folder: Path):
        self.postgres = Postgres()
        self.postgres.start()
        try:
            backend = self.postgres.create_database("mlflow")
            self.server = MlflowServer(backend, folder)
            self.server.start()
        except BaseException:
            self.postgres.stop()
            raise

    @property
    def uri(self) -> str:
        return self.server.uri

    def count(self, sql: str) -> int:
        return int(self.postgres.query("mlflow", sql)[0][0])

    def close(self) -> None:
        self.server.stop()
        self.postgres.stop()
