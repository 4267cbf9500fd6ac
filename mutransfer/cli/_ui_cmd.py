"""`mutransfer ui`: start the MLflow UI on the study store and print the link to the newest study's runs.

The link is printed once the server answers (``/health``), so it opens a page, not an
error; a port already taken is refused before anything starts (one line, exit 2). The
experiment is tagged on the way (mutransfer._tracking.views) so that stores written
before those tags existed open on the study's runs too.
"""

from __future__ import annotations

import argparse
import errno
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from mutransfer._sweep.endpoints import check_store
from mutransfer._tracking._sqlite_file import sqlite_path
from mutransfer._tracking.guard import guarded
from mutransfer._tracking.listings import list_studies, study_to_show
from mutransfer._tracking.runs import _client, resolve_tracking_uri
from mutransfer._tracking.views import (
    STUDIES_KEY,
    compare_link,
    searched_keys,
    tag_kind,
    tag_studies,
    tag_study,
    ui_link,
)
from mutransfer.cli._common import positive_int
from mutransfer.cli._quiet import relay_server_output, server_environment, server_options
from mutransfer.errors import UserInputError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
EXIT_SERVER_FAILED = 1
POLL_SECONDS = 0.25


def _port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1-65535)")
    return value


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "ui",
        help="start the MLflow UI on the study store (127.0.0.1 only by default)",
        description="Start the MLflow UI for the tracking store and print the link to the newest study's runs "
        "(its error metrics and searched hyperparameters as columns) once the server answers; with several studies, "
        "links to them side by side too (those of that experiment; those of every experiment, where the studies "
        "span several). "
        "Binds to 127.0.0.1 unless --host says otherwise. Stop it with Ctrl-C.",
    )
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db in this directory)")
    p.add_argument("--port", type=_port, default=5000, help="TCP port (default 5000)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--experiment", help="experiment to link to (default: that of the newest study)")
    p.add_argument(
        "--wait",
        type=positive_int,
        default=300,
        metavar="SECONDS",
        help="how long to wait for the server to answer before giving up (default 300)",
    )
    p.set_defaults(run=run_ui_cmd)


def ui_command(uri: str, *, host: str = "127.0.0.1", port: int = 5000, verbose: bool = False) -> list[str]:
    """The argument list that starts the MLflow UI for ``uri`` (no shell; one worker: one local reader; uvicorn's
    INFO lines off unless ``verbose``)."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--registry-store-uri",  # the same store, said so: the server prints no "not provided" note
        uri,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
        *server_options(verbose),
    ]


#: MLflow's server starts a job runner and seven huey consumers for its GenAI jobs (evaluations of traces), which the
#: UI of a study's runs never asks for: about 30 CPU-s at each start and eight processes more (docs/results.md, "What
#: every command pays"). Off unless the user's environment sets it.
JOB_EXECUTION_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"


def ui_environment(verbose: bool) -> dict[str, str]:
    """The MLflow server's environment: quiet unless ``verbose`` (mutransfer.cli._quiet), without MLflow's job runner
    unless :data:`JOB_EXECUTION_ENV` is set."""
    env = server_environment(verbose)
    env.setdefault(JOB_EXECUTION_ENV, "false")
    return env


def check_port_free(host: str, port: int) -> None:
    """Refuse (UserInputError) a port something already listens on, before the server starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserInputError(
                    f"--port {port}: {host}:{port} is already in use (another `mutransfer ui`?); "
                    "stop that server or pick a free port with --port"
                ) from None
            raise UserInputError(
                f"--host {host}: cannot listen there ({exc.strerror}); use 127.0.0.1 or an address of this machine"
            ) from None


