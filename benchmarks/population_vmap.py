"""Would the attention operators gain from training as a population? A generic stack measured on the Galerkin proxy.

    python benchmarks/population_vmap.py [--json docs/results/population_vmap.json] [--rounds 5]

The FNO's population (operators/population.py) is written by hand. Before writing one per attention operator,
this measures the generic way to stack any module: ``torch.func.stack_module_state`` over M members and
``vmap(functional_call)`` over the member dimension, which batches every operation of the model across members
(one kernel per operation for all M, as the FNO's population does). The model: the proxy of
studies/galerkin_darcy_width.yaml (GalerkinTransformer, width 16, 3 layers, 4 heads, width-muP), on point sets of
64, 256 and 961 points (the study's 31 × 31 Darcy grid), batch 10, one thread, fp32, forward and backward of the
MSE (no optimizer: the FNO's shows the optimizer is not where a population wins or loses). Each figure is the
median of ``--rounds`` interleaved rounds of the mean of 20 steps after 5 warm-up steps, under the allocator every
trial of the product runs with (the script re-executes itself with it, as benchmarks/population_step.py).

ONO is tried too: ``vmap`` refuses it (its orthogonalisation's running moment reads a counter with ``.item()``),
which the JSON records as its reason.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch.func import functional_call, stack_module_state, vmap

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.galerkin import GalerkinTransformer  # noqa: E402
from operators.ono import ONO  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from allocator_env import run_under  # noqa: E402
from proxy_step import mean_ms  # noqa: E402 -- the same timing loop as the proxy's step benchmark

BATCH, POINTS, SIZES = 10, (64, 256, 961), (1, 8)


def galerkin() -> torch.nn.Module:
    return GalerkinTransformer(2, 1, 1, width=16, layers=3, heads=4, width_parametrization="mup", base_width=16)


def ono() -> torch.nn.Module:
    return ONO(2, 1, 1, width=16, layers=2, heads=2, eigenfunctions=4)


def _members(build: Callable[[], torch.nn.Module], count: int) -> list[torch.nn.Module]:
    members = []
    for seed in range(count):
        torch.manual_seed(seed)
        members.append(build())
    return members


def alone_step(build: Callable[[], torch.nn.Module], points: int) -> Callable[[], None]:
    (model,) = _members(build, 1)
    coords, features = torch.rand(BATCH, points, 2), torch.randn(BATCH, points, 1)

    def step() -> None:
        model.zero_grad()
        model(coords, features, None).square().mean().backward()

    return step


def stacked_step(build: Callable[[], torch.nn.Module], points: int, size: int) -> Callable[[], None]:
    members = _members(build, size)
    params, buffers = stack_module_state(members)  # each (M, …), the parameters leaves that require grad
    blank = copy.deepcopy(members[0])

    def one(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], c: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = functional_call(blank, (p, b), (c, f, None))
        return out

    coords, features = torch.rand(size, BATCH, points, 2), torch.randn(size, BATCH, points, 1)
    out = vmap(one)(params, buffers, coords, features)
    for m, model in enumerate(members):  # the stack computes what each member computes alone
        torch.testing.assert_close(out[m], model(coords[m], features[m], None), rtol=1e-4, atol=1e-5)

    def step() -> None:
        for p in params.values():
            p.grad = None
        vmap(one)(params, buffers, coords, features).square().mean(dim=(1, 2, 3)).sum().backward()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    allocator = run_under("product", sys.argv[1:], __file__)  # glibc reads its variables at start: run again with them
    torch.set_num_threads(1)
    try:
        stacked_step(ono, 64, 2)
        ono_reason = "stacks under vmap"
    except RuntimeError as exc:
        ono_reason = str(exc).splitlines()[0]
    steps: dict[str, Callable[[], None]] = {}
    for points in POINTS:
        steps[f"alone_{points}"] = alone_step(galerkin, points)
        for size in SIZES:
            steps[f"stacked_{size}_{points}"] = stacked_step(galerkin, points, size)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            times[name].append(mean_ms(step, 20, warmup=5))
    ms = {name: statistics.median(t) for name, t in times.items()}
    ratios = {
        f"{size}_to_1_at_{points}": round(ms[f"stacked_{size}_{points}"] / ms[f"alone_{points}"], 3)
        for points in POINTS
        for size in SIZES
    }
    result = {
        "command": " ".join(["python benchmarks/population_vmap.py", *sys.argv[1:]]),
        "model": "GalerkinTransformer(2, 1, 1, width=16, layers=3, heads=4, width-muP), batch 10, fp32, 1 thread",
        "allocator": allocator,
        "rounds": args.rounds,
        "ms_per_step": {name: round(v, 3) for name, v in ms.items()},
        "ms_per_step_rounds": {name: [round(v, 3) for v in t] for name, t in times.items()},
        "ratio": ratios,
        "ono": ono_reason,
    }
    for points in POINTS:
        alone = ms[f"alone_{points}"]
        line = ", ".join(f"{size} stacked {ms[f'stacked_{size}_{points}'] / alone:.2f}x" for size in SIZES)
        print(f"{points:4d} points: one alone {alone:.2f} ms per step; {line}")
    print(f"ONO: {ono_reason}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
