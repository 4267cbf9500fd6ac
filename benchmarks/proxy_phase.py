"""How the default study's proxy phase uses its two slots: trial processes, worker processes started, wall time.

    python benchmarks/proxy_phase.py            # about 4 minutes on 2 cores, nothing else running

Runs ``mutransfer sweep`` on the embedded defaults (the default study, no baseline) ``--rounds`` times for
each of two windows of the search plan (mutransfer._sweep.plan: trial i is handed out once trials 0 … i-w have
finished):

- ``w = concurrency`` (the product's rule, 2 on this machine);
- ``w = concurrency + 1`` (an experiment: ``mutransfer._sweep.proxies._plan`` is given one more, so a slot
  waits only when two older trials are unfinished; ASHA and the sampler then see one result fewer).

While each study runs, every process's command line is sampled from ``/proc`` every 0.2 s. Printed per run:
the proxy phase's wall seconds and the part outside the trials' own spans (Tune's loop, the trial actors' start,
idle slots: ``compute.overheads.proxy_scheduling_seconds``
of the report), the proxies' epochs and trainer seconds, the distinct processes the trials trained in (their
``executions.jsonl``), and the Ray worker processes that were started during the proxy phase and never
trained a trial (Tune 2.x ends a trial actor when no trial is waiting for it, and starts a new process for
the next trial: docs/results.md, "Cheap proxies on three problems").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

from mutransfer._sweep import proxies
from mutransfer.cli.main import main as cli_main


def ray_workers(seen: dict[int, float], stop: threading.Event) -> None:
    """Record {pid: first seen (epoch seconds)} of every Ray worker process (``default_worker.py`` or ``ray::``)."""
    while not stop.is_set():
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in seen:
                continue
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "default_worker.py" in cmd or cmd.startswith("ray::"):
                seen[int(entry)] = time.time()
        stop.wait(0.2)


def sweep_with_window(extra_window: int) -> int:
    """The default study in this process (the working directory), its plan's window ``extra_window`` larger."""
    original = proxies._plan

    def widened(ctx, concurrency: int):
        return original(ctx, concurrency + extra_window)

    with mock.patch.object(proxies, "_plan", widened):
        return cli_main(["sweep", "--proxy-K", "6", "--target-K", "24", "--json"])


def one_run(extra_window: int) -> dict:
    """One study in a child process of its own (a fresh Ray each time), sampled from here."""
    seen: dict[int, float] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=ray_workers, args=(seen, stop), daemon=True)
    with tempfile.TemporaryDirectory() as folder:
        sampler.start()
        try:
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--child", str(extra_window)],
                cwd=folder,
                capture_output=True,
                text=True,
            )
        finally:
            stop.set()
            sampler.join()
        if proc.returncode != 0:
            raise SystemExit(f"the sweep ended with exit code {proc.returncode}: {proc.stderr[-2000:]}")
        study = Path(folder) / "mutransfer-runs" / "quick"
        report = json.loads((study / "report.json").read_text())
        window = json.loads((study / "state.json").read_text()).get("search_window")
        starts = [
            json.loads(line)
            for executions in (study / "trials").glob("*/executions.jsonl")
            for line in executions.read_text().splitlines()
            if line.strip()
        ]
    trial_pids = {s["pid"] for s in starts}
    compute = report["compute"]
    # from the first trial's start to 2 s after the last one's (before the target's Ray Train actors)
    begin = min(s["time"] for s in starts) - 1.0
    end = max(s["time"] for s in starts) + 2.0
    started = {pid for pid, at in seen.items() if begin <= at <= end}
    return {
        "window": window,
        "proxy_phase_s": compute["proxy_phase_seconds"],
        "scheduling_s": compute["overheads"]["proxy_scheduling_seconds"],
        "proxy_epochs": sum(int(t["epochs"]) for t in report["trial_table"]),
        "proxy_trainer_s": compute["proxy_trainer_seconds"],
        "trial_processes": len(trial_pids),
        "idle_workers": len(started - trial_pids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs of each window, interleaved")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        raise SystemExit(sweep_with_window(args.child))
    for r in range(args.rounds):
        for extra in (0, 1):
            row = one_run(extra)
            label = "w = concurrency" if extra == 0 else "w = concurrency + 1"
            print(
                f"round {r + 1} {label}: proxy phase {row['proxy_phase_s']:.1f} s "
                f"({row['scheduling_s']:.1f} s outside the trials' spans), {row['proxy_epochs']} epochs, "
                f"trainers {row['proxy_trainer_s']:.1f} s; trials trained in {row['trial_processes']} processes; "
                f"{row['idle_workers']} more worker processes started in the phase and never trained a trial "
                f"(window {row['window']})",
                flush=True,
            )


if __name__ == "__main__":
    main()
