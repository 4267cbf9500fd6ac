"""The CPU a tiny sweep on a local Ray costs, the whole machine's: what every Ray test of the suite pays per study.

Each round runs ``python -m mutransfer.cli.main sweep --study tiny.yaml --json`` (the study of
``tests/sweep_helpers.write_tiny_study``: 3 trials x 2 epochs, 2 at a time, a 2-epoch target of one CPU worker) in a
fresh folder and reads the machine's busy CPU-seconds from ``/proc/stat`` before and after (so Ray's servers,
workers and helper actors count, not only the driver): run it on a quiet machine. Prints each run's busy CPU-s,
wall seconds and the target's wall seconds (from its order), then the means with a 95 % t interval.

To compare two versions, run it with each one's code first on the path, e.g. an earlier commit's::

    git worktree add /tmp/before <commit>
    PYTHONPATH=/tmp/before python benchmarks/tiny_sweep_cpu.py --rounds 2
    python benchmarks/tiny_sweep_cpu.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
# tests.sweep_helpers: this checkout's, after the PYTHONPATH entries that name the version to measure
sys.path.insert(1 + len([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]), str(ROOT))

from tests.sweep_helpers import write_tiny_data, write_tiny_study  # noqa: E402


def busy_seconds() -> float:
    """The machine's busy CPU-seconds since boot (``/proc/stat``: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def run_once(data: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tiny-sweep-") as folder:
        return _sweep(Path(folder), data)


def _sweep(work: Path, data: Path) -> dict[str, float]:
    study = write_tiny_study(work, data)
    env = dict(os.environ, MUTRANSFER_CACHE=str(work / "cache"), MLFLOW_DISABLE_TELEMETRY="true")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    cmd = [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study), "--json"]
    busy, wall = busy_seconds(), time.perf_counter()
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    busy, wall = busy_seconds() - busy, time.perf_counter() - wall
    if done.returncode != 0:
        raise SystemExit(f"the sweep failed: {done.stderr[-2000:]}")
    target = json.loads(done.stdout)["target"]
    return {"busy_cpu_s": busy, "wall_s": wall, "target_wall_s": float(target["wall_seconds"])}


def summary(values: list[float], digits: int = 1) -> str:
    """The mean of ``values`` ± the half-width of its 95 % t interval (the mean alone for one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.{digits}f}"
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="sweeps to run (default 2)")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="tiny-data-") as folder:
        data = write_tiny_data(Path(folder) / "burgers_tiny.h5")
        for i in range(args.rounds):
            runs.append(run_once(data))
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()), flush=True)
    print("mean (95 % t interval): " + ", ".join(f"{k} {summary([r[k] for r in runs])}" for k in runs[0]))


if __name__ == "__main__":
    main()
