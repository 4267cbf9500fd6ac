"""`mutransfer plan`: parameter counts and training memory of an FNO, without allocating it."""

from __future__ import annotations

import argparse

from mutransfer.cli.common import non_negative_int, positive_int, print_json


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="count parameters and estimate training memory of an FNO (nothing is allocated)",
        description="Parameter counts (a complex spectral entry counts once) and an estimate of the memory of one "
        "Adam training step in float32: weights, gradients, Adam states, activations saved for backward, workspace.",
    )
    p.add_argument("--dim", type=positive_int, required=True, help="number of truncated dimensions d (1, 2 or 3)")
    p.add_argument("--modes", type=positive_int, required=True, help="K, modes per sign per truncated dimension")
    p.add_argument("--width", type=positive_int, required=True, help="hidden channels m")
    p.add_argument("--layers", type=positive_int, required=True, help="Fourier layers L")
    p.add_argument("--grid", type=positive_int, nargs="+", help="grid size per axis (one value for all axes)")
    p.add_argument("--batch", type=positive_int, default=1, help="batch size for the activation estimate")
    p.add_argument("--padding", type=non_negative_int, default=0, help="padding points per axis")
    p.add_argument("--in-channels", type=positive_int, default=1)
    p.add_argument("--out-channels", type=positive_int, default=1)
    p.add_argument("--projection-channels", type=positive_int, default=128)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from operators.planning import format_bytes, plan_fno

    plan = plan_fno(
        args.dim,
        args.modes,
        args.width,
        args.layers,
        grid=tuple(args.grid) if args.grid else None,
        batch=args.batch,
        in_channels=args.in_channels,
        out_channels=args.out_channels,
        projection_channels=args.projection_channels,
        padding=args.padding,
    )
    if args.json:
        print_json(plan.as_dict())
        return 0
    print(f"FNO-{plan.dim}D  K={plan.modes}  width={plan.width}  layers={plan.layers}")
    print(f"  spectral parameters   {plan.spectral_params:>16,}  ({plan.spectral_params_per_layer:,} per layer, complex)")
    print(f"  other parameters      {plan.other_params:>16,}")
    print(f"  total parameters      {plan.total_params:>16,}")
    print(f"  weights               {format_bytes(plan.weights_bytes):>16}")
    print(f"  gradients             {format_bytes(plan.gradients_bytes):>16}")
    print(f"  Adam states           {format_bytes(plan.adam_bytes):>16}")
    if plan.activations_bytes is None:
        print("  activations           (give --grid and --batch to estimate)")
    else:
        grid = "x".join(str(n) for n in plan.grid)
        print(f"  activations           {format_bytes(plan.activations_bytes):>16}  (grid {grid}, batch {plan.batch})")
        print(f"  workspace (estimate)  {format_bytes(plan.workspace_bytes):>16}")
    print(f"  training step total   {format_bytes(plan.total_bytes):>16}")
    return 0
