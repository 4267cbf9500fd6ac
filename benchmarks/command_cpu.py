"""The CPU seconds of single `mutransfer` commands: what every command line pays to start, and a tiny study in process.

Each round runs, as a user's shell would (``python -m mutransfer.cli.main``), in a fresh folder that shares one
cache (``$MUTRANSFER_CACHE``, warmed by one unmeasured sweep first, as a user's is after their first study):

- ``--version``;
- ``trials tiny`` on a finished study;
- ``sweep --study tiny.yaml --executor inprocess --json`` (the study of ``tests/sweep_helpers.write_tiny_study``:
  3 trials x 2 epochs and a 2-epoch target, all in the driver), into a new ``./mlflow.db``;
- ``ui`` on that store: started, its link read, 10 s more (MLflow's server starts its helpers), then stopped.

and reads the user + system CPU seconds of the command (``resource.getrusage(RUSAGE_CHILDREN)``: the command and
anything it waited for; for ``ui``, a server whose processes are not all waited for, the whole machine's busy
CPU-seconds from ``/proc/stat``). Prints each round, then the means with a 95 % t interval. Run it on a quiet
machine. ``--only NAME`` runs one of them. To compare two versions, run it with each one's code first on the path::

    git worktree add /tmp/before <commit>
    PYTHONPATH=/tmp/before python benchmarks/command_cpu.py --rounds 5
    python benchmarks/command_cpu.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# tests.sweep_helpers: this checkout's, after the PYTHONPATH entries that name the version to measure
sys.path.insert(1 + len([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]), str(ROOT))

from tiny_sweep_cpu import busy_seconds, summary  # noqa: E402 -- this folder's (sys.path[0]), whatever PYTHONPATH says

from tests.sweep_helpers import write_tiny_data, write_tiny_study  # noqa: E402


def cpu_seconds(args: list[str], folder: Path, env: dict[str, str]) -> float:
    """User + system CPU seconds of ``mutransfer ARGS`` run in ``folder``; the command must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", *args], cwd=folder, env=env, capture_output=True, text=True
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"mutransfer {' '.join(args)} failed: {done.stderr[-2000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def ui_seconds(folder: Path, env: dict[str, str]) -> float:
    """Busy CPU-seconds of the machine while `mutransfer ui` starts in ``folder``, prints its link, serves 10 s and
    is stopped (SIGTERM: it stops its server)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = busy_seconds()
    command = [sys.executable, "-m", "mutransfer.cli.main", "ui", "--port", str(port)]
    proc = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    if not proc.stdout.readline().startswith("MLflow UI: "):
        raise SystemExit("mutransfer ui printed no link")
    time.sleep(10)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    return busy_seconds() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each command (default 3)")
    parser.add_argument(
        "--only", choices=("--version", "trials", "sweep in process", "ui"), help="run only this one (default: all)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="command-cpu-") as work:
        root = Path(work)
        data = write_tiny_data(root / "burgers_tiny.h5")
        env = dict(os.environ, MUTRANSFER_CACHE=str(root / "cache"), MLFLOW_DISABLE_TELEMETRY="true")
        env.update(RAY_USAGE_STATS_ENABLED="0", TQDM_DISABLE="1")

        def sweep(folder: Path) -> list[str]:
            folder.mkdir()
            return ["sweep", "--study", str(write_tiny_study(folder, data)), "--executor", "inprocess", "--json"]

        warm = root / "warm"
        cpu_seconds(sweep(warm), warm, env)  # the cache as a user's is after a first study
        commands = {
            "--version": lambda i: cpu_seconds(["--version"], root, env),
            "trials": lambda i: cpu_seconds(["trials", "tiny"], warm, env),
            "sweep in process": lambda i: cpu_seconds(sweep(root / f"round{i}"), root / f"round{i}", env),
            "ui": lambda i: ui_seconds(warm, env),
        }
        if args.only:
            commands = {args.only: commands[args.only]}
        figures: dict[str, list[float]] = {name: [] for name in commands}
        for i in range(args.rounds):
            for name, command in commands.items():
                figures[name].append(command(i))
            print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in figures.items()), flush=True)
    print("CPU-s, mean (95 % t interval): " + ", ".join(f"{k} {summary(v, digits=2)}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
