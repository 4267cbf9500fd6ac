"""`mutransfer data generate|inspect`: PDE datasets in the project's HDF5 schema."""

from __future__ import annotations

import argparse
import time

from mutransfer.cli.common import non_negative_int, positive_int, print_json


def add_parser(subparsers) -> None:
    from mutransfer.problems import PROBLEMS

    data = subparsers.add_parser("data", help="generate or inspect PDE datasets (HDF5)")
    sub = data.add_subparsers(dest="data_command", metavar="{generate,inspect}", required=True)

    gen = sub.add_parser(
        "generate",
        help="solve a PDE for random inputs and write an HDF5 file",
        description="Generate input/output pairs with the project's numerical solvers; deterministic from --seed.",
    )
    gen.add_argument("problem", choices=sorted(PROBLEMS), help="which PDE")
    gen.add_argument("--n", type=positive_int, required=True, help="number of samples")
    gen.add_argument("--resolution", type=positive_int, required=True, help="grid points per axis")
    gen.add_argument("--out", required=True, help="output HDF5 file")
    gen.add_argument("--seed", type=non_negative_int, default=0)
    gen.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    gen.set_defaults(run=run_generate)

    ins = sub.add_parser("inspect", help="describe an HDF5 dataset")
    ins.add_argument("file")
    ins.add_argument("--json", action="store_true", help="print the description as JSON")
    ins.set_defaults(run=run_inspect)


def run_generate(args: argparse.Namespace) -> int:
    from mutransfer.data.hdf5_io import write_dataset
    from mutransfer.problems import get_problem

    problem = get_problem(args.problem)
    start = time.perf_counter()
    data = problem.generator(args.n, args.resolution, seed=args.seed, progress=args.progress)
    write_dataset(args.out, data)
    print(f"wrote {args.n} {problem.name} samples at resolution {args.resolution} to {args.out} "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from mutransfer.data.hdf5_io import inspect_dataset

    info = inspect_dataset(args.file)
    if args.json:
        print_json(info)
        return 0
    for key, value in info.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for sub_key, sub_value in value.items():
                print(f"  {sub_key}: {sub_value}")
        else:
            print(f"{key}: {value}")
    return 0
