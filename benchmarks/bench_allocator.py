"""What the allocator default buys: an FNO training step as the product's processes now run it.

Three ways to start the same process, interleaved round by round:

* ``product``: a plain environment, started the way the ``mutransfer`` command starts
  (``mutransfer.cli.launch.restart_tuned``: it re-executes itself under the tuned
  allocator) — what a user gets now;
* ``untuned``: the same with ``MUTRANSFER_TUNED_ALLOCATOR=0`` — glibc's defaults, what a
  user got before;
* ``by hand``: ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2^36`` set by the caller, as
  docs/benchmarks.md's "tuned" rows were measured.

Each start times ``--steps`` training steps (zero_grad, forward, MSE, backward, Adam)
after ``--warmup`` untimed ones and reports the median step in ms and the minor page
faults per step. The configurations are docs/benchmarks.md's 1D/2D/3D ones.

    python benchmarks/bench_allocator.py --rounds 3 --out docs/results/allocator.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from mutransfer._allocator import TUNED_ENV

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = {  # dim: (grid, modes, width, batch), docs/benchmarks.md's step configurations
    1: ((1024,), 16, 64, 20),
    2: ((64, 64), 12, 32, 20),
    3: ((32, 32, 16), 8, 20, 2),
}
MODES = {
    "product": {},
    "untuned": {"MUTRANSFER_TUNED_ALLOCATOR": "0"},
    "by hand": TUNED_ENV,
}


def child(dim: int, steps: int, warmup: int, threads: int) -> None:
    """In the started process: restart as the command would, then time the steps; print one JSON line."""
    from mutransfer.cli.launch import restart_tuned

    restart_tuned()
    import resource
    import time

    import torch

    from operators.fno import FNO

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    grid, modes, width, batch = CONFIGS[dim]
    model = FNO(dim=dim, in_channels=1, out_channels=1, modes=modes, width=width, layers=4)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    x, y = torch.randn(batch, *grid, 1), torch.randn(batch, *grid, 1)

    def step():
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    times, faults = [], []
    for _ in range(steps):
        before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        step()
        times.append(1000 * (time.perf_counter() - start))
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    env = {k: os.environ.get(k) for k in TUNED_ENV}
    print(json.dumps({"ms": statistics.median(times), "faults": statistics.median(faults), "env": env}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", default="1,2,3")
    parser.add_argument("--rounds", type=int, default=3, help="starts per way and dimension, interleaved")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.warmup, args.threads)
        return
    base = {k: v for k, v in os.environ.items() if k not in TUNED_ENV}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    rows = []
    for dim in [int(d) for d in args.dims.split(",")]:
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for round_ in range(args.rounds):
            order = list(MODES) if round_ % 2 == 0 else list(reversed(MODES))
            for mode in order:
                command = [sys.executable, __file__, "--child", str(dim), "--steps", str(args.steps)]
                command += ["--warmup", str(args.warmup), "--threads", str(args.threads)]
                out = subprocess.run(command, env={**base, **MODES[mode]}, capture_output=True, text=True, check=True)
                runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
        row = {"dim": dim, "config": dict(zip(("grid", "modes", "width", "batch"), CONFIGS[dim], strict=True))}
        for mode, found in runs.items():
            row[mode] = {
                "ms": [round(r["ms"], 1) for r in found],
                "faults": [r["faults"] for r in found],
                "env": found[0]["env"],
            }
        med = {mode: statistics.median(row[mode]["ms"]) for mode in MODES}
        row["product / by hand"] = round(med["product"] / med["by hand"], 3)
        row["untuned / product"] = round(med["untuned"] / med["product"], 3)
        rows.append(row)
        print(
            f"{dim}D: median step ms product {med['product']:.1f} (faults {statistics.median(row['product']['faults']):.0f}), "
            f"by hand {med['by hand']:.1f}, untuned {med['untuned']:.1f} "
            f"(faults {statistics.median(row['untuned']['faults']):.0f}); product/by hand {row['product / by hand']}, "
            f"untuned/product {row['untuned / product']}",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps({"threads": args.threads, "steps": args.steps, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
