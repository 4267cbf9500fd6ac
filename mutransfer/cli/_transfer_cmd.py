"""`mutransfer transfer`: rescale tuned hyperparameters from a proxy to a target (K, width, or both)."""

from __future__ import annotations

import argparse

from mutransfer._config.flags import add_flags
from mutransfer._config.settings import REQUIRED
from mutransfer._study import load_study
from mutransfer._study.schema import OperatorSpec, TrainingSpec
from mutransfer.cli._common import BUILTIN_STUDY, positive_int, print_json, study_argument
from mutransfer.errors import UserInputError
from operators.parametrization import PARAMETRIZATIONS
from operators.transfer import Scaling, transfer
from operators.width_mup import WIDTH_PARAMETRIZATIONS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "transfer",
        help="rescale hyperparameters tuned on a proxy to the target (Algorithm 1 in K, width-muP in the width)",
        description="Rescale hyperparameters tuned on a proxy (K_proxy modes, width m0) to a target (K_target, "
        "width m). The master LR and the init scale carry over (the muP model applies its multipliers itself); the "
        "table shows the effective spectral LR and init std, which scale by sqrt(log Kp / log Kt) under muP in K, "
        "and the width rules (hidden LR x m0/m, readout x m0/m) under width-muP. The same function runs in "
        "`mutransfer sweep` (operators.transfer.transfer).",
    )
    p.add_argument(
        "--study",
        nargs="?",
        const=BUILTIN_STUDY,
        metavar="FILE",
        help="take d, K, the widths, the parametrizations and the grids from a study file (--study alone: the "
        "built-in default study), instead of --dim/--proxy-K/--target-K/--width/...",
    )
    p.add_argument("--dim", type=positive_int, help="number of truncated dimensions d (1, 2 or 3)")
    p.add_argument("--proxy-K", dest="proxy_modes", type=positive_int, help="modes of the proxy")
    p.add_argument("--target-K", dest="target_modes", type=positive_int, help="modes of the target")
    p.add_argument(
        "--parametrization", choices=PARAMETRIZATIONS, default="mup", help="the K-parametrization (default: mup)"
    )
    p.add_argument(
        "--width",
        type=positive_int,
        default=DEFAULT_WIDTH,
        help=f"the proxy's width m0, for the effective init std (default: {DEFAULT_WIDTH}, operator.width's default)",
    )
    p.add_argument("--target-width", type=positive_int, help="the target's width m (default: the proxy's)")
    p.add_argument(
        "--width-parametrization",
        choices=WIDTH_PARAMETRIZATIONS,
        default="mup",
        help="the width rule when the width changes (default: mup)",
    )
    p.add_argument(
        "--proxy-resolution",
        type=positive_int,
        help="grid points per space axis the proxy trained on (with --target-resolution; carried over: factor 1)",
    )
    p.add_argument("--target-resolution", type=positive_int, help="grid points per space axis of the target")
    add_flags(p, TrainingSpec, ["lr"], defaults={"lr": REQUIRED})
    add_flags(
        p,
        TrainingSpec,
        ["init_scale"],
        suppress_default=True,
        note="carried over; with it the table shows the effective init std",
    )
    add_flags(
        p,
        TrainingSpec,
        ["batch_size", "weight_decay", "clip_value"],
        suppress_default=True,
        note="carried over unchanged",
    )
    p.add_argument("--beta2", type=float, help="Adam beta2, carried over unchanged")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.beta2 is not None and not 0 < args.beta2 < 1:
        raise UserInputError(f"--beta2 {args.beta2}: must be in (0, 1), e.g. 0.99")
    unchanged = {
        name: getattr(args, name)
        for name in ("batch_size", "beta2", "weight_decay", "clip_value")
        if getattr(args, name) is not None
    }
    scaling = _study_scaling(args) if args.study is not None else _flag_scaling(args)
    record = transfer(scaling, args.lr, init_scale=args.init_scale, unchanged=unchanged)
    if args.json:
        print_json(record.as_dict())
    else:
        print(record.format_table())
    return 0


#: the proxy's width when none is given: operator.width's declared default
DEFAULT_WIDTH: int = OperatorSpec().width

#: the flags a study file replaces
_MODEL_FLAGS = ("dim", "proxy_modes", "target_modes", "target_width", "proxy_resolution", "target_resolution")


def _flag_scaling(args: argparse.Namespace) -> Scaling:
    missing = [
        flag
        for flag, name in (("--dim", "dim"), ("--proxy-K", "proxy_modes"), ("--target-K", "target_modes"))
        if getattr(args, name) is None
    ]
    if missing:
        raise UserInputError(f"give {', '.join(missing)}, or --study FILE to take them from a study")
    if (args.proxy_resolution is None) != (args.target_resolution is None):
        raise UserInputError("--proxy-resolution and --target-resolution go together: give both, or neither")
    return Scaling(
        args.dim,
        args.proxy_modes,
        args.target_modes,
        args.parametrization,
        proxy_width=args.width,
        target_width=args.target_width or args.width,
        width_parametrization=args.width_parametrization,
        proxy_resolution=args.proxy_resolution,
        target_resolution=args.target_resolution,
    )


def _study_scaling(args: argparse.Namespace) -> Scaling:
    given = [name for name in _MODEL_FLAGS if getattr(args, name) is not None]
    if given or args.width != DEFAULT_WIDTH:
        flags = ", ".join("--" + n.replace("_modes", "-K").replace("_", "-") for n in given) or "--width"
        raise UserInputError(f"--study takes the model from the study file; drop {flags} (or drop --study)")
    study, _ = load_study(study_argument(args.study))
    return study.sized().transfer_scaling()
