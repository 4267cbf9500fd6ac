"""Wall time of the quick study, two source trees interleaved; and whether their reports have the same fields.

For a refactor: ``--before DIR`` is a checkout of the old code (e.g. ``git worktree add /tmp/before <commit>``),
``--after DIR`` the new one (default: this repository). Each round runs
``python -m mutransfer.cli.main sweep --proxy-K 6 --target-K 24 --json`` once from each tree (the order
alternates), in a fresh working directory with a shared, pre-generated data cache, with
``PYTHONPATH=<tree>`` so the tree's own code runs (Ray workers inherit it). Prints each run's wall time,
the medians, and the report keys that one tree has and the other has not (recursively, values ignored).

    python benchmarks/bench_sweep_wall.py --before /tmp/before --rounds 3 --json sweep_wall.json
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


def keys_of(value, prefix: str = "") -> set[str]:
    """Every key path of a JSON value ("compute.proxy_flops", "trial_table[].status", …)."""
    out = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(prefix + k)
            out |= keys_of(v, prefix + k + ".")
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        out |= keys_of(value[0], prefix.rstrip(".") + "[].")
    return out


def run_once(tree: Path, cache: Path, extra: list[str]) -> tuple[float, dict]:
    work = Path(tempfile.mkdtemp(prefix="sweep-wall-"))
    env = dict(
        os.environ,
        PYTHONPATH=str(tree),
        MUTRANSFER_CACHE=str(cache),
        MLFLOW_DISABLE_TELEMETRY="true",
        RAY_USAGE_STATS_ENABLED="0",
    )
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--proxy-K", "6", "--target-K", "24", "--json", *extra],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return wall, json.loads(proc.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="source tree of the old code")
    p.add_argument("--after", default=str(Path(__file__).resolve().parents[1]), help="source tree of the new code")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cache", default=None, help="data cache shared by all runs (default: a temporary one)")
    p.add_argument("--json", help="write the times and the key differences here")
    p.add_argument("extra", nargs="*", help="more sweep flags, after --")
    args = p.parse_args(argv)
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    cache = Path(args.cache or tempfile.mkdtemp(prefix="sweep-wall-cache-"))
    run_once(trees["after"], cache, args.extra)  # generates and caches the data, warms the OS caches
    times: dict[str, list[float]] = {"before": [], "after": []}
    reports = {}
    for r in range(args.rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            wall, report = run_once(trees[name], cache, args.extra)
            times[name].append(wall)
            reports[name] = report
            print(f"round {r + 1} {name:6s} {wall:6.1f} s", flush=True)
    before_keys, after_keys = keys_of(reports["before"]), keys_of(reports["after"])
    result = {
        "times": times,
        "median": {k: statistics.median(v) for k, v in times.items()},
        "only_before": sorted(before_keys - after_keys),
        "only_after": sorted(after_keys - before_keys),
    }
    print(f"median: before {result['median']['before']:.1f} s, after {result['median']['after']:.1f} s")
    print(f"report keys only before: {result['only_before'] or 'none'}; only after: {result['only_after'] or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
