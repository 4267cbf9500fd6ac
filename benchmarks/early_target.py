"""What starting the target's Ray Train run while the last proxies train saves: the default study, alternating.

Each round runs the default study (``studies/quick.yaml``) twice, once with ``target.start_early: true`` (the
default) and once with ``false`` (the order alternates), each with
``python -m mutransfer.cli.main sweep --study <copy> --json`` in a fresh working directory with a shared,
pre-generated data cache. Prints, per run, the study's wall time, the target's start-up on the critical path
(its Ray Train wall time from the order, minus its trainer time), the head start (Ray Train's start-up that ran
beside the proxies), the proxies' trainer seconds (a start-up that competes for the cores slows the last trials),
the fixed overhead's share of the wall time and the target's test error (equal between arms:
the same study trains the same target); then each arm's mean, with the paired differences' mean and a 95 % t
interval over the rounds.

    python benchmarks/early_target.py --rounds 4 --json early_target.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]


def run_once(start_early: bool, cache: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix="early-target-"))
    study = yaml.safe_load((ROOT / "studies" / "quick.yaml").read_text())
    study["target"]["start_early"] = start_early
    path = work / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    env = dict(os.environ, MUTRANSFER_CACHE=str(cache), MLFLOW_DISABLE_TELEMETRY="true", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(path), "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise SystemExit(f"exit {proc.returncode}\n{proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    c, o = report["compute"], report["compute"]["overheads"]
    return {
        "start_early": start_early,
        "wall_seconds": c["sweep_wall_seconds"],
        "target_startup_seconds": o["target_startup_seconds"],
        "target_head_start_seconds": o.get("target_head_start_seconds", 0.0),
        "proxy_phase_seconds": c["proxy_phase_seconds"],
        "proxy_trainer_seconds": c["proxy_trainer_seconds"],
        "mutransfer_training_seconds": c["proxy_trainer_seconds"] + c["target_trainer_seconds"],
        "setup_seconds": o["setup_seconds"],
        "proxy_scheduling_seconds": o["proxy_scheduling_seconds"],
        "trial_startup_seconds": o["trial_startup_seconds"],
        "fixed_share": o["fixed_share"],
        "test_error": report["target"]["test_error"],
    }


def summary(runs: list[dict]) -> dict:
    early = [r for r in runs if r["start_early"]]
    late = [r for r in runs if not r["start_early"]]
    out: dict = {}
    for key in (
        "wall_seconds",
        "proxy_trainer_seconds",
        "mutransfer_training_seconds",
        "target_startup_seconds",
        "target_head_start_seconds",
        "proxy_phase_seconds",
        "fixed_share",
    ):
        diffs = [a[key] - b[key] for a, b in zip(early, late)]
        mean = statistics.fmean(diffs)
        half = (
            stats.t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / len(diffs) ** 0.5
            if len(diffs) > 1
            else float("nan")
        )
        out[key] = {
            "early_mean": statistics.fmean(r[key] for r in early),
            "late_mean": statistics.fmean(r[key] for r in late),
            "difference_mean": mean,
            "difference_95ci": [float(mean - half), float(mean + half)],
        }
    out["same_test_error"] = all(a["test_error"] == b["test_error"] for a, b in zip(early, late))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("MUTRANSFER_CACHE", ROOT / ".cache")))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs = []
    for i in range(args.rounds):
        for start_early in (True, False) if i % 2 == 0 else (False, True):
            runs.append(run_once(start_early, args.cache))
            print(json.dumps(runs[-1]), flush=True)
    result = {"runs": runs, "summary": summary(runs), "cpu_count": os.cpu_count()}
    print(json.dumps(result["summary"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
