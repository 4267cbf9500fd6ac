"""Endpoints checked before anything is created: the tracking store, the Ray cluster, the data file.

:func:`check_endpoints` runs in :func:`mutransfer._sweep.prepare.prepare` after the
study is validated and before the study's lock, folder, MLflow runs or Ray start. Each
check has a short timeout (:data:`CONNECT_SECONDS` to connect, ``REPLY_SECONDS`` (mutransfer._tracking._server_check) for an
MLflow server's reply, one call per endpoint, so the worst case stays under 30 s) and raises :class:`~mutransfer.errors.UserInputError` (one line:
the endpoint, what is wrong, the fix; exit 2). The checks create nothing: no sqlite
file, no folder, no experiment.

- tracking URI: ``http(s)://`` must answer MLflow's REST API
  (``GET /api/2.0/mlflow/experiments/search``) with JSON; ``sqlite:///PATH`` (and file
  stores) need an existing, writable folder; other database URIs need their host's port
  to accept a TCP connection.
- Ray ``--address``: ``ray://HOST:PORT`` (Ray Client, port 10001 if none) and
  ``HOST:PORT`` (the GCS) must accept a TCP connection and answer an HTTP/2 preface with a SETTINGS
  frame, as every gRPC server does (a port of something else is refused, not waited on); ``auto`` needs a running
  cluster that Ray can find (``RAY_ADDRESS`` or this machine's latest ``ray start``).
- the data file (``problem.data``), when the study names one: it exists, is a file
  and can be read.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from mutransfer._tracking._server_check import check_server_reachable
from mutransfer._tracking._sqlite_file import sqlite_path
from mutransfer._tracking.runs import CONNECT_SECONDS, check_tcp, open_tcp
from mutransfer.errors import UserInputError

_DB_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def check_endpoints(tracking_uri: str, address: str | None, data: str | None) -> None:
    """All three checks; the first failure raises UserInputError."""
    check_tracking_uri(tracking_uri)
    if address is not None:
        check_ray_address(address)
    if data is not None:
        check_data_file(data)


def check_store(uri: str) -> None:
    """A store a command only reads (`studies`, `ui`), checked as a sweep checks its own: a server that answers
    within seconds, a database driver that is installed, a regular file; one line each."""
    path = sqlite_path(uri)
    if path is None or path.exists():  # a missing file: the command's own line says so
        check_tracking_uri(uri)


def check_tracking_uri(uri: str) -> None:
    scheme = urlsplit(uri).scheme.split("+")[0].lower()
    fix = "start the server, fix --tracking-uri (tracking.uri in the study), or drop it to log to ./mlflow.db"
    if scheme in ("http", "https"):
        check_server_reachable(uri, fix)
    elif scheme in ("sqlite", "file", ""):
        path = Path(uri[len("sqlite:///") :] if scheme == "sqlite" else urlsplit(uri).path if scheme == "file" else uri)
        _check_writable_place(
            path, f"tracking URI {uri}", "create the folder, or pass a --tracking-uri in a writable one"
        )
    elif scheme in _DB_PORTS:
        check_database_driver(uri)
        parts = urlsplit(uri)
        check_tcp(parts.hostname or "localhost", parts.port or _DB_PORTS[scheme], f"tracking URI {uri}", fix)


#: the pip package of each database driver SQLAlchemy may name (its dialect's ``driver``)
_DRIVER_PACKAGES = {
    "psycopg": "psycopg[binary]",
    "psycopg2": "psycopg2-binary",
    "mysqldb": "mysqlclient",
    "pymysql": "pymysql",
    "pyodbc": "pyodbc",
    "pymssql": "pymssql",
}


def check_database_driver(uri: str) -> None:
    """A database tracking URI needs its SQLAlchemy driver installed: SQLAlchemy 2.1 maps ``postgresql://`` to
    psycopg 3, which mutransfer does not install; a missing driver is one line naming the package, not MLflow's
    traceback from inside the first run."""
    from sqlalchemy.engine import make_url  # noqa: PLC0415 -- deferred: only for a database URI
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError  # noqa: PLC0415 -- deferred: as above

    try:
        dialect = make_url(uri).get_dialect()
    except (NoSuchModuleError, ArgumentError) as exc:
        raise UserInputError(f"tracking URI {uri}: {_first_line(exc)}; name a dialect SQLAlchemy knows") from None
    load = getattr(dialect, "import_dbapi", None) or getattr(dialect, "dbapi", None)  # SQLAlchemy 2 / 1.4
    try:
        if callable(load):
            load()
    except ImportError:
        scheme = urlsplit(uri).scheme.split("+")[0]
        package = _DRIVER_PACKAGES.get(dialect.driver, dialect.driver)
        alternative = (
            " or name psycopg2 (postgresql+psycopg2://, pip install psycopg2-binary)" if scheme == "postgresql" else ""
        )
        raise UserInputError(
            f"tracking URI {uri}: its database driver {dialect.driver} is not installed; pip install '{package}'"
            f"{alternative}"
        ) from None


def _check_writable_place(path: Path, what: str, fix: str) -> None:
    """An existing store must be readable and writable; a new one needs an existing, writable folder."""
    path = path.absolute()
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise UserInputError(f"{what}: {path} is not readable and writable by this user; {fix}")
        return
    folder = path.parent
    if not folder.is_dir():
        raise UserInputError(f"{what}: folder {folder} does not exist; {fix}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserInputError(f"{what}: folder {folder} is not writable by this user; {fix}")


def check_ray_address(address: str) -> None:
    fix = "start the cluster (`ray start --head`), fix --address, or drop --address to run on a local Ray"
    if address == "auto":
        _check_auto(fix)
        return
    client = address.startswith("ray://")
    rest = address[len("ray://") :] if client else address
    try:
        parts = urlsplit(f"//{rest}")
        host, port = parts.hostname, parts.port or (10001 if client else None)
    except ValueError:
        host = port = None
    if not host or port is None:
        raise UserInputError(f"--address {address}: not auto, ray://HOST:PORT or HOST:PORT; {fix}")
    _check_grpc(host, port, f"--address {address}", fix)


def _check_auto(fix: str) -> None:
    """``auto`` as ray.init finds it: RAY_ADDRESS, else the address of this machine's latest `ray start`.

    The address is checked as found (not with Ray's canonicalisation, which replaces 127.0.0.1 by the
    machine's outside address: a head started with ``--node-ip-address=127.0.0.1`` listens on loopback only).
    """
    from ray._private.services import get_ray_address_from_environment  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)

    try:
        found = get_ray_address_from_environment("auto", None)
    except ConnectionError as exc:
        raise UserInputError(f"--address auto: {_first_line(exc)}; {fix}") from None
    if not found or found == "auto":
        raise UserInputError(f"--address auto: no running Ray cluster found on this machine; {fix}")
    if "://" in found and not found.startswith("ray://"):
        return  # an address form ray.init resolves itself (e.g. a job's http:// address): left to it
    try:
        check_ray_address(found)
    except UserInputError as exc:
        raise UserInputError(f"--address auto (found {found}): {str(exc).split(': ', 1)[1]}") from None


#: what an HTTP/2 client sends first (RFC 9113 §3.4): the connection preface, then an empty SETTINGS frame
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
#: the frame type of SETTINGS, the first frame an HTTP/2 server sends (byte 3 of a frame header)
_H2_SETTINGS = 0x04


def _check_grpc(host: str, port: int, what: str, fix: str) -> None:
    """The port accepts a TCP connection and answers as an HTTP/2 (gRPC) server does, as Ray's GCS and Ray Client
    both are: a port of something else (which ray.init would wait on for minutes) is refused in seconds."""
    try:
        with open_tcp(host, port, what, fix) as conn:
            conn.sendall(_H2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = conn.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
    except OSError:
        header = b""
    if len(header) < 9 or header[3] != _H2_SETTINGS:
        raise UserInputError(
            f"{what}: {host}:{port} accepts connections but does not answer as Ray does (no gRPC reply in "
            f"{CONNECT_SECONDS:.0f} s); {fix}"
        )


def check_data_file(data: str) -> None:
    path = Path(data)
    fix = "fix problem.data in the study file, or drop it to generate the study's dataset"
    if not path.exists():
        raise UserInputError(f"problem.data: {path} does not exist; {fix}")
    if not path.is_file():
        raise UserInputError(f"problem.data: {path} is not a file; {fix}")
    try:
        with open(path, "rb") as f:
            f.read(8)
    except OSError as exc:
        raise UserInputError(f"problem.data: {path} cannot be read ({exc.strerror or exc}); {fix}") from None


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:160] + ("..." if len(text) > 160 else "")
