"""The data-aware K rule against the paper's, measured by `sweep --verify` (issue "Verdicts you can trust", item 5).

For each dataset (smooth Burgers, initial field α = 2; rough Burgers, α = 0.6) and each K rule (``paper``:
operator.k_exponent 1, c(K) = 1/√(d·log K); ``data``: operator.k_exponent data, ρ measured on the training data
before the search, mutransfer._diagnostics.k_exponent), one real study runs end to end through the CLI:
``mutransfer sweep --study <file> --verify --verify-points P --verify-seeds S --json`` (local Ray, MLflow in
sqlite). Its ``--verify`` trains the target and the proxy on the same LR grid around the transferred LR with
S seeds each and reports the **transfer error** (target optimum − proxy optimum, decades, Welch's 95 % t
interval) and the **search gap**. A rule transfers better when its transfer error is smaller in magnitude;
the difference between the two rules' errors is given with Welch's interval over the seeds' optima.

    python benchmarks/k_rule_verify.py --out docs/results/k_rule_verify.json
    python benchmarks/k_rule_verify.py --table-from docs/results/k_rule_verify.json   # the table again

Everything (data, study files, study folders, MLflow store) goes under ``--work`` (default a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.verify_runs import (  # noqa: E402
    add_study_arguments,
    ci_text,
    make_burgers,
    run_verify_study,
    transfer_error_difference,
    verify_summary,
    work_folder,
)

#: dataset name -> the initial field's smoothness α of the Burgers generator (lower is rougher)
DATASETS = {"burgers": 2.0, "burgers_rough": 0.6}
#: K rule name -> operator.k_exponent
RULES = {"paper": 1.0, "data": "data"}


def make_data(work: Path, name: str, n: int) -> Path:
    return make_burgers(work, name, n, DATASETS[name])


def study_mapping(name: str, data: Path, rule: str, args) -> dict:
    return {
        "name": f"krule-{name}-{rule}",
        "problem": {
            "name": "burgers",
            "data": str(data),
            "resolution": 128,
            "n_train": args.n_train,
            "n_val": args.n_val,
            "n_test": args.n_test,
        },
        "operator": {"type": "fno", "width": 32, "layers": 4, "k_exponent": RULES[rule]},
        "parametrization": "mup",
        "proxy_K": args.modes[0],
        "target_K": args.modes[1],
        "search_space": {
            "lr": {"type": "loguniform", "low": args.lr_range[0], "high": args.lr_range[1]},
        },
        "training": {"batch_size": 20, "schedule": "cosine", "seed": 0},
        "search": {"algorithm": "tpe", "num_trials": args.trials, "seed": 0, "max_concurrent": 2},
        "budget": {"epochs": args.epochs, "grace_period": args.epochs},
        "target": {"epochs": args.epochs},
    }


def run_one(work: Path, name: str, rule: str, args) -> dict:
    started = time.time()
    data = make_data(work, name, args.n_train + args.n_test)
    report = run_verify_study(work, study_mapping(name, data, rule, args), args.points, args.seeds)
    return {
        "dataset": name,
        "rule": rule,
        "k_exponent": report.get("k_exponent"),
        "k_rule": report.get("k_rule"),
        **verify_summary(report, started),
    }


def compare(rows: list[dict]) -> list[dict]:
    """Per dataset: the data rule's transfer error against the paper's (their difference with its interval)."""
    out = []
    for name in DATASETS:
        pair = {r["rule"]: r for r in rows if r["dataset"] == name}
        if set(pair) != set(RULES):
            continue
        te = {rule: (pair[rule]["transfer_error"] or {}) for rule in RULES}
        out.append(
            {
                "dataset": name,
                "paper": te["paper"],
                "data": te["data"],
                "rho": pair["data"]["k_exponent"],
                "difference": transfer_error_difference(pair["data"], pair["paper"]),
                "better": _better(te["paper"], te["data"]),
            }
        )
    return out


def _better(paper: dict, data: dict) -> str:
    """'data' / 'paper' when one rule's transfer-error interval excludes 0 and the other's does not, else
    'not resolved' (both intervals cover 0, or both exclude it)."""

    def resolved(e: dict) -> bool | None:
        lo, hi = e.get("ci") or (None, None)
        if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
            return None
        return lo > 0 or hi < 0

    rp, rd = resolved(paper), resolved(data)
    if rp is None or rd is None or rp == rd:
        return "not resolved"
    return "data" if rp else "paper"


def table(payload: dict) -> str:
    lines = [
        "| dataset | K rule | rho | transfer error, decades [95 % CI] | search gap, decades [95 % CI] | "
        "target optimum - transferred LR, decades | regret at the transferred LR (fraction) | target test rel. L2 | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["rows"]:
        rho = r["k_exponent"]
        lines.append(
            f"| {r['dataset']} | {r['rule']} | {rho if isinstance(rho, str) else f'{rho:.2f}'} | "
            f"{ci_text(r['transfer_error'])} | {ci_text(r['search_gap'])} | {ci_text(r.get('distance'))} | "
            f"{ci_text(r.get('regret'))} | {r['target_test_error']:.4f} | {r['seconds']:.0f} |"
        )
    lines.append("")
    for r in payload["rows"]:
        lines.append(f"- {r['dataset']}, {r['rule']}: {r['verdict']}")
    for c in payload.get("comparison", []):
        lines.append(
            f"- {c['dataset']} (rho = {c['rho']:.2f}): transfer error, data rule - paper rule: "
            f"{ci_text(c.get('difference'))} decades; the rule whose interval alone excludes 0: {c['better']}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", choices=tuple(DATASETS), default=list(DATASETS))
    p.add_argument("--rules", nargs="+", choices=tuple(RULES), default=list(RULES))
    p.add_argument("--modes", nargs=2, type=int, default=[2, 64], metavar=("K_PROXY", "K_TARGET"))
    add_study_arguments(p)
    args = p.parse_args(argv)
    if args.table_from:
        print(table(json.loads(args.table_from.read_text())))
        return 0
    work = work_folder(args, "k_rule_verify_")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    rows = []
    for name in args.datasets:
        for rule in args.rules:
            rows.append(run_one(work, name, rule, args))
            print(f"{name}/{rule}: {ci_text(rows[-1]['transfer_error'])} ({rows[-1]['seconds']:.0f} s)", flush=True)
    payload = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": rows,
        "comparison": compare(rows),
    }
    if args.out:
        args.out.write_text(json.dumps(payload, indent=2))
    print(table(payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
