"""Time and peak memory of one forward+backward of the point-set operators against the number of points n.

Models (same width, layers and heads): the linear paths of the Galerkin
Transformer, ONO and GNOT, and the quadratic reference (the Galerkin
Transformer with ``attention_impl="quadratic"``, which forms the n×n matrix
Q Kᵀ/n). ``--quadratic-all`` adds the quadratic references of ONO and GNOT.

One step is: forward on (B, n) points, sum of the outputs, backward. Time:
median and IQR over ``--repeats`` steps after ``--warmup`` untimed ones.
Peak memory: measured in a separate, untimed step under the torch profiler
(``profile_memory=True``): the allocator events are replayed in time order
and the peak of the live bytes allocated during the step is reported (model
weights and inputs, allocated before the step, are not counted).

The machine is shared, so the script prints the load average before and after;
compare times within one run. Nothing here is a test; no timing is asserted.

    python benchmarks/bench_attention_scaling.py            # the table of docs/operators.md
    python benchmarks/bench_attention_scaling.py --sizes 256 1024 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from operators import GNOT, ONO, GalerkinTransformer

SIZES = (256, 512, 1024, 2048, 4096)


def build(name: str, args) -> torch.nn.Module:
    common = dict(width=args.width, layers=args.layers, heads=args.heads)
    kind, _, impl = name.partition("-")
    impl = impl or "linear"
    if kind == "galerkin":
        return GalerkinTransformer(2, 1, 1, attention_impl=impl, **common)
    if kind == "ono":
        return ONO(2, 1, 1, eigenfunctions=args.eigenfunctions, attention_impl=impl, **common)
    if kind == "gnot":
        return GNOT(2, 1, 1, experts=args.experts, attention_impl=impl, **common)
    raise ValueError(name)


def step(model, coords, features):
    model.zero_grad(set_to_none=True)
    model(coords, features).sum().backward()


def peak_bytes(model, coords, features) -> int | None:
    """Peak live bytes allocated during one step, from the profiler's allocator events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(model, coords, features)
    try:
        events = prof.profiler.kineto_results.events()
        allocations = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    except AttributeError:  # a torch without the raw kineto events
        return None
    live = peak = 0
    for _, nbytes in allocations:
        live += nbytes
        peak = max(peak, live)
    return peak


def time_steps(model, coords, features, repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        step(model, coords, features)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(model, coords, features)
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--eigenfunctions", type=int, default=16)
    parser.add_argument("--experts", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quadratic-all", action="store_true", help="also time ONO's and GNOT's quadratic references")
    parser.add_argument("--quadratic-max-n", type=int, default=4096, help="skip quadratic runs above this n")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    names = ["galerkin", "ono", "gnot", "galerkin-quadratic"]
    if args.quadratic_all:
        names += ["ono-quadratic", "gnot-quadratic"]
    load_before = os.getloadavg()
    print(
        f"# torch {torch.__version__}, python {platform.python_version()}, {os.cpu_count()} cores, "
        f"threads {args.threads}, batch {args.batch}, width {args.width}, layers {args.layers}, heads {args.heads}, "
        f"k {args.eigenfunctions}, experts {args.experts}, float32"
    )
    print(f"# load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    rows = []
    print("| model | n | time ms, median (IQR) | peak MB | time / time at smallest n | peak / peak at smallest n |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        torch.manual_seed(0)
        model = build(name, args)
        first = None
        for n in args.sizes:
            if name.endswith("quadratic") and n > args.quadratic_max_n:
                continue
            g = torch.Generator().manual_seed(n)
            coords = torch.rand(args.batch, n, 2, generator=g)
            features = torch.randn(args.batch, n, 1, generator=g)
            times = time_steps(model, coords, features, args.repeats, args.warmup)
            peak = peak_bytes(model, coords, features)
            q1, _, q3 = statistics.quantiles(times, n=4) if len(times) > 1 else (times[0],) * 3
            row = dict(
                model=name,
                n=n,
                median_ms=1e3 * statistics.median(times),
                iqr_ms=1e3 * (q3 - q1),
                peak_mb=None if peak is None else peak / 2**20,
            )
            first = first or row
            rows.append(row)
            peak_text = "n/a" if peak is None else f"{row['peak_mb']:.1f}"
            ratio = "n/a" if peak is None or not first["peak_mb"] else f"{row['peak_mb'] / first['peak_mb']:.1f}"
            print(
                f"| {name} | {n} | {row['median_ms']:.1f} ({row['iqr_ms']:.1f}) | {peak_text} | "
                f"{row['median_ms'] / first['median_ms']:.1f} | {ratio} |",
                flush=True,
            )
    load_after = os.getloadavg()
    print(f"# load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(args=vars(args), load_before=load_before, load_after=load_after, rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
