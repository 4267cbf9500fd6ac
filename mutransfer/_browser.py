"""A headless Chromium for checks and screenshots of web pages (the MLflow UI, HTML reports).

Uses the ``chromium`` binary of the system (Debian: ``apt-get install chromium``) through
its command line, no driver: ``--dump-dom`` gives the page's DOM after its scripts ran,
``--screenshot`` a PNG. ``--virtual-time-budget`` lets the page's timers and requests run
for that many milliseconds of virtual time before the dump (a single-page app such as
MLflow's needs a few seconds to fetch and render its runs).

As a command (reusable for any page, e.g. a study's HTML report)::

    python -m mutransfer._browser screenshot URL OUT.png [--size 1400x800] [--budget-ms 15000]
    python -m mutransfer._browser text URL          # the page's visible text, one line
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DEFAULT_BUDGET_MS = 15000
DEFAULT_SIZE = (1400, 800)


def find_chromium() -> str | None:
    """Path of a Chromium-family browser: $CHROMIUM if set, else the first on PATH; None if there is none."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(args: list[str], *, timeout: float) -> subprocess.CompletedProcess:
    binary = find_chromium()
    if binary is None:
        raise FileNotFoundError("no Chromium found: install it (Debian: apt-get install chromium) or set $CHROMIUM")
    with tempfile.TemporaryDirectory(prefix="mutransfer-chromium-") as profile:  # a fresh profile: no stored state
        command = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def dump_dom(
    url: str, *, size: tuple[int, int] = DEFAULT_SIZE, budget_ms: int = DEFAULT_BUDGET_MS, timeout: float = 180
) -> str:
    """The page's DOM (HTML text) after ``budget_ms`` of virtual time, in a window of ``size`` (width, height).

    Tables that render only their visible columns (MLflow's runs table) hold more columns in a wider window.
    """
    done = _run(
        [f"--virtual-time-budget={budget_ms}", f"--window-size={size[0]},{size[1]}", "--dump-dom", url], timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(f"chromium --dump-dom {url} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def visible_text(page_html: str) -> str:
    """The text a reader sees: scripts and styles dropped, tags removed, whitespace collapsed."""
    text = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", " ", page_html, flags=re.S | re.I)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def screenshot(
    url: str,
    out: str | os.PathLike,
    *,
    size: tuple[int, int] = DEFAULT_SIZE,
    budget_ms: int = DEFAULT_BUDGET_MS,
    timeout: float = 180,
) -> Path:
    """Save a PNG of the page (``size`` = width, height in CSS pixels) to ``out``; returns its path."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _run(
        [f"--virtual-time-budget={budget_ms}", f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", url],
        timeout=timeout,
    )
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"chromium --screenshot {url} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return out


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 1400x800") from None
    return width, height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutransfer._browser", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    shot = sub.add_parser("screenshot", help="save a PNG of a page")
    shot.add_argument("url")
    shot.add_argument("out")
    shot.add_argument("--size", type=_size, default=DEFAULT_SIZE, help="WIDTHxHEIGHT (default 1400x800)")
    text = sub.add_parser("text", help="print the visible text of a page")
    text.add_argument("url")
    text.add_argument("--size", type=_size, default=DEFAULT_SIZE, help="WIDTHxHEIGHT (default 1400x800)")
    for p in (shot, text):
        p.add_argument(
            "--budget-ms",
            type=int,
            default=DEFAULT_BUDGET_MS,
            help="virtual time the page runs before the capture (default 15000)",
        )
    args = parser.parse_args(argv)
    if find_chromium() is None:
        print(
            "error: no Chromium found: install it (Debian: apt-get install chromium) or set $CHROMIUM", file=sys.stderr
        )
        return 2
    if args.action == "screenshot":
        print(screenshot(args.url, args.out, size=args.size, budget_ms=args.budget_ms))
    else:
        print(visible_text(dump_dom(args.url, size=args.size, budget_ms=args.budget_ms)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
