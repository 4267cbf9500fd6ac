"""`mutransfer data generate|inspect`: PDE datasets in the project's HDF5 schemas (grids and point sets)."""

from __future__ import annotations

import argparse
import time

from mutransfer._config import smoke
from mutransfer._problems import PROBLEMS, get_problem
from mutransfer._problems.datasets import writer_for
from mutransfer._training.hyperparameters import MAX_SEED
from mutransfer.cli._common import (
    int_from_0_to,
    non_negative_float,
    positive_float,
    positive_int,
    print_json,
)
from mutransfer.cli._outputs import check_out
from mutransfer.data._pointclouds import inspect_point_dataset, is_point_file
from mutransfer.data._problem_facts import get_facts
from mutransfer.data._readers import describe
from mutransfer.data._streaming import available_memory
from mutransfer.errors import UserInputError
from operators.planning import format_bytes


def add_parser(subparsers) -> None:
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
    gen.add_argument(
        "--out",
        required=True,
        help="output HDF5 file (an existing file is kept unless --force; never a tracking store or a file of a study "
        "or model folder)",
    )
    gen.add_argument("--force", action="store_true", help="replace --out if it exists")
    gen.add_argument(
        "--seed",
        type=int_from_0_to(MAX_SEED),
        default=0,
        help="generator seed: the same seed gives the same file (default: 0)",
    )
    gen.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    gen.add_argument(
        "--nu",
        type=positive_float,
        help="viscosity, burgers and navier_stokes (default: burgers 0.1; "
        "navier_stokes the preset's; fno: 1e-3, 1e-4 or 1e-5)",
    )
    bu = gen.add_argument_group("burgers only")
    bu.add_argument(
        "--alpha",
        type=positive_float,
        help="smoothness of the random initial field, power ~ |k|^(-2 alpha) "
        "(default 2; 0.6 is rough: energy up to high modes; the solve takes ~20x longer)",
    )
    ns = gen.add_argument_group("navier_stokes only")
    ns.add_argument("--preset", choices=("mutransfer", "fno"), help="mutransfer (Re=500 Kolmogorov, default) or fno")
    ns.add_argument("--time-steps", type=positive_int, help="recorded times (default: mutransfer 64, fno 50/30/20)")
    ns.add_argument("--solver-resolution", type=positive_int, help="grid of the solve (default 2x --resolution)")
    ns.add_argument("--spinup", type=non_negative_float, help="time units solved before w0 is taken (default 0)")
    ns.add_argument("--dt", type=positive_float, help="solver time step (default: mutransfer 1/1024, fno 1e-4)")
    ns.add_argument("--device", help="torch device of the solve, e.g. cuda (default cpu)")
    mesh = gen.add_argument_group("darcy_mesh only")
    mesh.add_argument("--points-min", type=positive_int, help="fewest points per sample (default 300)")
    mesh.add_argument(
        "--points-max", type=positive_int, help="most points per sample, also the padded size P (default 600)"
    )
    gen.set_defaults(run=run_generate)

    ins = sub.add_parser(
        "inspect",
        help="describe a data file (mutransfer HDF5, .mat v5/v7.3, PDEBench, The Well, .pt)",
        description="Describe a data file; the format is detected from its content. The key/time options show "
        "what `mutransfer train --data FILE` would load with the same flags.",
    )
    ins.add_argument("file", help="data file in any format the readers accept")
    add_reader_arguments(ins)
    ins.add_argument("--json", action="store_true", help="print the description as JSON")
    ins.set_defaults(run=run_inspect)


#: reader options shared by `data inspect` and `train --data`
READER_FLAGS = ("input_key", "output_key", "field", "input_time", "output_time")


def add_reader_arguments(parser) -> None:
    """--input-key/--output-key/--field/--input-time/--output-time (see mutransfer.data._readers)."""
    g = parser.add_argument_group("choosing arrays in --data files (see `mutransfer data inspect`)")
    g.add_argument("--input-key", help="array used as input (e.g. a, coeff, x, tensor)")
    g.add_argument("--output-key", help="array used as output (e.g. u, sol, y)")
    g.add_argument("--field", help="one array (PDEBench/The Well field) used as input and output trajectory")
    g.add_argument("--input-time", type=int, help="time index of the input (trajectories: default 0)")
    g.add_argument("--output-time", help="time index, 'all' or 'start:stop' of the output (trajectories: default -1)")


def reader_options(args: argparse.Namespace) -> dict:
    return {name: getattr(args, name, None) for name in READER_FLAGS}


def generator_flags() -> tuple[str, ...]:
    """`mutransfer data generate` flags passed to a problem's generator: every problem's generator_options."""

    return tuple(dict.fromkeys(name for p in PROBLEMS.values() for name in p.generator_options))


def run_generate(args: argparse.Namespace) -> int:
    problem = get_problem(args.problem)
    options = {name: getattr(args, name) for name in generator_flags() if getattr(args, name, None) is not None}
    for name in options:
        if name not in problem.generator_options:
            takers = [p.name for p in PROBLEMS.values() if name in p.generator_options]
            raise UserInputError(
                f"--{name.replace('_', '-')} applies to {' and '.join(takers) or 'no problem'} only, not {problem.name}; drop it"
            )
    check_out(args.out, force=args.force, example=f"{problem.name}.h5")
    if smoke.smoke() and args.n > smoke.SAMPLES:
        args.n = smoke.SAMPLES
        smoke.say("data generate", f"{smoke.SAMPLES} samples")
    _check_generation_fits(problem, args.n, args.resolution, options)
    start = time.perf_counter()
    data = problem.generator(args.n, args.resolution, seed=args.seed, progress=args.progress, **options)
    writer_for(problem)(args.out, data)
    if problem.kind == "points":
        lo, hi = data["attrs"]["points_min"], data["attrs"]["points_max"]
        print(
            f"wrote {args.n} {problem.name} samples ({lo}-{hi} points each from a {args.resolution}x{args.resolution} "
            f"grid) to {args.out} ({time.perf_counter() - start:.1f} s)"
        )
        return 0
    print(
        f"wrote {args.n} {problem.name} samples at resolution {args.resolution} to {args.out} "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return 0


def _check_generation_fits(problem, n: int, resolution: int, options: dict) -> None:
    """Refuse, before anything is allocated, a dataset whose arrays cannot fit the available RAM.

    Estimate (a lower bound): float64 input and output per sample, the output with
    its time steps, plus 16 fields of solver work space at the solver's resolution.
    """

    dims = get_facts(problem.name).space_dim
    times = int(options.get("time_steps") or 1)
    solver = max(resolution, int(options.get("solver_resolution") or resolution))
    need = 8 * (n * resolution**dims * (1 + times) + 16 * solver**dims)
    available = available_memory()
    if available is not None and need > available:
        raise UserInputError(
            f"--n {n} --resolution {resolution}: the {problem.name} arrays need at least {format_bytes(need)} but the "
            f"available RAM is {format_bytes(available)}; generate fewer samples or a coarser grid"
        )


def run_inspect(args: argparse.Namespace) -> int:
    if is_point_file(args.file):
        for name, value in reader_options(args).items():
            if value is not None:
                raise UserInputError(
                    f"--{name.replace('_', '-')} does not apply to point-set file {args.file} "
                    "(it holds coords/input/output/mask); drop it"
                )
        info = inspect_point_dataset(args.file)
    else:
        info = describe(args.file, **reader_options(args))
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
