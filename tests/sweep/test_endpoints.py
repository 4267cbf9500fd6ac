"""Endpoints checked before anything is created: tracking URI, Ray address, data file (real sockets, real HTTP)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from mutransfer._sweep.endpoints import check_data_file, check_ray_address, check_tracking_uri
from mutransfer.errors import UserInputError
from tests.sweep_helpers import write_tiny_data, write_tiny_study


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server():
    """A local HTTP server answering every GET with the (status, body) the test sets."""
    reply = {"status": 404, "body": b"<html>not here</html>"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(reply["status"])
            self.end_headers()
            self.wfile.write(reply["body"])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", reply
    server.shutdown()
    server.server_close()


def test_http_tracking_uri(http_server):
    url, reply = http_server
    with pytest.raises(UserInputError, match="connection refused"):
        check_tracking_uri(f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(UserInputError, match="HTTP 404.*not an MLflow tracking server"):
        check_tracking_uri(url)
    reply.update(status=200, body=b"<html>a web page</html>")
    with pytest.raises(UserInputError, match="HTTP 200.*not an MLflow tracking server"):
        check_tracking_uri(url)
    reply.update(status=401, body=b"{}")
    with pytest.raises(UserInputError, match="refused access.*MLFLOW_TRACKING_USERNAME"):
        check_tracking_uri(url)
    reply.update(status=200, body=json.dumps({"experiments": []}).encode())  # what MLflow's REST API answers
    check_tracking_uri(url)


def test_local_tracking_stores(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        check_tracking_uri(f"sqlite:///{tmp_path}/missing/mlflow.db")
    check_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")  # a new store in an existing folder
    check_tracking_uri(str(tmp_path / "mlruns"))
    assert list(tmp_path.iterdir()) == []  # the checks created nothing
    with pytest.raises(UserInputError, match="postgresql.*connection refused"):  # the driver is there, the port shut
        check_tracking_uri(f"postgresql+psycopg2://u@127.0.0.1:{closed_port()}/db")


@contextlib.contextmanager
def grpc_server():
    """A gRPC server on loopback with no service (grpcio comes with Ray): the port, while it runs."""
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(None)


def test_an_http_server_on_the_ray_port_is_not_taken_for_ray(http_server):
    with pytest.raises(UserInputError, match="does not answer as Ray does"):
        check_ray_address(http_server[0].removeprefix("http://"))


def test_ray_address(monkeypatch):
    with pytest.raises(UserInputError, match="--address 127.0.0.1:.*connection refused"):
        check_ray_address(f"127.0.0.1:{closed_port()}")
    with pytest.raises(UserInputError, match="--address ray://.*connection refused"):
        check_ray_address(f"ray://127.0.0.1:{closed_port()}")
    with pytest.raises(UserInputError, match="not auto, ray://HOST:PORT or HOST:PORT"):
        check_ray_address("nonsense")
    with pytest.raises(UserInputError, match="not known"):
        check_ray_address("no-such-host.invalid:6379")
    with grpc_server() as port:  # a gRPC server listens, as Ray's GCS and Ray Client do: the check passes
        check_ray_address(f"127.0.0.1:{port}")
        check_ray_address(f"ray://127.0.0.1:{port}")
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")  # `auto` takes it from the environment
        check_ray_address("auto")
    with socket.socket() as s:  # something else accepts connections and never answers: refused, not waited on
        s.bind(("127.0.0.1", 0))
        s.listen()
        for address in (f"127.0.0.1:{s.getsockname()[1]}", f"ray://127.0.0.1:{s.getsockname()[1]}"):
            with pytest.raises(UserInputError, match="accepts connections but does not answer as Ray does"):
                check_ray_address(address)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed_port()}")
    with pytest.raises(
        UserInputError, match=r"--address auto \(found 127.0.0.1:\d+\): 127.0.0.1:\d+ connection refused"
    ):
        check_ray_address("auto")


def test_data_file(tmp_path):
    with pytest.raises(UserInputError, match="problem.data: .* does not exist"):
        check_data_file(str(tmp_path / "missing.h5"))
    with pytest.raises(UserInputError, match="is not a file"):
        check_data_file(str(tmp_path))
    (tmp_path / "d.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
    check_data_file(str(tmp_path / "d.h5"))


@pytest.mark.slow  # four CLI processes and a new MLflow store: 20-50 s on 2 busy cores
def test_unreachable_endpoints_fail_the_sweep_before_anything_exists(tmp_path, monkeypatch, http_server):
    """`mutransfer sweep` with a dead tracking URI / Ray address / data file: exit 2, one line, nothing created,
    and the name is not reserved (the fixed command gets past the checks and takes the study's lock)."""
    study = write_tiny_study(tmp_path, tmp_path / "missing.h5", name="ep")
    data_ok = write_tiny_study(tmp_path, write_tiny_data(tmp_path / "tiny.h5"), name="ep2")
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", RAY_USAGE_STATS_ENABLED="0")
    base = [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--name", "ep"]
    cases = {
        "tracking URI http://127.0.0.1": base
        + ["--study", str(data_ok), "--tracking-uri", f"http://127.0.0.1:{closed_port()}"],
        "but is not an MLflow tracking server": base + ["--study", str(data_ok), "--tracking-uri", http_server[0]],
        "--address 127.0.0.1": base + ["--study", str(data_ok), "--address", f"127.0.0.1:{closed_port()}"],
        "problem.data": base + ["--study", str(study)],
    }
    procs = {
        k: subprocess.Popen(c, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k, c in cases.items()
    }
    for expected, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, err
        assert len(err.strip().splitlines()) == 1 and expected in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.yaml", "ep2.yaml", "tiny.h5"]  # no runs dir, no store

    from mutransfer._sweep.context import SweepOptions
    from mutransfer._sweep.prepare import prepare, take_lock

    monkeypatch.chdir(tmp_path)
    prepared = prepare(SweepOptions(study_path=str(data_ok), overrides={"name": "ep"}, quiet=True))
    take_lock(prepared).release()
    assert not prepared.study_dir.exists()
