"""Search strategies on the same study and seeds: single-proxy μTransfer, a model-size ladder, top-k, direct tuning, warm starts.

For each study seed s (``search.seed = training.seed = s``, as benchmarks/table1.py) every
arm runs the real CLI (local Ray, one sqlite MLflow store in --out):

- ``single``: ``mutransfer sweep --baseline direct``: the proxy search, the winner
  rescaled to the target and trained once; and the same search run directly at the
  target's size (the direct arm, measured in the same run);
- ``ladder``: ``--ladder SIZES --ladder-keep KEEP``: the same proxy search (same seed:
  the same trials), then the best KEEP of it trained again at each larger size;
- ``topk``: ``--top-k K``: the same proxy search, its K best each trained at the target,
  the winner chosen there;
- ``warm`` (with ``--warm``): the single arm's study, warm-started from the single arm of
  seed s+1 (``--warm-start <its folder>``); compared with the cold single arm of seed s
  by the number of proxy trials needed to reach a test error.

Per arm: the target's test error and μTransfer's cost (the proxies + the ladder's rungs +
every target training) in device-seconds and FLOPs. The summary (mean ± sample std over
seeds, and every seed) goes to ``--out/strategies.json`` and is printed as Markdown.
Reports are kept in ``--out/reports/<arm>-s<seed>.json``; re-running continues.

Usage:
    python benchmarks/search_strategies.py --study tests/studies/quick_k_only.yaml --seeds 0 1 2 \
        --ladder 6 12 --ladder-keep 0.25 --top-k 3 --warm --out results/strategies-burgers
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table1 import seeded_study, summarize  # noqa: E402


def run_arm(study: Path, name: str, flags: list[str], out: Path) -> dict:
    path = out / "reports" / f"{name}.json"
    if path.exists():  # re-running continues where it stopped
        return json.loads(path.read_text())
    command = [
        sys.executable,
        "-m",
        "mutransfer",
        "sweep",
        "--study",
        str(study),
        "--name",
        name,
        *flags,
        "--runs-dir",
        str(out / "runs"),
        "--tracking-uri",
        f"sqlite:///{(out / 'mlflow.db').absolute()}",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: sweep failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    report = json.loads(done.stdout)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    return report


def _targets(report: dict) -> list[dict]:
    """Every target training of a study: the top-k candidates, else the one target."""
    topk = report.get("top_k") or {}
    rows = topk.get("candidates") if isinstance(topk, dict) else topk
    return list(rows) if rows else [report["target"]]


def mutransfer_cost(report: dict) -> dict:
    """Device-seconds and FLOPs of the proxies, the ladder's rungs above them and every target training."""
    c = report["compute"]
    targets = _targets(report)
    per_target = (c.get("target_flops") or 0.0) / max(1, int(report["target"]["epochs"]))
    device = (
        c["proxy_device_seconds"]
        + (c.get("ladder_device_seconds") or 0.0)
        + sum(float(t.get("device_seconds") or 0.0) for t in targets)
    )
    flops = (
        (c.get("proxy_flops") or 0.0)
        + (c.get("ladder_flops") or 0.0)
        + sum(per_target * int(t.get("epochs") or report["target"]["epochs"]) for t in targets)
    )
    return {"device_seconds": device, "flops": flops, "target_trainings": len(targets)}


def trials_to_reach(report: dict, threshold: float) -> int | None:
    """Proxy trials, in key order, until one reached ``threshold`` (None: none did)."""
    for i, t in enumerate(report["trial_table"], start=1):
        if t.get("test_error") is not None and t["test_error"] <= threshold:
            return i
    return None


def arm_row(report: dict) -> dict:
    cost = mutransfer_cost(report)
    return {
        "study": report["study"],
        "target_error": report["target"]["test_error"],
        "best_proxy_error": report["best_proxy"]["test_error"],
        "transferred_lr": report["target_hyperparameters"]["lr"],
        **cost,
    }


