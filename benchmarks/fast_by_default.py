"""One command for the table of docs/benchmarks.md, "Fast by default", on whatever machine runs it.

For each dimension (docs/benchmarks.md's MFU configurations) it starts fresh processes, interleaved round by
round, in two environments:

* ``product``: started the way the ``mutransfer`` command starts (``mutransfer.cli.launch.restart_tuned``: the
  tuned allocator unless the user chose otherwise) — what a user gets;
* ``untuned``: the same with ``MUTRANSFER_TUNED_ALLOCATOR=0`` (glibc's defaults);

and at two precisions, fp32 and bf16 (``--precision bf16`` as the trainer runs it). Each process times our
FNO's training step and, where ``neuralop`` imports (benchmarks/README.md), neuraloperator's at the same
configuration, interleaved step by step (benchmarks/bench_fno_step.py), and the machine's 2048² matmul in fp32
and bf16 in the same run (the ceiling of the MFU column). It prints one table and writes everything as JSON.

    python benchmarks/fast_by_default.py --out docs/results/fast_by_default.json        # CPU, 3 rounds: about 25 min
    /tmp/nobench/bin/python benchmarks/fast_by_default.py ...                           # with neuraloperator
    python benchmarks/fast_by_default.py --device cuda --envs product                   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: dim -> bench_fno_step.py's configuration flags (docs/benchmarks.md's MFU configurations)
CONFIGS = {
    1: ["--dim", "1", "--modes", "16", "--width", "64", "--layers", "4", "--grid", "1024", "--batch", "20"],
    2: ["--dim", "2", "--modes", "12", "--width", "64", "--layers", "4", "--grid", "64x64", "--batch", "20"],
    3: ["--dim", "3", "--modes", "8", "--width", "32", "--layers", "4", "--grid", "32x32x32", "--batch", "4"],
}
ENVS = {"product": {}, "untuned": {"MUTRANSFER_TUNED_ALLOCATOR": "0"}}
MARK = "FAST_BY_DEFAULT_JSON "


def child(argv: list[str]) -> None:
    """In the started process: restart as the command would, time the step, print one marked JSON line."""
    from mutransfer.cli.launch import restart_tuned

    restart_tuned()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_fno_step

    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            result = bench_fno_step.main(argv)
        finally:
            sys.stdout = stdout
    print(MARK + json.dumps(result))


def run_one(dim: int, env_name: str, precision: str, args) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "MUTRANSFER_TUNED_ALLOCATOR"}
    env.pop("MUTRANSFER_TUNED_ALLOCATOR_SET", None)
    env.update(ENVS[env_name])
    flags = [
        *CONFIGS[dim],
        *("--device", args.device, "--threads", str(args.threads), "--precision", precision),
        *("--repeats", str(args.repeats), "--warmup", str(args.warmup), "--matmul-repeats", "5", "--no-check"),
    ]
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(flags)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(MARK)]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"dim {dim} {env_name} {precision}: exited {out.returncode}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len(MARK) :])


def summarize(runs: list[dict]) -> dict:
    """Medians over the rounds of one (dim, env, precision): step times, speed-up, MFU, faults."""
    ours = [r["models"]["ours"]["median_ms"] for r in runs]
    row = {
        "ours_ms": statistics.median(ours),
        "ours_ms_rounds": ours,
        "mfu_vs_fp32_matmul": statistics.median(r["models"]["ours"]["mfu"] for r in runs),
        "fp32_matmul_gflops": statistics.median(r["matmul"]["fp32"]["flops_per_s"] / 1e9 for r in runs),
        "faults_per_step": statistics.median(r["models"]["ours"].get("minor_page_faults_per_step", 0) for r in runs),
        "step_gflop": runs[0]["step_flops"]["total"] / 1e9,
        "malloc_env": runs[0]["config"]["malloc_env"],
    }
    bf16 = [r["matmul"]["bf16"]["flops_per_s"] / 1e9 for r in runs if "bf16" in r["matmul"]]
    if bf16:
        row["bf16_matmul_gflops"] = statistics.median(bf16)
    if all("neuralop" in r["models"] for r in runs):
        row["neuralop_ms"] = statistics.median(r["models"]["neuralop"]["median_ms"] for r in runs)
        row["speedup_over_neuralop"] = statistics.median(r["speedup_ours_over_neuralop"] for r in runs)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dims", default="1,2,3")
    p.add_argument("--envs", default="product,untuned", help="of: product, untuned")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per cell, interleaved")
    p.add_argument("--repeats", type=int, default=20, help="timed steps per model and process")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        child(json.loads(args.child))
        return
    dims = [int(d) for d in args.dims.split(",")]
    envs, precisions = args.envs.split(","), args.precisions.split(",")
    runs: dict[tuple[int, str, str], list[dict]] = {}
    for _ in range(args.rounds):
        for dim in dims:
            for env_name in envs:
                for precision in precisions:
                    runs.setdefault((dim, env_name, precision), []).append(run_one(dim, env_name, precision, args))
    rows = {key: summarize(value) for key, value in runs.items()}
    print("| dim | env | precision | ours ms | neuralop ms | ours faster | MFU (fp32 matmul) | faults/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (dim, env_name, precision), row in rows.items():
        neuralop = f"{row['neuralop_ms']:.1f}" if "neuralop_ms" in row else "—"
        speedup = f"{row['speedup_over_neuralop']:.2f}x" if "speedup_over_neuralop" in row else "—"
        print(
            f"| {dim}D | {env_name} | {precision} | {row['ours_ms']:.1f} | {neuralop} | {speedup} | "
            f"{row['mfu_vs_fp32_matmul']:.2f} | {row['faults_per_step']:,.0f} |"
        )
    first = next(iter(runs.values()))[0]
    fp32 = statistics.median(r["fp32_matmul_gflops"] for r in rows.values())
    bf16 = [r["bf16_matmul_gflops"] for r in rows.values() if "bf16_matmul_gflops" in r]
    print(
        f"2048^2 matmul in the same runs: fp32 {fp32:.0f} GFLOP/s"
        + (f", bf16 {statistics.median(bf16):.0f} GFLOP/s" if bf16 else "")
        + f"; torch {first['machine']['torch']}, neuralop {first['machine']['neuralop']}, "
        f"{first['machine']['platform']}, {args.threads} threads"
    )
    if args.out:
        args.out.write_text(
            json.dumps({f"{d}D/{e}/{p}": {"summary": rows[(d, e, p)], "runs": runs[(d, e, p)]} for d, e, p in rows})
            + "\n"
        )


if __name__ == "__main__":
    main()
