"""Time one FNO training step: operators.fno.FNO against neuraloperator's FNO.

A step is: zero_grad, forward, relative-L2 loss, backward, Adam step. Both
models get the same configuration (width, layers, grid, batch, float32, thread
count) and the same data, in their native layouts (ours channel-last, neuralop
channel-first). Timings are interleaved (ours / theirs alternate which goes
first each round) so that slow drifts of the machine hit both alike.

Mode convention (checked against neuralop 2.0.0's SpectralConv source):

* ours: ``modes=K`` keeps K frequencies per sign along every non-last
  dimension (2K in all) and the first K rfft frequencies along the last one,
  as 2^(d-1) corner tensors (m, m, K, ..., K).
* neuralop: ``n_modes=(M_1, ..., M_d)`` is the total number kept per dimension
  on the fft-shifted spectrum: M//2 negative and M//2 + M%2 non-negative
  frequencies along non-last dims, and M_d//2 + 1 frequencies along the last
  (rfft) one, as one tensor (m, m, M_1, ..., M_{d-1}, M_d//2 + 1).

So K translates to n_modes = (2K, ..., 2K, 2K - 2): exactly the same frequency
set and the same 2^(d-1)·m²·K^d complex spectral weights per layer.
``--check`` (on by default) verifies this by copying our corner weights into a
neuralop SpectralConv and comparing the outputs.

Run from the repository root, in an environment where ``neuralop`` imports
(see benchmarks/README.md); without it only our FNO is timed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time

import torch

from operators.fno import FNO
from operators.parametrization import optimizer_param_groups
from operators.spectral import SpectralConv

try:  # optional: neuraloperator (pip install neuraloperator)
    import neuralop
    from neuralop.layers.spectral_convolution import SpectralConv as NeuralopSpectralConv
    from neuralop.models import FNO as NeuralopFNO

    NEURALOP_ERROR = None
except Exception as exc:  # ImportError, or a broken install
    neuralop = None
    NEURALOP_ERROR = f"{type(exc).__name__}: {exc}"


def neuralop_n_modes(modes: int, dim: int) -> tuple[int, ...]:
    """neuralop's n_modes that keeps exactly our K-per-sign frequency set."""
    return (2 * modes,) * (dim - 1) + (2 * modes - 2,)


def complex_numel(params) -> int:
    """Number of complex entries among ``params``."""
    return sum(p.numel() for p in params if p.is_complex())


