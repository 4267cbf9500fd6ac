"""A training step of a population of M default-study proxies (operators/population.py) against one proxy alone.

    python benchmarks/population_step.py [--json docs/results/population_step.json] [--rounds 5] [--device cuda]

The proxy of studies/quick.yaml (FNO-1D, K 6, width 16, 4 layers, projection 128, muP, 32 points, batch 10, two
input channels), one thread, fp32. One step: zero_grad, forward, MSE, backward, Adam: ``torch.optim.Adam`` over
``optimizer_param_groups`` for the proxy alone (the trainer's optimizer), :class:`PopulationAdam` (each member
its own LR) for a population of M = 1, 2, 4, 8, 16, each member on its own batch. Each figure is the median over
``--rounds`` rounds of the mean of 100 steps after 10 warm-up steps, the rounds interleaved so a slow moment of
the machine hits every size alike. ``ratio_M_to_1``: a population step of M members over a step of one proxy
alone (M would be the ratio of M proxies trained one after the other). Run it on a quiet machine.
``population_4_batch_20`` and ``population_8_batch_20`` time the same at batch 20, for ``batch_mix``: a searched
batch size (10 or 20) trained as one population per batch size against one population padded and masked
(:func:`batch_mix`).

Both run under the allocator every trial of the product gets (mutransfer._allocator: glibc serving every
allocation from its heap, never a fresh mmap): the script re-executes itself once with those variables, unless
``--allocator default`` or the user's own allocator settings. Without them each step page-faults its large
activations back in, which costs a population (larger tensors) more than one proxy: ``allocator`` in the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.fno import FNO  # noqa: E402
from operators.parametrization import optimizer_param_groups  # noqa: E402
from operators.population import PopulationAdam, PopulationFNO  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from allocator_env import CHOICES, run_under  # noqa: E402
from proxy_step import mean_ms  # noqa: E402 -- the same timing loop as the proxy's step benchmark

PROXY = dict(dim=1, in_channels=2, out_channels=1, modes=6, width=16, layers=4, parametrization="mup")
GRID, BATCH, SIZES = 32, 10, (1, 2, 4, 8, 16)
GPU_SIZES = (*SIZES, 32, 64)


def _members(count: int) -> list[FNO]:
    members = []
    for seed in range(count):
        torch.manual_seed(seed)
        members.append(FNO(**PROXY))
    return members


def _synced(step: Callable[[], None], device: torch.device) -> Callable[[], None]:
    """``step`` followed by a wait for the GPU, so the wall clock counts the device's work."""
    if device.type != "cuda":
        return step

    def synced() -> None:
        step()
        torch.cuda.synchronize(device)

    return synced


def alone_step(device: torch.device) -> Callable[[], None]:
    (model,) = _members(1)
    model.to(device)
    optimizer = torch.optim.Adam(optimizer_param_groups(model, 1e-3), lr=1e-3)
    x, y = torch.randn(BATCH, GRID, 2, device=device), torch.randn(BATCH, GRID, 1, device=device)

    def step() -> None:
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()

    return step


def population_step(size: int, device: torch.device, batch: int = BATCH) -> Callable[[], None]:
    population = PopulationFNO(_members(size)).to(device)
    optimizer = PopulationAdam(population, [1e-3 * (1 + m) for m in range(size)])
    x = torch.randn(size, batch, GRID, 2, device=device)
    y = torch.randn(size, batch, GRID, 1, device=device)

    def step() -> None:
        optimizer.zero_grad()
        ((population(x) - y) ** 2).mean(dim=(1, 2, 3)).sum().backward()  # each member's own mean
        optimizer.step()

    return step


def batch_mix(ms: dict[str, float]) -> dict[str, object]:
    """8 trials searching batch size 10 or 20 (4 each), per 20 training samples: **grouped**, two populations of 4
    (the batch-10 one steps twice, the batch-20 one once), against **masked**, one population of 8 padded to batch 20
    stepping twice (each step the batch-10 members take their 10 samples, the batch-20 members a step every other
    time: their forward and backward computed on every step all the same). The faster one is what a population
    executor should do (issue "Proxies that pay in time", item 1)."""
    grouped = 2 * ms["population_4"] + ms["population_4_batch_20"]
    masked = 2 * ms["population_8_batch_20"]
    return {
        "grouped_ms_per_20_samples": round(grouped, 3),
        "masked_ms_per_20_samples": round(masked, 3),
        "faster": "grouped" if grouped <= masked else "masked",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (default 1, as one trial)")
    parser.add_argument(
        "--allocator",
        choices=CHOICES,
        default="product",
        help="product (default): glibc tuned as every trial of the product runs; default: glibc as it comes",
    )
    args = parser.parse_args()
    allocator = run_under(
        args.allocator, sys.argv[1:], __file__
    )  # glibc reads its variables at start: run again with them
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = GPU_SIZES if device.type == "cuda" else SIZES
    steps = {
        "alone": _synced(alone_step(device), device),
        **{f"population_{m}": _synced(population_step(m, device), device) for m in sizes},
        # a searched batch size (the default study's: 10 or 20): 4 members of each, grouped or padded together
        "population_4_batch_20": _synced(population_step(4, device, 2 * BATCH), device),
        "population_8_batch_20": _synced(population_step(8, device, 2 * BATCH), device),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            times[name].append(mean_ms(step, 100, warmup=10))
    ms = {name: statistics.median(t) for name, t in times.items()}
    mix = batch_mix(ms)
    result: dict[str, object] = {
        "command": " ".join(["python benchmarks/population_step.py", *sys.argv[1:]]),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "shape": dict(PROXY, grid=GRID, batch=BATCH, threads=args.threads, dtype="float32"),
        "rounds": args.rounds,
        "allocator": allocator,
        "ms_per_step": {name: round(v, 3) for name, v in ms.items()},
        "ms_per_step_rounds": {name: [round(v, 3) for v in t] for name, t in times.items()},
        **{f"ratio_{m}_to_1": round(ms[f"population_{m}"] / ms["alone"], 3) for m in sizes},
        "batch_mix": mix,
        # the same ratio within each round (both sizes timed moments apart): its spread is the machine's noise
        "ratio_rounds": {
            f"{m}_to_1": [round(p / a, 3) for p, a in zip(times[f"population_{m}"], times["alone"])] for m in sizes
        },
    }
    print(f"one proxy alone: {ms['alone']:.2f} ms per step")
    for m in sizes:
        total = ms[f"population_{m}"]
        print(
            f"population of {m:2d}: {total:6.2f} ms per step, {total / m:5.2f} ms per member, "
            f"{total / ms['alone']:.2f}x one proxy's step (one after the other: {m}x)"
        )
    print(
        f"batch size 10 or 20, 4 trials each, per 20 samples: grouped {mix['grouped_ms_per_20_samples']:.2f} ms, "
        f"masked {mix['masked_ms_per_20_samples']:.2f} ms: {mix['faster']} is faster"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
