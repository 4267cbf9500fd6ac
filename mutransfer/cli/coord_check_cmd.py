"""`mutransfer coord-check`: are the spectral layers' sizes flat in K under each parametrization?"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mutransfer.cli.common import non_negative_int, positive_float, positive_int, print_json


def add_parser(subparsers) -> None:
    from mutransfer.problems import PROBLEMS
    from operators.parametrization import PARAMETRIZATIONS

    p = subparsers.add_parser(
        "coord-check",
        help="check that layer and update sizes stay flat as K grows (muP) or flag that they grow (SP)",
        description="For each K, record the mean |x| of every layer's output and of the spectral layers applied to a "
        "scale-invariant probe (power ~ |k|^-d), at init and after a few Adam steps on real data. A curve is flat when "
        "its log-log slope in K is within the tolerance; the gate passes when every spectral curve is flat.",
    )
    p.add_argument("--problem", choices=sorted(PROBLEMS), default="burgers", help="PDE problem (default: burgers)")
    p.add_argument("--data", help="HDF5 dataset (default: the problem's cached dataset)")
    p.add_argument("--modes", type=positive_int, nargs="+", default=[4, 8, 16, 32], help="values of K (default 4 8 16 32)")
    p.add_argument("--parametrization", nargs="+", choices=PARAMETRIZATIONS, default=["standard", "mup"])
    p.add_argument("--width", type=positive_int, default=32)
    p.add_argument("--layers", type=positive_int, default=4)
    p.add_argument("--padding", type=non_negative_int, help="default: the problem's")
    p.add_argument("--lr", type=positive_float, default=1e-3, help="master learning rate of the Adam steps")
    p.add_argument("--steps", type=positive_int, default=3, help="Adam steps before the update is measured")
    p.add_argument("--batch-size", type=positive_int, default=10)
    p.add_argument("--clip-value", type=positive_float, help="element-wise clip of spectral gradients")
    p.add_argument("--seeds", type=positive_int, default=2, help="seeds averaged per point")
    p.add_argument("--tolerance", type=positive_float, default=0.1, help="max |log-log slope| for 'flat' (default 0.1)")
    p.add_argument("--n-train", type=positive_int, default=50, help="training samples to draw batches from")
    p.add_argument("--n-test", type=positive_int, default=10)
    p.add_argument("--resolution", type=positive_int)
    p.add_argument("--out", default="coord-check", help="folder for coord_check.png and coord_check.json")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mutransfer.cli.train_cmd import resolve_data
    from mutransfer.diagnostics.coord_check import coord_check, plot_coord_check

    problem, data, _ = resolve_data(args)
    result = coord_check(
        data,
        dim=problem.dim,
        modes=args.modes,
        parametrizations=tuple(args.parametrization),
        width=args.width,
        layers=args.layers,
        padding=problem.padding if args.padding is None else args.padding,
        lr=args.lr,
        steps=args.steps,
        batch_size=args.batch_size,
        clip_value=args.clip_value,
        seeds=args.seeds,
        tolerance=args.tolerance,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = result.as_dict() | {"problem": problem.name, "plot": str(out / "coord_check.png")}
    (out / "coord_check.json").write_text(json.dumps(payload, indent=2))
    plot_coord_check(result, out / "coord_check.png")
    if args.json:
        print_json(payload)
        return 0
    print(f"coordinate check on {problem.name}, K = {sorted(set(args.modes))}, {args.steps} Adam steps, "
          f"tolerance |slope| <= {args.tolerance}")
    for parametrization in result.parametrizations():
        curves = [c for c in result.curves if c.parametrization == parametrization]
        print(f"  {parametrization}: {'PASS' if result.passed(parametrization) else 'FLAGGED'}")
        for curve in curves:
            mark = "flat" if curve.flat else "grows" if curve.slope > 0 else "shrinks"
            gate = "" if curve.gated else "  (reported, not gated)"
            print(f"    {curve.kind:<16} {curve.layer:<10} slope {curve.slope:+.3f}  {mark}{gate}")
    print(f"plot: {out / 'coord_check.png'}")
    return 0