def direct_row(report: dict) -> dict:
    d = report["direct_baseline"]
    return {
        "study": report["study"] + " (direct)",
        "target_error": d["test_error"],
        "device_seconds": d["cost"]["device_seconds"],
        "flops": d["cost"]["flops"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ladder", type=int, nargs="+", required=True)
    parser.add_argument("--ladder-keep", type=float, default=0.25)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--arms", nargs="+", default=["single", "ladder", "topk"], choices=["single", "ladder", "topk"])
    parser.add_argument("--warm", action="store_true", help="also warm-start each seed from the next seed's single arm")
    parser.add_argument(
        "--reports-from",
        type=Path,
        nargs="*",
        default=[],
        help="other --out folders whose reports (and single-arm study folders) count as this one's",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    flags = {
        "single": ["--baseline", "direct"],
        "ladder": ["--ladder", *map(str, args.ladder), "--ladder-keep", str(args.ladder_keep)],
        "topk": ["--top-k", str(args.top_k)],
    }
    studies = {s: seeded_study(args.study, s, args.out) for s in args.seeds}
    base = yaml.safe_load(args.study.read_text())["name"]
    reports: dict[str, dict[int, dict]] = {}
    for other in args.reports_from:  # arms run elsewhere (e.g. in parallel, each with its own store)
        for path in (other / "reports").glob("*.json"):
            target = args.out / "reports" / path.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(path.read_text())
    runs = [args.out / "runs", *(o / "runs" for o in args.reports_from)]
    for arm in args.arms:
        for s in args.seeds:
            reports.setdefault(arm, {})[s] = run_arm(studies[s], f"{base}-{arm}-s{s}", flags[arm], args.out)
            print(arm, s, json.dumps(arm_row(reports[arm][s])), flush=True)
    if args.warm:
        for i, s in enumerate(args.seeds):
            name = f"{base}-single-s{args.seeds[(i + 1) % len(args.seeds)]}"
            source = next((r / name for r in runs if (r / name).is_dir()), runs[0] / name)
            reports.setdefault("warm", {})[s] = run_arm(
                studies[s], f"{base}-warm-s{s}", ["--warm-start", str(source)], args.out
            )
    rows = {arm: [arm_row(r) for r in by_seed.values()] for arm, by_seed in reports.items()}
    if "single" in reports:
        rows["direct"] = [direct_row(r) for r in reports["single"].values()]
    summary = {arm: summarize(r) for arm, r in rows.items()}
    warm = warm_vs_cold(reports) if args.warm else None
    (args.out / "strategies.json").write_text(
        json.dumps(
            {
                "study": str(args.study),
                "seeds": args.seeds,
                "ladder": args.ladder,
                "ladder_keep": args.ladder_keep,
                "top_k": args.top_k,
                "rows": rows,
                "summary": summary,
                "warm_vs_cold": warm,
            },
            indent=2,
        )
    )
    print(markdown(summary, rows))
    if warm:
        print(json.dumps(warm, indent=2))


def warm_vs_cold(reports: dict) -> dict:
    """Proxy trials each study needed to reach the cold studies' median best error (and 1.1x it)."""
    cold, warm = reports["single"], reports["warm"]
    median = float(np.median([r["best_proxy"]["test_error"] for r in cold.values()]))
    out = {"cold_median_best_proxy_error": median}
    for label, threshold in (("median", median), ("1.1x_median", 1.1 * median)):
        out[label] = {
            f"s{s}": {
                "cold": trials_to_reach(cold[s], threshold),
                "warm": trials_to_reach(warm[s], threshold),
                "warm_trials": (warm[s].get("warm_start") or {}).get("trials"),
            }
            for s in warm
        }
    return out


def markdown(summary: dict, rows: dict) -> str:
    def f(arm, k, fmt=".3g"):
        s = summary.get(arm, {}).get(k)
        return "-" if s is None else f"{s['mean']:{fmt}} ± {s['std']:{fmt}}"

    lines = [
        "| arm | target test error | cost, device-seconds | cost, FLOPs | per seed (error) |",
        "|---|---|---|---|---|",
    ]
    for arm in rows:
        per_seed = ", ".join(f"{r['target_error']:.4g}" for r in rows[arm])
        lines.append(
            f"| {arm} | {f(arm, 'target_error', '.4g')} | {f(arm, 'device_seconds', '.0f')} | "
            f"{f(arm, 'flops')} | {per_seed} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
