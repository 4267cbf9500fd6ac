"""Accuracy on record: each operator trained on the project's Darcy data, next to the papers' numbers.

Runs `mutransfer train --json` once per operator (argument lists, no shell) on the
cached default Darcy dataset (generated at 61x61, trained at 31x31, 400 train /
100 test) and prints a Markdown table of relative L2 test errors, seconds and
parameter counts. Results go to docs/operators.md by hand, with the command.

    OMP_NUM_THREADS=1 python benchmarks/bench_darcy_accuracy.py --out /tmp/accuracy.json

Use --only to run a subset, --epochs-scale to shorten every run (e.g. 0.1 for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

#: the papers' Darcy relative L2 errors (FNO paper s=85; Galerkin Table; GNOT Table 2; ONO Table 2)
PAPER = {"fno": 1.08e-2, "galerkin": 8.4e-3, "gnot": 1.05e-2, "ono": 7.6e-3}

RUNS = {
    "fno": [
        "--operator",
        "fno",
        "--modes",
        "12",
        "--width",
        "32",
        "--layers",
        "4",
        "--lr",
        "3e-3",
        "--batch-size",
        "20",
        "--schedule",
        "step",
        "--epochs",
        "100",
    ],
    "galerkin": [
        "--operator",
        "galerkin",
        "--width",
        "64",
        "--layers",
        "4",
        "--heads",
        "4",
        "--lr",
        "1e-3",
        "--batch-size",
        "10",
        "--schedule",
        "onecycle",
        "--epochs",
        "60",
    ],
    "ono": [
        "--operator",
        "ono",
        "--width",
        "64",
        "--layers",
        "4",
        "--heads",
        "4",
        "--lr",
        "1e-3",
        "--batch-size",
        "10",
        "--schedule",
        "onecycle",
        "--epochs",
        "40",
    ],
    "gnot": [
        "--operator",
        "gnot",
        "--width",
        "32",
        "--layers",
        "3",
        "--heads",
        "4",
        "--lr",
        "1e-3",
        "--batch-size",
        "10",
        "--schedule",
        "onecycle",
        "--epochs",
        "40",
    ],
}


def run_one(name: str, epochs_scale: float) -> dict:
    args = list(RUNS[name])
    i = args.index("--epochs")
    args[i + 1] = str(max(1, round(int(args[i + 1]) * epochs_scale)))
    cmd = [sys.executable, "-m", "mutransfer.cli.main", "train", "--problem", "darcy", "--json", "--no-progress", *args]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout)
    return {
        "operator": name,
        "command": "mutransfer train --problem darcy " + " ".join(args),
        "test_error": summary["result"]["test_error"],
        "best_test_error": summary["result"]["best_test_error"],
        "epochs": summary["result"]["epochs_completed"],
        "train_seconds": summary["result"]["seconds"],
        "wall_seconds": time.perf_counter() - start,
        "grid": summary["grid"],
        "n_train": summary["n_train"],
        "n_test": summary["n_test"],
        "paper": PAPER[name],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(RUNS), default=list(RUNS))
    parser.add_argument("--epochs-scale", type=float, default=1.0)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    rows = []
    for name in args.only:
        rows.append(run_one(name, args.epochs_scale))
        print(json.dumps(rows[-1]), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=2)
    print("| operator | ours: test rel. L2 | paper | epochs | train s | grid | train/test |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        grid = "x".join(map(str, r["grid"]))
        print(
            f"| {r['operator']} | {r['test_error']:.4f} | {r['paper']:.2e} | {r['epochs']} | {r['train_seconds']:.0f} | "
            f"{grid} | {r['n_train']}/{r['n_test']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
