"""The planner's peak memory of one Adam step against the measured peak, on the CPU or a GPU.

For each configuration, builds the FNO on the device, runs three training steps
(mutransfer._diagnostics.peak_memory.measure_training_peak: autocast at the precision,
Adam on the muP groups) and compares the third step's peak with
``operators.planning.plan_fno(...).total_bytes``:

- on CUDA the peak is ``torch.cuda.max_memory_allocated`` (tensors plus the cuFFT and
  cuBLAS workspaces the caching allocator hands out);
- on the CPU it is the peak of live tensor storages at ATen-op boundaries (LiveTensorPeak).

    python benchmarks/bench_memory.py --device cpu --json mem_cpu.json
    python benchmarks/bench_memory.py --device cuda --paper --json mem_cuda.json

Prints one row per configuration: plan, measured, plan/measured, and the plan's parts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mutransfer._diagnostics.peak_memory import measure_training_peak  # noqa: E402
from operators import FNO  # noqa: E402
from operators.planning import format_bytes, plan_fno  # noqa: E402

#: (dim, grid, K, width, batch, padding) — the issue's MFU configurations first
CPU_CASES = [
    (1, (1024,), 16, 64, 20, 0),
    (2, (64, 64), 12, 64, 20, 5),
    (3, (32, 32, 32), 8, 32, 4, 4),
    (2, (32, 32), 6, 16, 4, 3),
]
CUDA_CASES = CPU_CASES + [
    (3, (64, 64, 32), 16, 64, 2, 4),  # the 1-GPU paper study's target
    (3, (64, 64, 64), 8, 64, 8, 4),
    (3, (64, 64, 64), 12, 64, 16, 4),
]
PAPER_CASES = [(3, (64, 64, 64), 24, 64, 1, 4), (3, (64, 64, 64), 24, 64, 2, 4)]  # the paper's 906M target


def measure(case, precision: str, device: torch.device) -> dict:
    dim, grid, modes, width, batch, padding = case
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    with device:
        model = FNO(dim, 1, 1, modes=modes, width=width, layers=4, padding=padding)
    start = time.perf_counter()
    measured = measure_training_peak(model, batch, grid, precision=precision)["peak_bytes"]
    seconds = time.perf_counter() - start
    del model
    plan = plan_fno(
        dim, modes, width, 4, grid=grid, batch=batch, padding=padding, precision=precision, device=device.type
    )
    return {
        "dim": dim,
        "grid": list(grid),
        "modes": modes,
        "width": width,
        "batch": batch,
        "padding": padding,
        "precision": precision,
        "device": str(device),
        "measured_bytes": measured,
        "plan_bytes": plan.total_bytes,
        "ratio": plan.total_bytes / measured,
        "plan_backward_peak": plan.backward_peak_bytes,
        "plan_step_peak": plan.step_peak_bytes,
        "plan_activations": plan.activations_bytes,
        "plan_workspace": plan.workspace_bytes,
        "plan_layer_gradient": plan.layer_gradient_bytes,
        "plan_optimizer_workspace": plan.optimizer_workspace_bytes,
        "plan_weights": plan.weights_bytes,
        "seconds": seconds,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16", "fp16"])
    p.add_argument("--paper", action="store_true", help="also the paper's 906M target (CUDA, ~35 GiB)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the rows as JSON here")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    cases = (CUDA_CASES if device.type == "cuda" else CPU_CASES) + (PAPER_CASES if args.paper else [])
    rows = []
    for case in cases:
        for precision in args.precision:
            try:
                row = measure(case, precision, device)
            except torch.OutOfMemoryError as exc:  # report, keep going
                row = {"case": list(case), "precision": precision, "error": str(exc).splitlines()[0]}
            rows.append(row)
            if "error" in row:
                print(f"{case} {precision}: {row['error']}", flush=True)
                continue
            print(
                f"FNO-{row['dim']}D grid {'x'.join(map(str, row['grid']))} K={row['modes']} m={row['width']} "
                f"B={row['batch']} pad={row['padding']} {precision}: plan {format_bytes(row['plan_bytes'])}  "
                f"measured {format_bytes(row['measured_bytes'])}  plan/measured {row['ratio']:.3f}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "device": str(device),
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
