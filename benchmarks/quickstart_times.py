"""How long each line of the README's Quickstart takes, run as written (no smoke mode), in order, in a fresh folder.

    python benchmarks/quickstart_times.py [--json FILE]

The commands are the README's own text (``tests/test_readme.py`` extracts them; that test runs them in smoke mode).
The cache of generated data starts empty in the folder, so a line that generates its default dataset pays for it.
The servers (`ui`, `dashboard`) are timed until they print their link, then stopped. Prints one row per line: the
wall seconds and the exit code. The README's Quickstart quotes these times; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_readme import SERVERS, readme_commands  # noqa: E402 -- the README's commands, extracted once


def _time(command: list[str], folder: Path, env: dict) -> tuple[float, int]:
    args = [sys.executable, "-m", "mutransfer", *command[1:]]
    start = time.perf_counter()
    if command[1] in SERVERS:
        port, shown = SERVERS[command[1]]
        proc = subprocess.Popen([*args, "--port", str(port)], cwd=folder, env=env, stdout=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline() if proc.stdout else ""
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        return time.perf_counter() - start, 0 if line.startswith(shown) else 1
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=3600)
    return time.perf_counter() - start, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="quickstart-") as tmp:
        folder = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k != "MUTRANSFER_SMOKE"}
        env.update(MUTRANSFER_CACHE=str(folder / "cache"), TQDM_DISABLE="1", MLFLOW_DISABLE_TELEMETRY="true")
        for i, command in enumerate(readme_commands()):
            seconds, rc = _time(command, folder, env)
            line = ("(Set up) " if i == 0 else "") + " ".join(command)
            rows.append({"command": line, "seconds": round(seconds, 1), "exit_code": rc})
            print(f"{seconds:7.1f} s  rc {rc}  {line}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
