"""How long a sweep takes to stop when Ctrl-C comes while its target trains, and whether it stops cleanly.

    python benchmarks/ctrl_c_target.py [RUNS]      # about 40 s a run on 2 cores (default 3 runs)

Each run: a tiny study (tests/sweep_helpers.write_tiny_study: 2 proxy trials of 2 epochs, a 60-epoch target) by
``mutransfer sweep --json`` on local Ray, SIGINT to the driver once the target has logged 3 epochs. Printed per run:
the driver's exit code (130 expected), the seconds from SIGINT to its exit, the epochs the target had logged when the
driver exited (the workers stop at their next epoch: mutransfer._sweep.target.STOP_FILE), and whether the stop file
was written. docs/robustness.md ("Ctrl-C while the target trains") quotes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sweep_helpers import write_tiny_data, write_tiny_study  # noqa: E402 -- after the path above


def one_run(folder: Path) -> tuple[int, float, int, bool]:
    data = write_tiny_data(folder / "burgers_tiny.h5")
    study = write_tiny_study(folder, data, name="ctrlc", trials=2, epochs=2, target_epochs=2)
    env = dict(os.environ, MUTRANSFER_CACHE=str(folder / "cache"), PYTHONFAULTHANDLER="1", RAY_USAGE_STATS_ENABLED="0")
    cmd = [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study), "--json"]
    proc = subprocess.Popen(
        [*cmd, "--target-epochs", "60"],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    progress = folder / "mutransfer-runs" / "ctrlc" / "target" / "progress.jsonl"
    while not (progress.exists() and len(progress.read_text().splitlines()) >= 3):
        if proc.poll() is not None:
            raise SystemExit(f"the sweep ended before its target trained: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    start = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=300)
    seconds = time.perf_counter() - start
    return proc.returncode, seconds, len(progress.read_text().splitlines()), (progress.parent / "stop").exists()


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for i in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            code, seconds, epochs, stop = one_run(Path(tmp))
        print(
            f"run {i + 1}: exit {code}, {seconds:.2f} s from SIGINT to exit, {epochs} epochs logged, stop file {stop}"
        )


if __name__ == "__main__":
    main()
