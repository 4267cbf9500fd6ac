"""How long will a study take on this device? Time its proxy and target steps, estimate, and fit a budget.

Builds the study's proxy (K = proxy_K) and target (K = target_K) FNOs on the device,
times training steps at the study's batch size and precision (median of ``--steps``
after warm-up, synchronised on CUDA), and estimates the study's compute:

    proxies: num_trials × epochs × ceil(n_train / batch) × t_proxy / concurrency   (no ASHA pruning assumed)
    target:  target.epochs × ceil(n_train / batch) × t_target

``concurrency`` is ``search.max_concurrent`` where each trial has a device of its own (the CPU, or
``resources.gpus_per_trial`` >= 1), and 1 where trials share a GPU: on one H200, four proxies of
studies/navier_stokes_paper_1gpu.yaml at 0.25 GPU each took 140-148 ms per step against 41 ms for one alone,
a throughput gain of 1.1-1.2x, not 4x (docs/results/gpu-h200-2026-11-28/). The fixed costs (Ray's start, the
target's start-up: 103 s of that study's 254 s) are not in the estimate: it counts training seconds.

With ``--seconds S`` it also prints the smallest change (fewer epochs, then fewer
trials) that brings the estimate under S, as `mutransfer sweep` override flags.

    python benchmarks/study_budget.py --study studies/navier_stokes_paper_1gpu.yaml --device cuda --seconds 300
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mutransfer._study import load_study  # noqa: E402
from mutransfer._training.precision import Precision, training_step  # noqa: E402
from operators import FNO, optimizer_param_groups  # noqa: E402


def step_seconds(study, modes: int, width: int, device: torch.device, steps: int) -> float:
    """Median seconds of one Adam training step of the study's FNO at ``modes`` on random data."""
    grid = tuple(n - study.padding for n in study.grid_shape)
    with device:
        model = FNO(
            study.dim,
            1,
            1,
            modes=modes,
            width=width,
            layers=study.operator.layers,
            parametrization=study.parametrization,
            projection_channels=study.operator.projection_channels,
            padding=study.padding,
        )
    optimizer = torch.optim.Adam(optimizer_param_groups(model, 1e-4))
    amp = Precision(study.training.precision, device)
    x = torch.randn(study.training.batch_size, *grid, 1, device=device)
    y = torch.randn_like(x)
    times = []
    for i in range(steps + 3):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        training_step(model, optimizer, amp, x, y)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def estimate(study, t_proxy: float, t_target: float, trials: int, epochs: int, target_epochs: int) -> dict:
    iters = math.ceil(study.problem.n_train / study.training.batch_size)
    shared_gpu = 0 < study.resources.gpus_per_trial < 1
    concurrency = 1 if shared_gpu else (study.search.max_concurrent or 1)
    proxies = trials * epochs * iters * t_proxy / concurrency
    target = target_epochs * iters * t_target
    return {
        "proxy_seconds": proxies,
        "target_seconds": target,
        "total_seconds": proxies + target,
        "trials": trials,
        "epochs": epochs,
        "target_epochs": target_epochs,
    }


def fit(study, t_proxy: float, t_target: float, seconds: float) -> dict:
    """Shrink epochs (proxies and target alike, keeping their ratio), then trials, until the estimate fits."""
    trials, epochs, target_epochs = study.search.num_trials, study.budget.epochs, study.target.epochs
    while estimate(study, t_proxy, t_target, trials, epochs, target_epochs)["total_seconds"] > seconds:
        if epochs > 2:
            epochs -= 1
            target_epochs = max(2, round(study.target.epochs * epochs / study.budget.epochs))
        elif trials > 2:
            trials -= 1
        else:
            break
    return estimate(study, t_proxy, t_target, trials, epochs, target_epochs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seconds", type=float, help="fit the study into this many seconds of training")
    p.add_argument("--json", help="write the estimate here")
    args = p.parse_args(argv)
    study, _ = load_study(args.study)
    device = torch.device(args.device)
    t_proxy = step_seconds(study, study.proxy_K, study.operator.width, device, args.steps)
    t_target = step_seconds(study, study.target_K, study.target_width or study.operator.width, device, args.steps)
    full = estimate(study, t_proxy, t_target, study.search.num_trials, study.budget.epochs, study.target.epochs)
    out = {
        "study": study.name,
        "device": str(device),
        "proxy_step_seconds": t_proxy,
        "target_step_seconds": t_target,
        "as_written": full,
    }
    print(
        f"{study.name} on {device}: proxy step {t_proxy * 1e3:.1f} ms, target step {t_target * 1e3:.1f} ms; "
        f"as written ~{full['total_seconds']:.0f} s of training ({full['proxy_seconds']:.0f} proxies + "
        f"{full['target_seconds']:.0f} target)",
        file=sys.stderr,
    )
    if args.seconds:
        fitted = fit(study, t_proxy, t_target, args.seconds)
        flags = []
        if fitted["trials"] != study.search.num_trials:
            flags += ["--num-trials", str(fitted["trials"])]
        if fitted["epochs"] != study.budget.epochs:
            flags += ["--epochs", str(fitted["epochs"]), "--target-epochs", str(fitted["target_epochs"])]
        out["fitted"], out["flags"] = fitted, flags
        print(" ".join(flags))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
