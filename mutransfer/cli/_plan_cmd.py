"""`mutransfer plan`: parameter counts and training memory of an FNO, without allocating it."""

from __future__ import annotations

import argparse

from mutransfer._training.memory import available_memory
from mutransfer.cli._common import (
    BUILTIN_STUDY,
    memory_size,
    non_negative_float,
    non_negative_int,
    positive_int,
    print_json,
    study_argument,
)
from mutransfer.errors import UserInputError
from operators.planning import format_bytes, largest_batch, plan_fno
from operators.precision import PRECISIONS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="count parameters and estimate training memory of an FNO (nothing is allocated)",
        description="Parameter counts (a complex spectral entry counts once) and the peak memory of one Adam "
        "training step at a precision (fp32, or bf16/fp16 mixed precision): weights, gradients, Adam states, "
        "activations saved for backward, workspace, Adam's temporaries; and whether it fits a device's memory "
        "(--device-memory, default: this machine's free GPU memory, else its available RAM) and the largest batch "
        "that fits.",
    )
    p.add_argument("--dim", type=positive_int, help="number of truncated dimensions d (1, 2 or 3)")
    p.add_argument("--modes", type=positive_int, help="K, modes per sign per truncated dimension")
    p.add_argument("--width", type=positive_int, help="hidden channels m")
    p.add_argument("--layers", type=positive_int, help="Fourier layers L")
    p.add_argument("--grid", type=positive_int, nargs="+", help="grid size per axis (one value for all axes)")
    p.add_argument(
        "--batch-size",
        "--batch",
        dest="batch",
        type=positive_int,
        default=1,
        help="batch size for the activation estimate (default: 1)",
    )
    p.add_argument("--padding", type=non_negative_int, default=0, help="padding points per axis")
    p.add_argument("--in-channels", type=positive_int, default=1, help="input channels of the model (default: 1)")
    p.add_argument("--out-channels", type=positive_int, default=1, help="output channels of the model (default: 1)")
    p.add_argument(
        "--projection-channels",
        type=positive_int,
        default=128,
        help="FNO: hidden size of the projection MLP (default: 128)",
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="training precision: fp32, or bf16/fp16 mixed precision (default fp32)",
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="where the step runs: Adam's temporaries differ (multi-tensor on GPUs, per tensor on CPUs; default cuda)",
    )
    p.add_argument(
        "--device-memory",
        type=memory_size,
        metavar="SIZE",
        help="memory of the device to fit, e.g. 80GiB or 24GB (default: this machine's free GPU memory, "
        "else its available RAM)",
    )
    p.add_argument(
        "--weight-decay",
        type=non_negative_float,
        default=0.0,
        help="Adam weight decay (> 0 doubles Adam's temporaries; default 0)",
    )
    p.add_argument(
        "--study",
        nargs="?",
        const=BUILTIN_STUDY,
        metavar="FILE",
        help="instead of one FNO: a study file's proxy against its target, the cost line `mutransfer sweep` says "
        "before training (FLOPs per epoch, a measured step, the expected cost against tuning the target directly); "
        "--study alone: the built-in default study",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(run=run)


def _run_study(args: argparse.Namespace) -> int:
    from mutransfer._study import load_study  # noqa: PLC0415 -- deferred: the study reader, only for --study
    from mutransfer._sweep.cost_estimate import estimate_proxy_cost  # noqa: PLC0415

    study, _ = load_study(study_argument(args.study))
    cost = estimate_proxy_cost(study)
    if args.json:
        print_json({"study": study.name, **cost.as_dict()})
    else:
        print(f"study {study.name}: {study.model_text(False)} proxy, {study.model_text(True)} target")
        print(cost.line())
    return 0


def run(args: argparse.Namespace) -> int:
    if args.study is not None:
        given = [f"--{name}" for name in ("dim", "modes", "width", "layers", "grid") if getattr(args, name) is not None]
        if given:
            raise UserInputError(f"--study takes the models from the study file; drop {', '.join(given)}")
        return _run_study(args)
    missing = [f"--{name}" for name in ("dim", "modes", "width", "layers") if getattr(args, name) is None]
    if missing:
        raise UserInputError(f"give {', '.join(missing)} (one FNO), or --study FILE (a study's proxy and target)")
    options = dict(
        in_channels=args.in_channels,
        out_channels=args.out_channels,
        projection_channels=args.projection_channels,
        padding=args.padding,
        precision=args.precision,
        weight_decay=args.weight_decay,
        device=args.device,
    )
    grid = tuple(args.grid) if args.grid else None
    plan = plan_fno(args.dim, args.modes, args.width, args.layers, grid=grid, batch=args.batch, **options)
    if args.device_memory is not None:
        memory, device = args.device_memory, "--device-memory"
    else:
        memory, device = available_memory(None if args.device == "cuda" else "cpu")
    fit = {
        "device": device,
        "device_memory_bytes": memory,
        "fits": plan.fits(memory),
        "largest_batch": None if grid is None else largest_batch(plan, memory),
    }
    if args.json:
        print_json({**plan.as_dict(), **fit})
        return 0
    print(f"{plan.label}, {plan.layers} layers")
    print(
        f"  spectral parameters   {plan.spectral_params:>16,}  ({plan.spectral_params_per_layer:,} per layer, complex)"
    )
    print(f"  other parameters      {plan.other_params:>16,}")
    print(f"  total parameters      {plan.total_params:>16,}")
    print(f"  weights (fp32)        {format_bytes(plan.weights_bytes):>16}")
    print(f"  gradients (fp32)      {format_bytes(plan.gradients_bytes):>16}")
    print(f"  Adam states           {format_bytes(plan.adam_bytes):>16}")
    kind = "multi-tensor Adam (GPU)" if plan.device == "cuda" else "per-tensor Adam (CPU)"
    print(f"  Adam temporaries      {format_bytes(plan.optimizer_workspace_bytes):>16}  ({kind}, at the step)")
    if plan.library_workspace_bytes:
        print(
            f"  BLAS workspaces       {format_bytes(plan.library_workspace_bytes):>16}  (cuBLAS + cuBLASLt, held throughout)"
        )
    if plan.activations_bytes is None:
        print("  activations           (give --grid and --batch to estimate)")
    else:
        grid_text = "x".join(str(n) for n in plan.grid)
        print(
            f"  activations           {format_bytes(plan.activations_bytes):>16}  (grid {grid_text}, batch {plan.batch})"
        )
        print(f"  projection gradients  {format_bytes(plan.workspace_bytes):>16}  (at the start of backward)")
        print(f"  a layer's gradient    {format_bytes(plan.layer_gradient_bytes):>16}  (at the end of backward)")
    print(
        f"  peak of one step      {format_bytes(plan.total_bytes):>16}  (backward {format_bytes(plan.backward_peak_bytes)}, "
        f"optimizer step {format_bytes(plan.step_peak_bytes)})"
    )
    verdict = "fits" if fit["fits"] else "does NOT fit"
    print(f"  {verdict} in {format_bytes(memory)} ({device})", end="")
    if fit["largest_batch"] is not None:
        print(f"; largest batch that fits: {fit['largest_batch']}" if fit["largest_batch"] else "; no batch fits")
    else:
        print()
    return 0
