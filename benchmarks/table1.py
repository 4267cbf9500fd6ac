"""The paper's Table 1 at CPU scale: μTransfer (proxy sweep + one target) vs direct tuning, over study seeds.

For each study seed s the study file is copied with ``search.seed = training.seed = s``
and a name ending ``-s<s>``, and run through the real CLI:

    mutransfer sweep --study <copy> --baseline direct [--verify ...] --json

(local Ray, a sqlite MLflow store in --out). The per-seed reports are kept in
``--out/reports/``; the summary (mean ± sample std over seeds, and each seed) goes to
``--out/table1.json`` and is printed as a Markdown table:

- test error of μTransfer's target and of direct tuning's winner, and their ratio;
- the proxy → target gain (best proxy error / target error);
- cost ratios μTransfer / direct in device-seconds, training time (trainer seconds ×
  devices, overhead left out) and FLOPs;
- with ``--verify``: the distance of the target's own optimum from the transferred LR.

Usage:
    python benchmarks/table1.py --study studies/quick.yaml --seeds 0 1 2 --out results/table1-quick-cheap
    python benchmarks/table1.py --study tests/studies/quick_k_only.yaml --seeds 0 1 2 --out results/table1-burgers --verify
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from mutransfer._diagnostics.statistics import mean_ci


def seeded_study(path: Path, seed: int, out: Path) -> Path:
    study = yaml.safe_load(path.read_text())
    study["name"] = f"{study['name']}-s{seed}"
    study.setdefault("search", {})["seed"] = seed
    study.setdefault("training", {})["seed"] = seed
    target = out / "studies" / f"{study['name']}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(study, sort_keys=False))
    return target


def run_one(study: Path, out: Path, verify: bool, verify_points: int, verify_seeds: int) -> dict:
    command = [
        sys.executable,
        "-m",
        "mutransfer",
        "sweep",
        "--study",
        str(study),
        "--baseline",
        "direct",
        "--runs-dir",
        str(out / "runs"),
        "--tracking-uri",
        f"sqlite:///{(out / 'mlflow.db').absolute()}",
        "--json",
    ]
    if verify:
        command += ["--verify", "--verify-points", str(verify_points), "--verify-seeds", str(verify_seeds)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{study.name}: sweep failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def row(report: dict) -> dict:
    d = report["direct_baseline"]
    r = d["mutransfer_vs_direct"]
    out = {
        "study": report["study"],
        # on the split the study selected on (validation since selection moved off the test split; older
        # table1 JSONs hold test errors here)
        "proxy_error": (report.get("proxy_to_target") or {}).get("proxy_error"),
        "mutransfer_error": report["target"]["test_error"],
        "direct_error": d["test_error"],
        "error_ratio": r["error"],
        "gain": (report.get("proxy_to_target") or {}).get("gain"),
        "device_seconds_ratio": r["device_seconds"],
        "training_seconds_ratio": r["trainer_device_seconds"],
        "flops_ratio": r["flops"],
        "mutransfer_device_seconds": d["mutransfer"]["device_seconds"],
        "direct_device_seconds": d["cost"]["device_seconds"],
        "mutransfer_flops": d["mutransfer"]["flops"],
        "direct_flops": d["cost"]["flops"],
        "transferred_lr": report["target_hyperparameters"]["lr"],
        "sweep_wall_seconds": report["compute"].get("sweep_wall_seconds"),
        "overheads": report["compute"].get("overheads"),  # mutransfer._sweep.overheads
        "fixed_overhead_share": (report["compute"].get("overheads") or {}).get("fixed_share"),
        "direct_best_config": d["best_config"],
        "same_configuration": all(
            abs(float(d["best_config"][k]) - float(v)) <= 1e-9 * abs(float(v))
            for k, v in report["best_proxy"]["config"].items()
        ),
    }
    v = report.get("verification")
    if v:
        out["verify_distance_decades"] = None if v["distance_decades"] is None else v["distance_decades"]["mean"]
        out["verify_regret"] = None if v["regret"] is None else v["regret"]["mean"]
        out["verify_at_edge"] = v["at_edge"]
    return out


def summarize(rows: list[dict]) -> dict:
    keys = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    out = {}
    for k in keys:
        values = np.array([r[k] for r in rows if r.get(k) is not None], float)
        if values.size:
            out[k] = {
                "mean": float(values.mean()),
                "std": float(values.std(ddof=1)) if values.size > 1 else 0.0,
                "n": int(values.size),
                "ci": mean_ci(values).ci,  # 95 % Student-t over the study seeds (None bounds with one seed)
            }
    return out


def markdown(summary: dict, n: int) -> str:
    def f(k, fmt=".4g"):
        s = summary.get(k)
        if s is None:
            return "-"
        lo, hi = s.get("ci") or (None, None)
        interval = "" if lo is None or hi is None else f" [{lo:{fmt}}, {hi:{fmt}}]"
        return f"{s['mean']:{fmt}} ± {s['std']:{fmt}}{interval}"

    lines = [
        f"| quantity ({n} study seeds, mean ± std [95 % t CI]) | value |",
        "|---|---|",
        f"| direct tuning chose μTransfer's configuration | {summary.get('same_configuration_count', 0)} of {n} seeds |",
    ]
    for k, label in (
        ("proxy_error", "best proxy test error"),
        ("mutransfer_error", "μTransfer target test error"),
        ("direct_error", "direct tuning test error"),
        ("error_ratio", "error μTransfer / direct"),
        ("gain", "proxy → target gain (proxy error / target error)"),
        ("device_seconds_ratio", "cost μTransfer / direct, device-seconds"),
        ("training_seconds_ratio", "cost μTransfer / direct, training time"),
        ("flops_ratio", "cost μTransfer / direct, FLOPs"),
        ("fixed_overhead_share", "fixed overheads / the study's wall time (with the baseline)"),
        ("verify_distance_decades", "--verify: target optimum − transferred LR, decades"),
        ("verify_regret", "--verify: regret at the transferred LR"),
    ):
        lines.append(f"| {label} | {f(k, '.3g')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--verify-points", type=int, default=5)
    parser.add_argument("--verify-seeds", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reports").mkdir(exist_ok=True)
    rows = []
    for seed in args.seeds:
        path = args.out / "reports" / f"s{seed}.json"
        if path.exists():  # re-running continues where it stopped
            report = json.loads(path.read_text())
        else:
            report = run_one(
                seeded_study(args.study, seed, args.out), args.out, args.verify, args.verify_points, args.verify_seeds
            )
            path.write_text(json.dumps(report, indent=2))
        rows.append(row(report))
        print(json.dumps(rows[-1]), flush=True)
    summary = summarize(rows)
    summary["same_configuration_count"] = sum(bool(r["same_configuration"]) for r in rows)
    (args.out / "table1.json").write_text(
        json.dumps({"study": str(args.study), "seeds": args.seeds, "rows": rows, "summary": summary}, indent=2)
    )
    print(markdown(summary, len(rows)))


if __name__ == "__main__":
    main()
