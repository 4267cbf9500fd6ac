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

ONO is tried too: ``vmap`` refused it until its whitening became branch-free (its running moment read a counter
with ``.item()``); the JSON records whether it stacks, or the reason. The population executor now stacks every model
but the project's FNO this way (operators/population_vmap.py).

A hand-written stack is timed beside it (``folded_8``): every ``nn.Linear`` of 8 members as one ``baddbmm`` over the
members, every LayerNorm's (and per-head LayerNorm's) affine per member, the members' batches folded into one batch
for the parameter-free operations; it computes what each member computes alone (checked). And ``vmap`` is tried on
two FNOs as a user's factory would hand them over, the project's and neuraloperator's 1-D FNO (the proxy's shape:
K 6, width 16, 32 points): the JSON's ``fno_vmap`` records whether each stacks. ``alone_64_op_shares``: the shares
of one member's step (64 points) in LayerNorm and in ``bmm``, from ``torch.profiler``.
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

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from operators.fno import FNO  # noqa: E402
from operators.galerkin import GalerkinTransformer  # noqa: E402
from operators.ono import ONO  # noqa: E402
from operators.pointset import HeadLayerNorm  # noqa: E402

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


class _FoldedLinear(nn.Module):
    """M members' ``nn.Linear`` (a MuLinear's forward multiplier included) as one ``baddbmm``; input (M·B, …, in)."""

    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.members = len(layers)
        self.weight = nn.Parameter(torch.stack([layer.weight.detach().clone() for layer in layers]))
        self.bias = nn.Parameter(torch.stack([layer.bias.detach().clone() for layer in layers]))
        self.multiplier = float(getattr(layers[0], "multiplier", 1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.reshape(self.members, -1, x.shape[-1])
        weight = self.weight if self.multiplier == 1.0 else self.weight * self.multiplier
        out = torch.baddbmm(self.bias.unsqueeze(1), h, weight.transpose(1, 2))
        return out.reshape(*x.shape[:-1], out.shape[-1])


class _FoldedNorm(nn.Module):
    """M members' LayerNorm over the last ``size`` features, each with its own affine (per head for HeadLayerNorm)."""

    def __init__(self, norms: list[nn.Module], size: int, eps: float):
        super().__init__()
        self.members, self.size, self.eps = len(norms), size, eps
        self.weight = nn.Parameter(torch.stack([n.weight.detach().clone() for n in norms]))
        self.bias = nn.Parameter(torch.stack([n.bias.detach().clone() for n in norms]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x, (self.size,), eps=self.eps)
        per_member = y.reshape(self.members, -1, *y.shape[1:])
        shape = (self.members, *([1] * (per_member.dim() - self.weight.dim())), *self.weight.shape[1:])
        return (per_member * self.weight.reshape(shape) + self.bias.reshape(shape)).reshape(y.shape)


def fold(members: list[nn.Module]) -> nn.Module:
    """A copy of member 0 whose parametrised layers hold every member's weights (input: the members' batches one
    after another along the batch dim)."""
    root = copy.deepcopy(members[0])
    modules = [dict(m.named_modules()) for m in members]
    for name, module in list(root.named_modules()):
        group = [found[name] for found in modules]
        if isinstance(module, nn.Linear):
            new: nn.Module = _FoldedLinear(group)
        elif isinstance(module, HeadLayerNorm):
            new = _FoldedNorm(group, module.head_dim, module.eps)
        elif isinstance(module, nn.LayerNorm):
            new = _FoldedNorm(group, module.normalized_shape[-1], module.eps)
        elif name and any(True for _ in module.parameters(recurse=False)):
            raise TypeError(f"{name}: a {type(module).__name__} this stack does not know")
        else:
            continue
        parent, _, leaf = name.rpartition(".")
        setattr(root.get_submodule(parent) if parent else root, leaf, new)
    return root


def folded_step(build: Callable[[], torch.nn.Module], points: int, size: int) -> Callable[[], None]:
    members = _members(build, size)
    stack = fold(members)
    coords, features = torch.rand(BATCH, points, 2), torch.randn(BATCH, points, 1)
    many = (coords.repeat(size, 1, 1), features.repeat(size, 1, 1))
    out = stack(*many, None).reshape(size, BATCH, points, -1)
    for m, model in enumerate(members):  # the stack computes what each member computes alone
        torch.testing.assert_close(out[m], model(coords, features, None), rtol=1e-4, atol=1e-5)

    def step() -> None:
        stack.zero_grad()
        stack(*many, None).square().mean().backward()

    return step


def op_shares(step: Callable[[], None]) -> dict[str, float]:
    """Shares of ``step``'s self CPU time (``torch.profiler``, 10 steps after 5) in LayerNorm and in ``bmm``."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            step()
    rows = prof.key_averages()
    total = sum(r.self_cpu_time_total for r in rows)
    norm = sum(r.self_cpu_time_total for r in rows if "layer_norm" in r.key)
    bmm = sum(r.self_cpu_time_total for r in rows if r.key == "aten::bmm")
    return {"layer_norm": round(norm / total, 3), "bmm": round(bmm / total, 3)}


def fno_vmap() -> dict[str, str]:
    """Whether ``vmap(functional_call)`` stacks two FNOs of the proxy's shape (the reason where it does not)."""
    builds: dict[str, Callable[[], torch.nn.Module]] = {
        "project FNO": lambda: FNO(1, 1, 1, modes=6, width=16, layers=4, projection_channels=128)
    }
    try:
        from mutransfer.neuralop import fno1d

        builds["neuraloperator fno1d"] = lambda: fno1d(K=6, width=16, in_channels=1, out_channels=1)
    except ImportError:  # the neuralop extra: not installed here
        pass
    found = {}
    for label, build in builds.items():
        members = _members(build, 2)
        params, buffers = stack_module_state(members)
        blank = copy.deepcopy(members[0])

        def one(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], x: torch.Tensor, blank=blank) -> torch.Tensor:
            out: torch.Tensor = functional_call(blank, (p, b), (x,))
            return out

        try:
            vmap(one)(params, buffers, torch.randn(2, BATCH, 32, 1)).sum().backward()
            found[label] = "stacks under vmap"
        except (RuntimeError, ValueError) as exc:
            found[label] = " ".join(str(exc).split())[:240]
    return found


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
        steps[f"folded_8_{points}"] = folded_step(galerkin, points, 8)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            times[name].append(mean_ms(step, 20, warmup=5))
    ms = {name: statistics.median(t) for name, t in times.items()}
    ratios = {
        f"{size}_to_1_at_{points}": round(ms[f"stacked_{size}_{points}"] / ms[f"alone_{points}"], 3)
        for points in POINTS
        for size in SIZES
    } | {f"folded_8_to_1_at_{points}": round(ms[f"folded_8_{points}"] / ms[f"alone_{points}"], 3) for points in POINTS}
    result = {
        "command": " ".join(["python benchmarks/population_vmap.py", *sys.argv[1:]]),
        "model": "GalerkinTransformer(2, 1, 1, width=16, layers=3, heads=4, width-muP), batch 10, fp32, 1 thread",
        "allocator": allocator,
        "rounds": args.rounds,
        "ms_per_step": {name: round(v, 3) for name, v in ms.items()},
        "ms_per_step_rounds": {name: [round(v, 3) for v in t] for name, t in times.items()},
        "ratio": ratios,
        "ono": ono_reason,
        "fno_vmap": fno_vmap(),
        "alone_64_op_shares": op_shares(steps["alone_64"]),
    }
    for points in POINTS:
        alone = ms[f"alone_{points}"]
        line = ", ".join(f"{size} stacked {ms[f'stacked_{size}_{points}'] / alone:.2f}x" for size in SIZES)
        line += f", 8 folded {ms[f'folded_8_{points}'] / alone:.2f}x"
        print(f"{points:4d} points: one alone {alone:.2f} ms per step; {line}")
    print(f"ONO: {ono_reason}")
    for label, reason in result["fno_vmap"].items():
        print(f"{label}: {reason}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
