"""Screenshot of the MLflow view that `mutransfer ui` links to (the picture in README.md and docs/sweep.md).

Starts `mutransfer ui` on a free port of 127.0.0.1 for a tracking store, reads the link it
prints (once the server answers), saves a PNG of that page taken by headless Chromium
(mutransfer._browser), and stops the server::

    python docs/tools/screenshot_mlflow.py [--tracking-uri sqlite:///mlflow.db] [--out docs/img/mlflow-runs.png]
                                           [--size 1900x680] [--budget-ms 25000] [--experiment NAME]
                                           [--page '#/models/NAME/versions/1']

``--page`` takes another page of the same server (its path after the host) instead of the printed link: a
registered model's version page, say.

For any other page (a study's HTML report, say) use the browser module directly::

    python -m mutransfer._browser screenshot file:///path/to/report.html docs/img/report.png --size 1400x900
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys

from mutransfer._browser import DEFAULT_BUDGET_MS, _size, find_chromium, screenshot


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tracking-uri", default="sqlite:///mlflow.db", help="the store (default sqlite:///mlflow.db here)"
    )
    parser.add_argument("--experiment", help="experiment to show (default: that of the newest study)")
    parser.add_argument("--out", default="docs/img/mlflow-runs.png", help="PNG to write")
    parser.add_argument("--page", help="this page of the server instead of the link, e.g. '#/models/NAME/versions/1'")
    parser.add_argument("--size", type=_size, default=(1900, 680), help="WIDTHxHEIGHT (default 1900x680)")
    parser.add_argument(
        "--budget-ms",
        type=int,
        default=max(DEFAULT_BUDGET_MS, 25000),
        help="virtual time the page runs before the capture (default 25000)",
    )
    args = parser.parse_args(argv)
    if find_chromium() is None:
        print(
            "error: no Chromium found: install it (Debian: apt-get install chromium) or set $CHROMIUM", file=sys.stderr
        )
        return 2
    command = [
        sys.executable,
        "-m",
        "mutransfer",
        "ui",
        "--tracking-uri",
        args.tracking_uri,
        "--port",
        str(_free_port()),
    ]
    if args.experiment:
        command += ["--experiment", args.experiment]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true"),
    )
    try:
        line = proc.stdout.readline()  # "MLflow UI: <link>  (Ctrl-C to stop)", printed once the server answers
        if not line.startswith("MLflow UI: "):
            print(f"error: `mutransfer ui` printed no link (exit {proc.wait()})", file=sys.stderr)
            return 1
        link = line.split()[2]
        if args.page:
            link = link.split("#", 1)[0] + args.page.lstrip("/")
        print(f"{link} -> {screenshot(link, args.out, size=args.size, budget_ms=args.budget_ms)}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
