"""`mutransfer dashboard STUDY`: optuna-dashboard on a study's proxy trials (its ``optuna.journal``), on 127.0.0.1.

The port is bound before the link is printed, so the link opens a page; a port already taken, a study not found or
a study without trials is refused in one line (exit 2) before anything starts. The journal is opened as it is: the
dashboard reads the trials the study has written so far, while the study runs too.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from mutransfer._reporting.study_files import resolve_study_dir
from mutransfer._study_folder.state import StudyDir
from mutransfer.cli._report_cmd import RUNS_DIR_HELP, STUDY_HELP
from mutransfer.cli._ui_cmd import LOCAL_HOSTS, _interrupt, _port, check_port_free
from mutransfer.errors import UserInputError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "dashboard",
        help="start optuna-dashboard on a study's proxy trials (127.0.0.1 only by default)",
        description="Start optuna-dashboard on a study's proxy trials (the Optuna journal in its folder: parameters, "
        "values, each evaluation's validation error) and print its link. Binds to 127.0.0.1 unless --host says "
        "otherwise. Stop it with Ctrl-C.",
    )
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    p.add_argument("--runs-dir", metavar="DIR", help=RUNS_DIR_HELP)
    p.add_argument("--port", type=_port, default=8080, help="TCP port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.set_defaults(run=run_dashboard_cmd)


class _Server6(WSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- the base class's name
        """No line per request (the dashboard polls every few seconds)."""


def run_dashboard_cmd(args: argparse.Namespace) -> int:
    from optuna_dashboard import wsgi  # noqa: PLC0415 -- deferred: imports optuna and bottle, only this command needs them

    from mutransfer._sweep._journal_file import JOURNAL_FILE, journal_storage  # noqa: PLC0415 -- deferred: as above

    root = resolve_study_dir(args.study, args.runs_dir)
    StudyDir(root).check_links()  # the journal it serves (and writes) stays inside the folder
    journal = root / JOURNAL_FILE
    if not journal.is_file():
        raise UserInputError(
            f"study {args.study}: no {JOURNAL_FILE} in {root} (no trial handed out yet, or a folder written before "
            f"the journal); `mutransfer sweep --resume --name {root.name}` writes its trials there"
        )
    check_port_free(args.host, args.port)
    if args.host not in LOCAL_HOSTS:
        print(f"warning: --host {args.host} exposes the dashboard beyond this machine", file=sys.stderr)
    server_class = _Server6 if ":" in args.host else WSGIServer
    app = wsgi(journal_storage(journal))
    server = make_server(args.host, args.port, app, server_class=server_class, handler_class=_QuietHandler)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server too, as Ctrl-C does
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"optuna-dashboard: http://{shown}:{server.server_port}/dashboard/  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
