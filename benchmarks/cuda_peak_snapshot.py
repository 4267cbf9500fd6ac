"""What is alive on the GPU at the peak of one training step: the allocations made during the step,
grouped by size in units of one layer activation (E = batch * width * padded grid points), with the
Python frame that made them. A diagnostic of the planner's misses (docs/benchmarks.md, "Memory on a GPU").

    python benchmarks/cuda_peak_snapshot.py --dim 2 --grid 64 --modes 12 --width 64 --batch 20 --padding 5 --precision bf16
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mutransfer._training.precision import Precision, training_step  # noqa: E402
from operators import FNO, optimizer_param_groups  # noqa: E402
from operators.planning import plan_fno  # noqa: E402


def _frame(frames: list[dict]) -> str:
    for f in frames:
        name = str(f.get("filename", ""))
        if "/operators/" in name or "/mutransfer/" in name:
            return f"{Path(name).name}:{f.get('line')} {f.get('name')}"
    return f"{frames[0].get('name')}" if frames else "(no python frame: autograd's backward)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=2)
    parser.add_argument("--grid", type=int, default=64)
    parser.add_argument("--modes", type=int, default=12)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--padding", type=int, default=5)
    parser.add_argument("--precision", default="bf16")
    args = parser.parse_args()
    grid = (args.grid,) * args.dim
    device = torch.device("cuda")
    with device:
        model = FNO(args.dim, 1, 1, modes=args.modes, width=args.width, layers=4, padding=args.padding)
    optimizer = torch.optim.Adam(optimizer_param_groups(model, 1e-4))
    amp = Precision(args.precision, device)
    x = torch.randn(args.batch, *grid, 1, device=device)
    y = torch.randn(args.batch, *grid, 1, device=device)
    for _ in range(2):
        training_step(model, optimizer, amp, x, y)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    training_step(model, optimizer, amp, x, y)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snapshot["device_traces"][0]
    live: dict[int, tuple[int, list[dict]]] = {}
    current = peak = peak_at = 0
    for i, event in enumerate(trace):
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], event.get("frames", []))
            current += event["size"]
        elif event["action"] == "free_completed" and event["addr"] in live:
            current -= live.pop(event["addr"])[0]
        if current > peak:
            peak, peak_at = current, i
    live.clear()
    for event in trace[: peak_at + 1]:
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], event.get("frames", []))
        elif event["action"] == "free_completed":
            live.pop(event["addr"], None)
    unit = args.batch * args.width * math.prod(n + args.padding for n in grid)
    plan = plan_fno(
        args.dim, args.modes, args.width, 4, grid=grid, batch=args.batch, padding=args.padding, precision=args.precision
    )
    mib = 2**20
    print(
        f"before the step {base / mib:.1f} MiB; peak {torch.cuda.max_memory_allocated() / mib:.1f} MiB; plan {plan.total_bytes / mib:.1f} MiB"
    )
    print(
        f"allocated during the step and alive at its peak: {peak / mib:.1f} MiB (event {peak_at} of {len(trace)}); E = {unit * 4 / mib:.1f} MiB at 4 bytes"
    )
    groups: Counter[tuple[str, float]] = Counter()
    for size, frames in live.values():
        groups[(_frame(frames), round(size / unit, 2))] += size
    for (frame, per_unit), total in groups.most_common(25):
        print(f"  {total / mib:9.1f} MiB  {per_unit:6.2f} B/E-elem  {frame}")


if __name__ == "__main__":
    main()
