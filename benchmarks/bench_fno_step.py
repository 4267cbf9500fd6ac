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

Beyond the comparison (see benchmarks/README.md for every option):

* ``--device cpu|cuda``: on CUDA steps are timed with CUDA events after a
  synchronize, ``--threads`` is ignored and the peak ``torch.cuda.max_memory_allocated``
  of one step of each model is reported.
* ``--precision fp32|bf16|fp16``: the forward runs under ``torch.autocast`` (our
  spectral layers keep their FFTs and contraction in float32 inside it), the loss
  is computed in float32 outside it; fp16 uses the trainer's loss scaler
  (``mutransfer._training.precision``; torch.amp.GradScaler cannot unscale complex gradients).
* ``--contraction new|einsum``: time our FNO with the former spectral layer (full
  rfftn, one complex einsum per corner, full irfftn), for before/after numbers (a
  private switch of operators.spectral; not a model option). ``--transform dft|fft``
  picks the truncated transform of the new path.
* ``--malloc-no-mmap``: glibc only; restart with MALLOC_MMAP_MAX_=0 and
  MALLOC_TRIM_THRESHOLD_=2^36 (every allocation from the heap, never given back),
  so that tensors above the mmap threshold stop page-faulting fresh memory in
  every step. The minor page faults per step are reported either way.
* MFU: the same run times a 2048×2048 @ 2048×2048 float32 matmul (median of
  ``--matmul-repeats``, same threads; on CUDA with TF32 off and on), takes the
  FLOPs of one step from ``operators.planning.step_flops`` and reports
  (step FLOPs / step time) / matmul FLOP/s.
* ``--profile N``: torch.profiler over N steps of each model; prints the top ops
  by self CPU time (self CUDA time on GPUs) and the aten::copy_/select calls per step.
* ``--json PATH``: everything above, raw step times included.

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
from allocator_env import run_under

import operators.spectral as spectral_module
from mutransfer._allocator import TUNED_ENV
from operators.fno import FNO
from operators.parametrization import optimizer_param_groups
from operators.planning import step_flops
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


AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_step(model, optimizer, x, y, precision: str = "fp32"):
    """One training step as the trainer takes it (mutransfer._training.precision.training_step): the forward
    under autocast for bf16/fp16, the loss in float32, fp16 with the trainer's loss scaler (complex-safe)."""
    from mutransfer._training.precision import Precision, training_step

    amp = Precision(precision, x.device)
    return lambda: training_step(model, optimizer, amp, x, y)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn, device: torch.device) -> float:
    """Seconds of one call: perf_counter on CPU, CUDA events (after a synchronize) on GPUs."""
    if device.type == "cuda":
        synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def matmul_throughput(device: torch.device, repeats: int, n: int = 2048, dtype=torch.float32) -> dict:
    """FLOP/s of an n×n @ n×n matmul: median over ``repeats`` timed runs (after 2 untimed)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    inner = 10 if device.type == "cuda" else 1  # amortize the launch on GPUs

    def run():
        for _ in range(inner):
            torch.mm(a, b)

    for _ in range(2):
        run()
    times = [time_call(run, device) / inner for _ in range(repeats)]
    flops = 2.0 * n**3
    median = statistics.median(times)
    return {
        "n": n,
        "dtype": str(dtype).replace("torch.", ""),
        "median_s": median,
        "flops_per_s": flops / median,
        "max_flops_per_s": flops / min(times),
        "repeats": repeats,
    }


def measure_matmul(device: torch.device, repeats: int, precision: str) -> dict:
    """fp32 matmul throughput (on CUDA with TF32 off, the default, and on), plus the autocast dtype's."""
    out = {}
    if device.type == "cuda":
        previous = torch.backends.cuda.matmul.allow_tf32
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            out["fp32"] = matmul_throughput(device, repeats)
            torch.backends.cuda.matmul.allow_tf32 = True
            out["fp32_tf32"] = matmul_throughput(device, repeats)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
    else:
        out["fp32"] = matmul_throughput(device, repeats)
    if precision != "fp32":
        out[precision] = matmul_throughput(device, repeats, dtype=AUTOCAST_DTYPES[precision])
    return out