def relative_l2(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of ||pred - target|| / ||target||."""
    diff = torch.linalg.vector_norm((pred - target).flatten(1), dim=1)
    return (diff / torch.linalg.vector_norm(target.flatten(1), dim=1)).mean()


def make_step(model, optimizer, x, y):
    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = relative_l2(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


def summarize(times_s: list[float]) -> dict:
    ms = [t * 1e3 for t in times_s]
    q1, q2, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    return {
        "median_ms": q2, "iqr_ms": q3 - q1, "q1_ms": q1, "q3_ms": q3, "min_ms": min(ms), "n": len(ms),
        "times_ms": [round(t, 3) for t in ms],
    }


def check_spectral_equivalence(dim: int, modes: int, grid: tuple[int, ...], channels: int = 3) -> float:
    """Max |ours - neuralop| of one spectral layer with our weights copied into theirs."""
    torch.manual_seed(1)
    ours = SpectralConv(channels, channels, modes, dim)
    theirs = NeuralopSpectralConv(channels, channels, neuralop_n_modes(modes, dim), bias=False)
    weight = theirs.weight.tensor
    expected = (channels, channels) + (2 * modes,) * (dim - 1) + (modes,)
    if tuple(weight.shape) != expected:
        raise RuntimeError(f"neuralop weight shape {tuple(weight.shape)} != expected {expected}")
    with torch.no_grad():
        corners = itertools.product((False, True), repeat=dim - 1)  # our corner order
        for w, flags in zip(ours.spectral_weights(), corners):
            # fft-shifted index j ↔ frequency j - K: [:K] negative, [K:] non-negative.
            index = (slice(None), slice(None)) + tuple(
                slice(0, modes) if negative else slice(modes, 2 * modes) for negative in flags
            )
            weight[index] = w
        x = torch.randn(2, channels, *grid)
        return (ours(x) - theirs(x)).abs().max().item()


def build_models(args):
    dim, width = args.dim, args.width
    torch.manual_seed(0)
    ours = FNO(
        dim, 1, 1, args.modes, width=width, layers=args.layers,
        parametrization=args.parametrization, projection_channels=args.projection_channels, padding=0,
    )
    ours_opt = torch.optim.Adam(optimizer_param_groups(ours, args.lr))
    theirs = theirs_opt = None
    if neuralop is not None and not args.no_neuralop:
        torch.manual_seed(0)
        theirs = NeuralopFNO(
            n_modes=neuralop_n_modes(args.modes, dim),
            in_channels=1,
            out_channels=1,
            hidden_channels=width,
            n_layers=args.layers,
            lifting_channel_ratio=0,  # single linear lift (in + d -> width), like ours
            projection_channel_ratio=args.projection_channels / width,  # width -> P -> out
            positional_embedding="grid",  # appends d coordinate channels, like ours
            use_channel_mlp=False,  # original FNO layer: spectral + linear skip
            fno_skip="linear",
            norm=None,
            domain_padding=None,
            factorization=None,  # dense complex weights
            fno_block_precision="full",
        )
        if theirs.projection_channels != args.projection_channels:
            raise RuntimeError(
                f"cannot match projection channels {args.projection_channels} with width {width}: "
                f"neuralop gets {theirs.projection_channels}"
            )
        theirs_opt = torch.optim.Adam(theirs.parameters(), lr=args.lr)
    return ours, ours_opt, theirs, theirs_opt


def parse_grid(text: str, dim: int) -> tuple[int, ...]:
    parts = [int(p) for p in text.lower().replace("x", ",").split(",") if p.strip()]
    if len(parts) == 1:
        parts = parts * dim
    if len(parts) != dim:
        raise SystemExit(f"--grid {text!r}: give one size or {dim} sizes (e.g. 64x64)")
    return tuple(parts)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, choices=(1, 2, 3), default=2)
    p.add_argument("--modes", type=int, default=12, help="K, modes per sign per dimension (our convention)")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--grid", default="64", help="one size for every dim, or e.g. 32x32x16")
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=20, help="timed steps per model")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    p.add_argument("--projection-channels", type=int, default=128)
    p.add_argument("--parametrization", choices=("standard", "mup"), default="standard")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--keep-denormals", action="store_true",
        help="do not flush denormal floats to zero (by default flushed: as a step on random data trains on, "
        "subnormal values appear and slow CPU kernels by up to orders of magnitude, which times the "
        "training trajectory rather than the implementation)",
    )
    p.add_argument("--no-neuralop", action="store_true", help="time ours only")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the spectral-layer equivalence check")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-' for stdout)")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    flush_denormal = (not args.keep_denormals) and torch.set_flush_denormal(True)
    grid = parse_grid(args.grid, args.dim)
    ours, ours_opt, theirs, theirs_opt = build_models(args)
    ours.check_input(grid)

    torch.manual_seed(2)
    x = torch.randn(args.batch, *grid, 1)
    y = torch.randn(args.batch, *grid, 1)
    steps = {"ours": make_step(ours, ours_opt, x, y)}
    models = {"ours": ours}
    if theirs is not None:
        # Same data, channel-first.
        steps["neuralop"] = make_step(theirs, theirs_opt, x.movedim(-1, 1).contiguous(), y.movedim(-1, 1).contiguous())
        models["neuralop"] = theirs

    result = {
        "config": {
            "dim": args.dim, "modes_K": args.modes, "width": args.width, "layers": args.layers,
            "grid": list(grid), "batch": args.batch, "threads": args.threads, "repeats": args.repeats,
            "warmup": args.warmup, "projection_channels": args.projection_channels,
            "parametrization": args.parametrization, "dtype": "float32", "flush_denormal": flush_denormal,
        },
        "machine": {
            "torch": torch.__version__, "neuralop": getattr(neuralop, "__version__", None),
            "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
        },
        "models": {},
    }
    if theirs is None:
        result["neuralop_missing"] = "--no-neuralop given" if args.no_neuralop else NEURALOP_ERROR
    else:
        result["config"]["neuralop_n_modes"] = list(neuralop_n_modes(args.modes, args.dim))
        if args.check:
            # neuralop 2.0.0 undoes its fftshift with fftshift (not ifftshift), which puts
            # the output modes one bin off along odd-sized non-last axes; check on even sizes.
            check_grid = tuple(n + n % 2 for n in grid[:-1]) + grid[-1:]
            result["spectral_check_grid"] = list(check_grid)
            result["spectral_check_max_abs_diff"] = check_spectral_equivalence(args.dim, args.modes, check_grid)

    for name, model in models.items():
        result["models"][name] = {
            "params": sum(p.numel() for p in model.parameters()),
            "spectral_complex_params": complex_numel(model.parameters()),
        }

    for _ in range(args.warmup):
        for step in steps.values():
            step()
    times = {name: [] for name in steps}
    order = list(steps)
    for r in range(args.repeats):
        for name in order if r % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        result["models"][name].update(summarize(ts))
    if "neuralop" in times:
        result["ratio_ours_over_neuralop"] = result["models"]["ours"]["median_ms"] / result["models"]["neuralop"]["median_ms"]

    print_report(result)
    if args.json:
        text = json.dumps(result, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    return result


def print_report(result: dict) -> None:
    c = result["config"]
    grid = "x".join(map(str, c["grid"]))
    print(
        f"FNO-{c['dim']}D training step  K={c['modes_K']} width={c['width']} layers={c['layers']} "
        f"grid={grid} batch={c['batch']} threads={c['threads']} flush_denormal={c['flush_denormal']}  "
        f"(torch {result['machine']['torch']}, neuralop {result['machine']['neuralop']})"
    )
    if "neuralop_n_modes" in c:
        print(f"  neuralop n_modes={tuple(c['neuralop_n_modes'])}")
    if "spectral_check_max_abs_diff" in result:
        check_grid = "x".join(map(str, result["spectral_check_grid"]))
        print(
            f"  spectral layer equivalence on {check_grid}: "
            f"max |ours - neuralop| = {result['spectral_check_max_abs_diff']:.2e}"
        )
    for name, m in result["models"].items():
        print(
            f"  {name:9s} median {m['median_ms']:9.2f} ms  IQR {m['iqr_ms']:7.2f} ms  "
            f"(n={m['n']})  params {m['params']:,}  spectral complex params {m['spectral_complex_params']:,}"
        )
    if "ratio_ours_over_neuralop" in result:
        print(f"  ratio ours/neuralop (median) = {result['ratio_ours_over_neuralop']:.3f}")
    else:
        print(f"  neuralop not timed: {result.get('neuralop_missing')}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