def _answers(host: str, port: int) -> bool:
    local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    shown = f"[{local}]" if ":" in local else local
    try:
        with urllib.request.urlopen(f"http://{shown}:{port}/health", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def wait_until_serving(proc: subprocess.Popen, host: str, port: int, seconds: float) -> str | None:
    """None once the server answers /health; else why not (it exited, or ``seconds`` passed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"the MLflow server exited with code {proc.returncode} before answering (its messages are above)"
        if _answers(host, port):
            return None
        time.sleep(POLL_SECONDS)
    return f"the MLflow server did not answer on port {port} within {seconds:.0f} s; raise --wait"


def _tag_study(uri: str, experiment: str | None, rows: list[dict]) -> tuple[str | None, str | None]:
    """(experiment id, view key) of the study to show among ``rows`` (the store's studies); the experiment gets the
    tags of mlflow_view."""

    experiment_id, row = study_to_show(uri, experiment, rows)
    if experiment_id is None:
        return None, None
    client = _client(uri)
    try:
        if row is None:
            tag_kind(client, experiment_id)
            return experiment_id, None
        params = client.get_run(row["run_id"]).data.params
        return experiment_id, tag_study(client, experiment_id, row["study"], searched_keys(params))
    except Exception as exc:  # a read-only or busy store: still serve it, without the study's view
        print(
            f"warning: could not tag experiment {experiment_id} for the study's view ({type(exc).__name__}); "
            "the link opens its runs without the preset columns",
            file=sys.stderr,
        )
        return experiment_id, None


def _tag_studies(uri: str, experiment_id: str | None, rows: list[dict]) -> int:
    """How many studies the experiment holds among ``rows`` (the store's studies); with more than one, its studies'
    side-by-side view is written onto it (mutransfer._tracking.views.tag_studies). 0 when there is nothing to
    compare or the store is read-only."""
    if experiment_id is None:
        return 0
    count = sum(1 for row in rows if row["experiment_id"] == experiment_id)
    if count < 2:
        return 0
    try:
        tag_studies(_client(uri), experiment_id)
    except Exception:  # a read-only or busy store: the study's own link still works  # noqa: BLE001
        return 0
    return count


def _tag_across(uri: str, rows: list[dict]) -> list[str]:
    """The experiments holding the store's studies (``rows``), each with the studies' side-by-side view written onto
    it (MLflow's compare-experiments page reads the view from one of them: mutransfer._tracking.views); [] when the
    studies are all in one experiment or the store is read-only (no link then: it would open on an error)."""
    experiment_ids = sorted({row["experiment_id"] for row in rows})
    if len(experiment_ids) < 2:
        return []
    client = _client(uri)
    try:
        for experiment_id in experiment_ids:
            tag_studies(client, experiment_id)
    except Exception:  # a read-only or busy store: the other links still work  # noqa: BLE001
        return []
    return experiment_ids


def ui_lines(uri: str, rows: list[dict], experiment: str | None, host: str, port: int) -> list[str]:
    """What `mutransfer ui` prints once the server answers, the experiments tagged on the way: the link to the
    newest study's runs (of ``experiment`` if named); with two or more studies in that experiment, their side-by-side
    view; with studies in two or more experiments, every study of the store side by side."""
    experiment_id, key = _tag_study(uri, experiment, rows)
    lines = [f"MLflow UI: {ui_link(host, port, experiment_id, key)}  (Ctrl-C to stop)"]
    side_by_side = _tag_studies(uri, experiment_id, rows)
    if side_by_side:
        link = ui_link(host, port, experiment_id, STUDIES_KEY)
        lines.append(f"MLflow UI, its {side_by_side} studies side by side: {link}")
    across = _tag_across(uri, rows)
    if across:
        link = compare_link(host, port, across, STUDIES_KEY)
        lines.append(f"MLflow UI, all {len(rows)} studies of {len(across)} experiments side by side: {link}")
    return lines


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run_ui_cmd(args: argparse.Namespace) -> int:
    uri = resolve_tracking_uri(args.tracking_uri)
    path = sqlite_path(uri)
    if path is not None and not path.exists():
        raise UserInputError(
            f"tracking store {path} not found; run `mutransfer sweep` here first or pass --tracking-uri"
        )
    check_store(uri)
    check_port_free(args.host, args.port)
    rows = list_studies(uri)  # once: the study's view and the side-by-side ones are read from it
    lines = ui_lines(uri, rows, args.experiment, args.host, args.port)
    if args.host not in LOCAL_HOSTS:
        print(f"warning: --host {args.host} exposes the MLflow UI beyond this machine", file=sys.stderr)
    print(f"mutransfer ui: starting MLflow on {args.host}:{args.port} ...", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server too, as Ctrl-C does
    # an argument list, no shell; the server's output is relayed to stderr (its known notes left out) so stdout
    # holds only the link
    # through the guard (mutransfer._tracking.guard): the server stops with this command, even after `kill -9`
    proc = subprocess.Popen(
        guarded(ui_command(uri, host=args.host, port=args.port, verbose=args.verbose)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ui_environment(args.verbose),
    )
    assert proc.stdout is not None
    relay = threading.Thread(target=relay_server_output, args=(proc.stdout, sys.stderr, args.verbose), daemon=True)
    relay.start()
    try:
        problem = wait_until_serving(proc, args.host, args.port, args.wait)
        if problem is not None:
            _stop(proc)
            print(f"mutransfer ui: error: {problem}", file=sys.stderr)
            return EXIT_SERVER_FAILED
        for line in lines:
            print(line, flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        return 0
