"""The default study one trial at a time and as populations: proxy phase, wall time and the muTransfer/direct ratio.

    python benchmarks/population_study.py [--json docs/results/population_study.json] [--windows 2 8]
    python benchmarks/population_study.py --windows 8 --seeds 0 1 2 --baseline --json docs/results/population_baseline.json
    python benchmarks/population_study.py --study studies/table1_darcy_cheaper_cpu.yaml --windows 8 --json ...
    python benchmarks/population_study.py --windows 8 --executors population ray-population --json ...

Runs ``mutransfer sweep`` on the default study (studies/quick.yaml) with ``--executor inprocess`` and ``--executor
population`` (``--executors``: others, e.g. ``ray-population``), once per search window (``search.max_concurrent``: 2 as written, and 8, where all eight trials train at
once), each in a fresh folder and MLflow store, one after the other in subprocesses. Reports per run: the sweep's wall
time, the proxy phase's seconds, the proxies' training seconds, the target's wall seconds, the report's
``mutransfer_vs_direct_training_seconds`` (the study's training time over the estimated cost of tuning the target
directly: the trials' epochs at the target's measured seconds per epoch), the winner and the target's test error.
One run each (no seeds varied): the figures of one quiet 2-core machine. Run it on a quiet machine.

``--seeds S …`` runs each configuration once per search seed (``search.seed``); ``--baseline`` adds ``--baseline
direct`` (the same search at the target's size, run on the same executor, and its winner's target), whose measured
ratios (test error, training device-seconds, wall device-seconds) are recorded per run, with the wall time of the
direct arm (its search and its winner's training) against the rest of the sweep (setup, proxies, target, report):
``mutransfer_vs_direct_wall``, which leans towards direct tuning (its arm pays no setup or report of its own).
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

import yaml

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "quick.yaml"


def _run(
    folder: Path, window: int, executor: str, env: dict, seed: int | None, baseline: bool, source: Path = STUDY
) -> dict:
    study = yaml.safe_load(source.read_text())
    study["search"]["max_concurrent"] = window
    study["name"] = f"{study['name']}-w{window}-{executor}"
    if seed is not None:
        study["search"]["seed"] = seed
        study["name"] += f"-s{seed}"
    path = folder / f"{study['name']}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mutransfer", "sweep", "--study", str(path), "--executor", executor, "--json"]
        + (["--baseline", "direct"] if baseline else []),
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    report = json.loads(done.stdout)
    c = report["compute"]
    baseline = report.get("direct_baseline") or {}
    direct = baseline.get("mutransfer_vs_direct")
    # the direct arm's own wall time (its search and its winner's training, in this command); everything else the
    # command's sweep did (setup, proxies, target, model, report) is muTransfer's: the direct arm is spared the
    # setup and the report it would pay on its own, so the wall ratio below leans towards direct tuning
    direct_wall = (baseline.get("cost") or {}).get("wall_seconds")
    mutransfer_wall = None if direct_wall is None else c["sweep_wall_seconds"] - direct_wall
    return {
        "window": window,
        "executor": executor,
        "seed": seed,
        "baseline_direct": direct,
        "direct_wall_seconds": None if direct_wall is None else round(direct_wall, 2),
        "mutransfer_wall_seconds": None if mutransfer_wall is None else round(mutransfer_wall, 2),
        "mutransfer_vs_direct_wall": None if direct_wall is None else round(mutransfer_wall / direct_wall, 3),
        "command_wall_seconds": round(wall, 2),
        "sweep_wall_seconds": round(c["sweep_wall_seconds"], 2),
        "proxy_phase_seconds": round(c["proxy_phase_seconds"], 2),
        "proxy_trainer_seconds": round(c["proxy_trainer_seconds"], 2),
        "target_wall_seconds": round(c["target_wall_seconds"], 2),
        "mutransfer_vs_direct_training_seconds": round(c["mutransfer_vs_direct_training_seconds"], 3),
        "best_trial": report["best_proxy"]["trial_id"],
        "target_test_error": report["target"]["test_error"],
        "trials": [[t["trial_id"], t["status"], t["epochs"], t["val_error"]] for t in report["trial_table"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--windows", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--seeds", type=int, nargs="+", default=[None])
    parser.add_argument("--baseline", action="store_true", help="add --baseline direct to every run")
    parser.add_argument("--study", type=Path, default=STUDY, help="the study file (default: studies/quick.yaml)")
    parser.add_argument(
        "--executors", nargs="+", default=["inprocess", "population"], help="default: inprocess population"
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="population-study-") as tmp:
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            MLFLOW_DISABLE_TELEMETRY="true",
            RAY_USAGE_STATS_ENABLED="0",
            TQDM_DISABLE="1",
            MUTRANSFER_CACHE=os.environ.get("MUTRANSFER_CACHE", str(Path(tmp) / "cache")),
        )
        for seed in args.seeds:
            for window in args.windows:
                for executor in args.executors:
                    folder = Path(tmp) / f"w{window}-{executor}-s{seed}"
                    folder.mkdir()
                    row = _run(folder, window, executor, env, seed, args.baseline, args.study.resolve())
                    rows.append(row)
                    print(
                        f"seed {seed}, window {window}, {executor:10s}: baseline {row['baseline_direct']}, sweep {row['sweep_wall_seconds']:6.1f} s, proxy phase "
                        f"{row['proxy_phase_seconds']:5.1f} s, target {row['target_wall_seconds']:5.1f} s, muTransfer/direct "
                        f"(training s) {row['mutransfer_vs_direct_training_seconds']:.3f}, winner {row['best_trial']}, "
                        f"target error {row['target_test_error']:.5f}"
                    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"command": " ".join(["python benchmarks/population_study.py", *sys.argv[1:]]), "runs": rows}, indent=1
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
