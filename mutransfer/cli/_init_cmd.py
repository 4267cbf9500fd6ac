"""`mutransfer init`: write a commented study file for your problem, data and operator, that runs as written."""

from __future__ import annotations

import argparse
from pathlib import Path

from mutransfer._problems import PROBLEMS
from mutransfer._study.template import new_study, study_text
from mutransfer.cli._outputs import check_out
from operators.registry import OPERATORS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "init",
        help="write a commented study file for your problem, data and operator (NAME.yaml)",
        description="Write NAME.yaml: the quick study adapted to --problem, --data and --operator (sizes the data's "
        "grid cannot hold shrunk), checked like every study, each field with its meaning as a comment. Run it with "
        "`mutransfer sweep --study NAME.yaml`.",
    )
    p.add_argument(
        "name", nargs="?", default="my-study", help="the study's name, and its file NAME.yaml (default: my-study)"
    )
    p.add_argument("--problem", choices=sorted(PROBLEMS), default="burgers", help="the PDE problem (default: burgers)")
    p.add_argument(
        "--data",
        metavar="FILE",
        help="your data file (any format `mutransfer data inspect` reads; default: the problem's generated data)",
    )
    p.add_argument("--operator", choices=list(OPERATORS), default="fno", help="the operator family (default: fno)")
    p.add_argument("--out", metavar="FILE", help="where to write the study (default: NAME.yaml here)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    out = check_out(args.out or f"{args.name}.yaml", force=args.force, example=f"{args.name}.yaml")
    data = None if args.data is None else Path(args.data).absolute()
    study = new_study(args.name, problem=args.problem, data=data, operator=args.operator)
    out.write_text(study_text(study, folder=out.absolute().parent))
    sizes = f"K {study.proxy_K} -> {study.target_K}, " if study.family.scales("K") else ""
    print(
        f"wrote {out}: {study.problem.name} on {study.problem.data or 'generated data'}, {args.operator}, "
        f"{sizes}width {study.operator.width} -> {study.target_width}; run it with `mutransfer sweep --study {out}`"
    )
    return 0
