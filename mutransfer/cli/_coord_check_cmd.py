"""`mutransfer coord-check`: does the update at a fixed LR stay flat in K under each parametrization?

With ``--operator FACTORY`` (a user's model, docs/byo.md) it is the conformance kit's check over K instead
(mutransfer._diagnostics.k_coord_check.k_coord_check): the layers holding the parameters its muP facts mark spectral.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from mutransfer._diagnostics import coord_check as coord_checking
from mutransfer._diagnostics.coord_check import check_coord_check_inputs
from mutransfer._diagnostics.coord_plot import plot_coord_check
from mutransfer._diagnostics.k_coord_check import k_coord_check
from mutransfer._diagnostics.operator_check import TOLERANCE as KIT_TOLERANCE
from mutransfer._problems import PROBLEMS
from mutransfer._study.inputs import check_folder
from mutransfer.cli._check_operator_cmd import factory_options, load_named_factory
from mutransfer.cli._common import non_negative_float, non_negative_int, positive_float, positive_int, print_json
from mutransfer.cli._data_cmd import add_reader_arguments
from mutransfer.cli._outputs import check_outside_kept_folders
from mutransfer.cli._train_cmd import resolve_data
from mutransfer.data._loading import SplitData, StreamingSplit
from mutransfer.errors import UserInputError
from operators.errors import OperatorConfigError
from operators.parametrization import PARAMETRIZATIONS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "coord-check",
        help="check that the update after a few Adam steps at a fixed LR stays flat as K grows",
        description="For each K, parametrization and seed: take a few Adam steps at --lr on the training data and "
        "measure the RMS change of the network's output and of every Fourier layer's output on its own fixed input. "
        "Per seed the log-log slope in K is fitted; the mean slope with a 95% Student-t CI over seeds (no CI with "
        "one seed) gives the verdict "
        "flat / grows / shrinks / unresolved / no-signal. A parametrization passes when the output and every "
        "fourier_l curve are flat.",
    )
    p.add_argument(
        "--operator",
        metavar="FACTORY",
        help="a user's factory (module:function, or an installed plug-in's name) instead of the project's FNO: the "
        "conformance kit's check over K (one Adam step; flat under the muP facts, and a wrong K rule must grow)",
    )
    p.add_argument(
        "--options",
        default="{}",
        help="with --operator: the factory's other arguments as a YAML mapping, e.g. '{layers: 2}' (default: {})",
    )
    p.add_argument("--problem", choices=sorted(PROBLEMS), default="burgers", help="PDE problem (default: burgers)")
    p.add_argument(
        "--data",
        help="HDF5/NumPy dataset, e.g. written by `mutransfer data generate` (default: the problem's cached dataset)",
    )
    p.add_argument(
        "--modes", type=positive_int, nargs="+", default=[4, 8, 16, 32], help="values of K (default 4 8 16 32)"
    )
    p.add_argument(
        "--parametrization",
        nargs="+",
        choices=PARAMETRIZATIONS,
        default=["standard", "mup"],
        help="parametrizations to compare (default: standard mup)",
    )
    p.add_argument("--width", type=positive_int, default=32, help="FNO width (default: 32)")
    p.add_argument("--layers", type=positive_int, default=4, help="Fourier layers (default: 4)")
    p.add_argument("--padding", type=non_negative_int, help="default: the problem's")
    p.add_argument(
        "--lr",
        type=non_negative_float,
        default=1e-3,
        help="master learning rate of the Adam steps (0 takes no step: every curve reads no-signal) (default: 1e-3)",
    )
    p.add_argument(
        "--steps", type=positive_int, default=3, help="Adam steps before the change is measured (default: 3)"
    )
    p.add_argument("--batch-size", type=positive_int, default=10, help="samples per step (default: 10)")
    p.add_argument("--clip-value", type=positive_float, help="element-wise clip of spectral gradients")
    p.add_argument("--seeds", type=positive_int, default=3, help="seeds; one slope per seed, CI over seeds (default 3)")
    p.add_argument(
        "--tolerance",
        type=positive_float,
        default=0.1,
        help="flat when the slope's 95%% CI lies within +-tolerance (default 0.1)",
    )
    p.add_argument(
        "--n-train",
        type=positive_int,
        help="training samples to draw batches from (default: 50 of the problem's dataset; with --data, "
        "all but --n-test)",
    )
    p.add_argument("--n-test", type=positive_int, help="held-out samples (default: 10; with --data, a fifth)")
    p.add_argument(
        "--resolution", type=positive_int, help="grid resolution, reached by striding (default: the problem's)"
    )
    p.add_argument(
        "--out", default="coord-check", help="folder for coord_check.png and coord_check.json (default: coord-check)"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_reader_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.data is None:  # the problem's own dataset: a small slice is enough for a few steps
        args.n_train, args.n_test = args.n_train or 50, args.n_test or 10
    out = Path(args.out)
    check_outside_kept_folders(out, flag="--out")  # before the data is generated or read (and before any probe)
    check_folder("--out", out)
    if args.operator is not None:
        _refuse_fno_flags(args)
        factory, options = load_named_factory(args.operator, flag="--operator"), factory_options(args.options)
        problem, data, _, _ = resolve_data(args)
        return _run_factory(args, factory, options, problem.name, data, out)
    problem, data, _, _ = resolve_data(args)
    sizes = dict(
        dim=problem.dim,
        modes=args.modes,
        width=args.width,
        layers=args.layers,
        padding=problem.padding if args.padding is None else args.padding,
        lr=args.lr,
        steps=args.steps,
        batch_size=args.batch_size,
        seeds=args.seeds,
        tolerance=args.tolerance,
    )
    check_coord_check_inputs(data, **sizes)  # K against the grid, memory: before any model is built
    result = coord_checking.coord_check(  # looked up at call time (tests patch it)
        data, parametrizations=tuple(args.parametrization), clip_value=args.clip_value, **sizes
    )
    out.mkdir(parents=True, exist_ok=True)
    payload = result.as_dict() | {"problem": problem.name, "plot": str(out / "coord_check.png")}
    (out / "coord_check.json").write_text(json.dumps(payload, indent=2))
    plot_coord_check(result, out / "coord_check.png")
    if args.json:
        print_json(payload)
        return 0
    print(
        f"coordinate check on {problem.name}, K = {sorted(set(args.modes))}, {args.steps} Adam steps at lr {args.lr:g}, "
        f"{args.seeds} seeds; flat = 95% CI of the log-log slope within +-{args.tolerance}"
    )
    for parametrization in result.parametrizations():
        print(f"  {parametrization}: {result.verdict(parametrization).upper()}")
        for curve in (c for c in result.curves if c.parametrization == parametrization):
            gate = "" if curve.gated else "  (reported, not gated)"
            print(f"    {curve.describe()}{gate}")
    print(f"plot: {out / 'coord_check.png'}")
    return 0


#: the flags that size or run the project's FNO, with their defaults: refused with --operator when changed
_FNO_FLAGS = {
    "parametrization": ["standard", "mup"],
    "layers": 4,
    "padding": None,
    "steps": 3,
    "clip_value": None,
    "tolerance": 0.1,
}


def _refuse_fno_flags(args: argparse.Namespace) -> None:
    for name, default in _FNO_FLAGS.items():
        if getattr(args, name) != default:
            flag = "--" + name.replace("_", "-")
            raise UserInputError(
                f"{flag} sizes or runs the project's FNO, not --operator {args.operator}: drop it (a factory's own "
                "arguments go in --options)"
            )


def _run_factory(
    args: argparse.Namespace,
    factory: Callable[..., nn.Module],
    options: dict[str, object],
    problem: str,
    data: SplitData | StreamingSplit,
    out: Path,
) -> int:
    """``coord-check --operator``: the kit's check over K on ``args.batch_size`` training samples of ``data``."""
    n = min(args.batch_size, int(data.train_x.shape[0]))
    x = torch.as_tensor(data.train_x[:n], dtype=torch.float32)
    y = torch.as_tensor(data.train_y[:n], dtype=torch.float32)
    modes = tuple(sorted(set(args.modes)))
    try:
        found = k_coord_check(
            factory, name=args.operator, options=options, x=x, y=y, modes=modes, width=args.width, lr=args.lr,
            seeds=args.seeds,
        )  # fmt: skip
    except RuntimeError as exc:  # the model's own forward failed (e.g. K beyond the grid): one line
        raise OperatorConfigError(
            f"--operator {args.operator}: the model failed at K = {list(modes)}, width {args.width} on a batch of "
            f"shape {tuple(x.shape)} (B, *grid, C): {' '.join(str(exc).split())[:300]}"
        ) from None
    out.mkdir(parents=True, exist_ok=True)
    payload = found.as_dict() | {"problem": problem, "operator": args.operator}
    (out / "coord_check.json").write_text(json.dumps(payload, indent=2))
    if args.json:
        print_json(payload)
        return 0
    print(
        f"coordinate check of {found.model_class} ({args.operator}) on {problem}, K = {list(modes)}, width "
        f"{args.width}, one Adam step at lr {args.lr:g}, {args.seeds} seeds; flat = 95% CI of the log-log slope "
        f"within +-{KIT_TOLERANCE}"
    )
    for curve in found.curves:
        print(f"  {curve.describe()}")
    print(f"  {found.verdict.upper()}" + "".join(f"\n    - {line}" for line in found.flagged))
    print(f"json: {out / 'coord_check.json'}")
    return 0