def profile_steps(step, n_steps: int, device: torch.device, rows: int = 15) -> dict:
    """torch.profiler over ``n_steps`` steps: top ops by self time and copy_/select calls per step."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(n_steps):
            step()
        synchronize(device)
    events = prof.key_averages()
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = events.table(sort_by=sort_by, row_limit=rows, max_name_column_width=60)
    total_cpu = sum(e.self_cpu_time_total for e in events)

    def key_time(e):
        return getattr(e, "self_device_time_total", 0) if device.type == "cuda" else e.self_cpu_time_total

    top = sorted(events, key=key_time, reverse=True)[:rows]
    calls = {e.key: e.count for e in events}
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]  # not the ops above them
    return {
        "steps": n_steps,
        "table": table,
        "self_cpu_total_ms_per_step": total_cpu / 1e3 / n_steps,
        "kernels_per_step": sum(e.count for e in kernels) / n_steps,
        "kernel_ms_per_step": sum(e.self_device_time_total for e in kernels) / 1e3 / n_steps,
        "top": [
            {
                "op": e.key,
                "calls_per_step": e.count / n_steps,
                "self_cpu_ms_per_step": e.self_cpu_time_total / 1e3 / n_steps,
                "self_cpu_percent": 100.0 * e.self_cpu_time_total / max(total_cpu, 1e-9),
                **({"self_cuda_ms_per_step": key_time(e) / 1e3 / n_steps} if device.type == "cuda" else {}),
            }
            for e in top
        ],
        "copy_calls_per_step": calls.get("aten::copy_", 0) / n_steps,
        "select_calls_per_step": calls.get("aten::select", 0) / n_steps,
    }


def summarize(times_s: list[float]) -> dict:
    ms = [t * 1e3 for t in times_s]
    q1, q2, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    return {
        "median_ms": q2,
        "iqr_ms": q3 - q1,
        "q1_ms": q1,
        "q3_ms": q3,
        "min_ms": min(ms),
        "n": len(ms),
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
        dim,
        1,
        1,
        args.modes,
        width=width,
        layers=args.layers,
        parametrization=args.parametrization,
        projection_channels=args.projection_channels,
        padding=0,
    ).to(args.device)
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
        ).to(args.device)
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


def set_implementation(contraction: str, transform: str) -> dict:
    """Flip the private before/after switch; return what this checkout runs."""
    if not hasattr(spectral_module, "_CONTRACTION"):  # the code from before the switch existed
        return {"contraction": "einsum (this checkout has no switch)", "transform": "rfftn/irfftn"}
    spectral_module._CONTRACTION = "einsum" if contraction == "einsum" else "bmm"
    spectral_module._TRANSFORM = transform
    resolved = transform if transform != "auto" else "auto (GEMMs on CPU for few modes per FFT length, else torch.fft)"
    return {"contraction": contraction, "transform": "rfftn/irfftn" if contraction == "einsum" else resolved}


MALLOC_ENV = TUNED_ENV  # the product's own settings (mutransfer._allocator)


def reexec_with_malloc_env(argv) -> None:
    """Restart this script with glibc's allocator told to use no mmap and never trim (benchmarks/allocator_env.py).

    Set at start-up through the environment (mallopt from inside a running process did
    not stop the page faults here): tensors above glibc's mmap threshold (up to 32 MiB)
    are otherwise mmap'd fresh and page-faulted in every step.
    """
    run_under("product", list(argv), __file__)


def minor_faults() -> int | None:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    except (ImportError, AttributeError):
        return None


def counted_matmul_flops(step) -> float | None:
    """Matmul FLOPs of one step as torch's FlopCounterMode counts them (the GEMMs really executed)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            step()
        return float(sum(counter.get_flop_counts()["Global"].values()))
    except Exception:  # an op without a flop formula, an older torch
        return None


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, choices=(1, 2, 3), default=2)
    p.add_argument("--modes", type=int, default=12, help="K, modes per sign per dimension (our convention)")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--grid", default="64", help="one size for every dim, or e.g. 32x32x16")
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads on CPU (ignored on CUDA)")
    p.add_argument(
        "--precision",
        choices=tuple(AUTOCAST_DTYPES),
        default="fp32",
        help="fp32, or the forward under autocast in bf16/fp16 (fp16 with loss scaling)",
    )
    p.add_argument(
        "--contraction",
        choices=("new", "einsum"),
        default="new",
        help="our spectral layer: the one-bmm contraction (new) or the former einsum formulation",
    )
    p.add_argument(
        "--transform",
        choices=("auto", "dft", "fft"),
        default="auto",
        help="truncated transform of the new path: GEMMs (dft) or torch.fft (fft); auto = "
        "operators.spectral._auto_transform (GEMMs on CPU when few modes are kept per FFT length)",
    )
    p.add_argument("--repeats", type=int, default=20, help="timed steps per model")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    p.add_argument("--matmul-repeats", type=int, default=10, help="timed 2048^2 matmuls for the MFU (0: skip)")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="profile N steps of each model (untimed)")
    p.add_argument("--projection-channels", type=int, default=128)
    p.add_argument("--parametrization", choices=("standard", "mup"), default="standard")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--keep-denormals",
        action="store_true",
        help="do not flush denormal floats to zero (by default flushed: as a step on random data trains on, "
        "subnormal values appear and slow CPU kernels by up to orders of magnitude, which times the "
        "training trajectory rather than the implementation)",
    )
    p.add_argument(
        "--malloc-no-mmap",
        action="store_true",
        help="glibc: serve all allocations from the heap and never trim it (fewer page faults per step)",
    )
    p.add_argument("--no-neuralop", action="store_true", help="time ours only")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the spectral-layer equivalence check")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-' for stdout)")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    flush_denormal = device.type == "cpu" and (not args.keep_denormals) and torch.set_flush_denormal(True)
    if args.malloc_no_mmap:
        reexec_with_malloc_env(sys.argv[1:] if argv is None else list(argv))
    malloc_tuned = all(os.environ.get(k) == v for k, v in MALLOC_ENV.items())
    implementation = set_implementation(args.contraction, args.transform)
    grid = parse_grid(args.grid, args.dim)
    ours, ours_opt, theirs, theirs_opt = build_models(args)
    ours.check_input(grid)

    torch.manual_seed(2)
    x = torch.randn(args.batch, *grid, 1).to(device)
    y = torch.randn(args.batch, *grid, 1).to(device)
    steps = {"ours": make_step(ours, ours_opt, x, y, args.precision)}
    models = {"ours": ours}
    if theirs is not None:
        # Same data, channel-first.
        steps["neuralop"] = make_step(
            theirs, theirs_opt, x.movedim(-1, 1).contiguous(), y.movedim(-1, 1).contiguous(), args.precision
        )
        models["neuralop"] = theirs

    flops = step_flops(
        args.dim,
        args.modes,
        args.width,
        args.layers,
        grid,
        batch=args.batch,
        projection_channels=args.projection_channels,
    )
    result = {
        "config": {
            "dim": args.dim,
            "modes_K": args.modes,
            "width": args.width,
            "layers": args.layers,
            "grid": list(grid),
            "batch": args.batch,
            "device": args.device,
            "threads": args.threads if device.type == "cpu" else None,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "projection_channels": args.projection_channels,
            "parametrization": args.parametrization,
            "precision": args.precision,
            "dtype": "float32" if args.precision == "fp32" else f"autocast {AUTOCAST_DTYPES[args.precision]}",
            "flush_denormal": flush_denormal,
            "implementation": implementation,
            "malloc_no_mmap": malloc_tuned,
            "malloc_env": {k: os.environ.get(k) for k in MALLOC_ENV},
        },
        "machine": {
            "torch": torch.__version__,
            "neuralop": getattr(neuralop, "__version__", None),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_before": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        },
        "step_flops": flops,
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
    if device.type == "cuda":
        for name, step in steps.items():
            synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            step()
            synchronize(device)
            result["models"][name]["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    matmul = measure_matmul(device, args.matmul_repeats, args.precision) if args.matmul_repeats > 0 else None
    times = {name: [] for name in steps}
    faults = {name: [] for name in steps}
    order = list(steps)
    for r in range(args.repeats):
        for name in order if r % 2 == 0 else order[::-1]:
            f0 = minor_faults()
            times[name].append(time_call(steps[name], device))
            if f0 is not None:
                faults[name].append(minor_faults() - f0)
    for name, ts in times.items():
        result["models"][name].update(summarize(ts))
        if faults[name]:
            result["models"][name]["minor_page_faults_per_step"] = statistics.median(faults[name])
    if "neuralop" in times:
        result["ratio_ours_over_neuralop"] = (
            result["models"]["ours"]["median_ms"] / result["models"]["neuralop"]["median_ms"]
        )
        result["speedup_ours_over_neuralop"] = 1.0 / result["ratio_ours_over_neuralop"]
    if matmul is not None:
        # Repeat the matmul after the steps too: the spread tells how much the machine moved.
        after = measure_matmul(device, args.matmul_repeats, "fp32")["fp32"]
        matmul["fp32_after_steps"] = after
        result["matmul"] = matmul
        peak = matmul["fp32"]["flops_per_s"]
        for name in steps:
            achieved = flops["total"] / (result["models"][name]["median_ms"] / 1e3)
            m = result["models"][name]
            m["achieved_flops_per_s"] = achieved
            m["mfu"] = achieved / peak
            m["mfu_vs_matmul_after"] = achieved / after["flops_per_s"]
            if device.type == "cuda":
                m["mfu_vs_tf32_matmul"] = achieved / matmul["fp32_tf32"]["flops_per_s"]
            if args.precision != "fp32":
                m[f"mfu_vs_{args.precision}_matmul"] = achieved / matmul[args.precision]["flops_per_s"]
    result["models"]["ours"]["counted_matmul_flops_per_step"] = counted_matmul_flops(steps["ours"])
    if args.profile > 0:
        for name, step in steps.items():
            result["models"][name]["profile"] = profile_steps(step, args.profile, device)
    result["machine"]["load_average_after"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None

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
    where = f"threads={c['threads']}" if c["device"] == "cpu" else f"device={result['machine']['gpu']}"
    impl = c["implementation"]
    print(
        f"FNO-{c['dim']}D training step  K={c['modes_K']} width={c['width']} layers={c['layers']} "
        f"grid={grid} batch={c['batch']} {where} precision={c['precision']} flush_denormal={c['flush_denormal']}  "
        f"(torch {result['machine']['torch']}, neuralop {result['machine']['neuralop']})"
    )
    print(
        f"  ours: contraction={impl['contraction']} transform={impl['transform']}  "
        f"malloc_no_mmap={c['malloc_no_mmap']}  load average before {result['machine']['load_average_before']}"
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
        line = (
            f"  {name:9s} median {m['median_ms']:9.2f} ms  IQR {m['iqr_ms']:7.2f} ms  min {m['min_ms']:9.2f} ms  "
            f"(n={m['n']})  params {m['params']:,}  spectral complex params {m['spectral_complex_params']:,}"
        )
        if "mfu" in m:
            line += f"  MFU {m['mfu']:.3f}"
        if "minor_page_faults_per_step" in m:
            line += f"  page faults/step {m['minor_page_faults_per_step']:,.0f}"
        if "max_memory_allocated_bytes" in m:
            line += f"  max_memory_allocated {m['max_memory_allocated_bytes'] / 2**20:,.1f} MiB"
        print(line)
    if "matmul" in result:
        mm = result["matmul"]
        parts = [f"{k} {v['flops_per_s'] / 1e9:,.1f} GFLOP/s" for k, v in mm.items()]
        print(
            f"  2048^2 matmul (median): {', '.join(parts)}; step FLOPs (operators.planning.step_flops) "
            f"{result['step_flops']['total'] / 1e9:.3f} G"
        )
    counted = result["models"]["ours"].get("counted_matmul_flops_per_step")
    if counted:
        print(f"  ours: matmul FLOPs actually executed per step (FlopCounterMode) {counted / 1e9:.3f} G")
    if "ratio_ours_over_neuralop" in result:
        print(
            f"  ratio ours/neuralop (median) = {result['ratio_ours_over_neuralop']:.3f}  "
            f"(ours {result['speedup_ours_over_neuralop']:.2f}x faster)"
        )
    else:
        print(f"  neuralop not timed: {result.get('neuralop_missing')}")
    for name, m in result["models"].items():
        if "profile" in m:
            prof = m["profile"]
            print(
                f"  profile of {name} over {prof['steps']} steps: aten::copy_ {prof['copy_calls_per_step']:.0f} "
                f"and aten::select {prof['select_calls_per_step']:.0f} calls per step"
                + (
                    f"; {prof['kernels_per_step']:.0f} GPU kernels, {prof['kernel_ms_per_step']:.2f} ms of them per step"
                    if prof["kernels_per_step"]
                    else ""
                )
            )
            print(prof["table"])
    sys.stdout.flush()


if __name__ == "__main__":
    main()
