"""What mixed precision costs in accuracy: forward error against fp32, and the test error after training.

1. Forward: the relative L2 difference between an FNO's output under autocast (bf16, fp16)
   and in fp32, same weights and input (random init, unit-variance input), for the
   benchmark configurations in 1D/2D/3D (the FFTs and the spectral contraction stay fp32).
2. Training: Darcy (the problem's default data: 400 train / 100 test at 31×31), FNO-2D
   K 8, width 32, muP, Adam lr 3e-3, cosine, ``--epochs`` epochs, ``--seeds`` seeds, in each
   precision; the final test relative L2, its mean and standard deviation over seeds, and each precision's
   paired difference to fp32 (same seeds, same initial weights) with a Student-t 95 % interval
   (mutransfer._diagnostics.statistics.mean_ci). ``bf16-fp32-spectrum`` is bf16 with the spectral part kept in
   float32 (operators.spectral._SPECTRAL_BF16 = "off"), bf16 as it ran before CPUs with bf16 matrix units got
   the bf16 spectrum.

    python benchmarks/bench_precision.py --device cpu --epochs 20 --seeds 3 --json precision_cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import operators.spectral as spectral  # noqa: E402
from mutransfer._diagnostics.statistics import mean_ci  # noqa: E402
from mutransfer._problems import default_dataset, get_problem  # noqa: E402
from mutransfer._training import TrainConfig, train  # noqa: E402
from mutransfer.data._loading import load_split  # noqa: E402
from operators import FNO  # noqa: E402

FORWARD_CASES = [(1, (1024,), 16, 64, 20), (2, (64, 64), 12, 64, 20), (3, (32, 32, 32), 8, 32, 4)]
PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}


def forward_errors(device: torch.device) -> list[dict]:
    rows = []
    for dim, grid, modes, width, batch in FORWARD_CASES:
        torch.manual_seed(0)
        with device:
            model = FNO(dim, 1, 1, modes=modes, width=width, layers=4, parametrization="mup")
            x = torch.randn(batch, *grid, 1)
        row = {"dim": dim, "grid": list(grid), "modes": modes, "width": width, "batch": batch}
        with torch.no_grad():
            ref = model(x).double()
            for name, dtype in PRECISIONS.items():
                with torch.autocast(device.type, dtype=dtype):
                    out = model(x).double()
                row[name] = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))
        rows.append(row)
        print(f"forward FNO-{dim}D K={modes} m={width}: bf16 {row['bf16']:.2e}  fp16 {row['fp16']:.2e}", flush=True)
    return rows


def training_errors(device: torch.device, epochs: int, seeds: int, precisions: list[str]) -> dict:
    problem = get_problem("darcy")
    data = load_split(
        default_dataset(problem, progress=False),
        n_train=problem.n_train,
        n_test=problem.n_test,
        resolution=problem.resolution,
        problem="darcy",
    )
    out: dict = {}
    try:
        _train_each(device, epochs, seeds, precisions, data, out)
    finally:
        spectral._SPECTRAL_BF16 = "auto"  # the module's switch back to its default, whatever happened
    return out


def _train_each(device: torch.device, epochs: int, seeds: int, precisions: list[str], data, out: dict) -> None:
    for name in precisions:
        precision = name.split("-")[0]
        spectral._SPECTRAL_BF16 = "off" if name == "bf16-fp32-spectrum" else "auto"
        errors, seconds = [], []
        for seed in range(seeds):
            torch.manual_seed(seed)
            model = FNO(
                2, 1, 1, modes=8, width=32, layers=4, parametrization="mup", padding=get_problem("darcy").padding
            )
            config = TrainConfig(
                lr=3e-3,
                batch_size=20,
                epochs=epochs,
                schedule="cosine",
                seed=seed,
                device=str(device),
                precision=precision,
                progress=False,
            )
            result = train(model, data, config)
            errors.append(result.test_error)
            seconds.append(result.seconds)
        out[name] = {
            "test_errors": errors,
            "mean": statistics.mean(errors),
            "std": statistics.stdev(errors) if len(errors) > 1 else 0.0,
            "seconds_per_run": statistics.mean(seconds),
        }
        line = f"train Darcy {name}: test rel. L2 {out[name]['mean']:.4f} ± {out[name]['std']:.4f} "
        if name != "fp32" and "fp32" in out:
            diff = mean_ci([a - b for a, b in zip(errors, out["fp32"]["test_errors"])])
            out[name]["minus_fp32"] = {"mean": diff.mean, "ci95": [diff.lo, diff.hi], "n": diff.n}
            line += f"(− fp32, paired: {diff.mean:+.4f} [{diff.lo:+.4f}, {diff.hi:+.4f}]) "
        print(line + f"({seeds} seeds, {statistics.mean(seconds):.1f} s/run)", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--no-training", dest="training", action="store_false")
    p.add_argument(
        "--precisions", default="fp32,bf16,bf16-fp32-spectrum,fp16", help="of: fp32, bf16, bf16-fp32-spectrum, fp16"
    )
    p.add_argument("--json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    start = time.perf_counter()
    result = {
        "device": str(device),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
        "forward": forward_errors(device),
    }
    if args.training:
        result["training"] = training_errors(device, args.epochs, args.seeds, args.precisions.split(","))
        result["training_setup"] = {
            "problem": "darcy",
            "resolution": 31,
            "n_train": 400,
            "n_test": 100,
            "modes": 8,
            "width": 32,
            "epochs": args.epochs,
            "lr": 3e-3,
            "schedule": "cosine",
        }
    result["seconds"] = time.perf_counter() - start
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
