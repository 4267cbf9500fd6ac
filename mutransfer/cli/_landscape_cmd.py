"""`mutransfer landscape`: loss vs a hyperparameter for several K or widths, SP and muP side by side (the paper's Figure 1)."""

from __future__ import annotations

import argparse

import numpy as np

from mutransfer._landscape.analysis import TRANSFORMS
from mutransfer._landscape.runner import LandscapeOptions, format_table, run_landscape
from mutransfer._study.schema import MAX_EPOCHS
from mutransfer.cli._common import positive_float, positive_int, positive_int_at_most, print_json
from mutransfer.cli._outputs import check_outside_kept_folders
from mutransfer.errors import UserInputError
from operators.parametrization import PARAMETRIZATIONS
from operators.precision import PRECISIONS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "landscape",
        help="train a grid (K or width x hyperparameter x parametrization x seed) on Ray and plot where the optimum sits",
        description="Runs one training per grid point as a Ray task, logs each to MLflow under one parent run, and "
        "writes landscape.png (loss vs the hyperparameter per K or width, SP and muP side by side, seed spread "
        "shaded, diverged points as red x, optima starred), a table of the optimum per scale and the drift. "
        "Optimum: per seed, a parabola in log10(value) through the best grid point and its neighbours (a best "
        "point at the grid's edge is flagged and not used); the star is the mean over seeds. Drift: per seed, the "
        "slope of log10(optimum) against ln K (ln width) over all scales; mean and 95% Student-t CI over seeds, "
        "also in decades over the span, 'not resolved at this scale' when the CI covers 0 or rests on one seed; "
        "and the SP - muP difference (Welch's t CI). --modes varies FNO's K under the "
        "K-parametrization; --widths varies the width of any operator under the width parametrization (muP base "
        "width: the smallest width).",
    )
    p.add_argument("--study", help="study file (default: the built-in quick study)")
    scale = p.add_mutually_exclusive_group(required=True)
    scale.add_argument("--modes", type=positive_int, nargs="+", help="values of K (FNO; at least two)")
    scale.add_argument("--widths", type=positive_int, nargs="+", help="widths (any operator; at least two)")
    p.add_argument("--hyperparameter", choices=sorted(TRANSFORMS), default="lr", help="what to vary (default lr)")
    values = p.add_mutually_exclusive_group(required=True)
    values.add_argument("--lrs", "--values", dest="values", type=positive_float, nargs="+", help="grid values")
    values.add_argument(
        "--lr-range",
        "--range",
        dest="range",
        type=positive_float,
        nargs=2,
        metavar=("LO", "HI"),
        help="log-spaced grid between LO and HI (with --points)",
    )
    p.add_argument("--points", type=positive_int, default=7, help="grid points for --lr-range (default 7)")
    p.add_argument(
        "--parametrization",
        nargs="+",
        choices=PARAMETRIZATIONS,
        default=["standard", "mup"],
        help="parametrizations to compare (default: standard mup)",
    )
    p.add_argument("--seeds", type=positive_int, default=3, help="seeds per point (default 3)")
    p.add_argument(
        "--epochs",
        type=positive_int_at_most(MAX_EPOCHS),
        help="epochs per training (default: the study's budget.epochs)",
    )
    p.add_argument("--cpus-per-task", type=positive_int, default=1, help="CPU threads per training (default 1)")
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="training precision (default: the study's training.precision, fp32 unless set)",
    )
    p.add_argument("--address", help="Ray cluster address (auto or ray://host:port); default: a local Ray")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: the study's, else sqlite:///mlflow.db)")
    p.add_argument(
        "--out", default="landscape", help="folder for landscape.png and landscape.json (default: landscape)"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_outside_kept_folders(args.out, flag="--out")  # its figure and JSON never land in a study or model folder
    if args.range is not None:
        lo, hi = args.range
        if not lo < hi:
            raise UserInputError(f"--lr-range {lo} {hi}: LO must be below HI")
        values = [float(v) for v in np.geomspace(lo, hi, args.points)]
    else:
        values = list(args.values)
    if args.hyperparameter == "batch_size":
        values = [float(round(v)) for v in values]
    options = LandscapeOptions(
        study_path=args.study,
        values=values,
        modes=None if args.modes is None else list(args.modes),
        widths=None if args.widths is None else list(args.widths),
        hyperparameter=args.hyperparameter,
        parametrizations=tuple(args.parametrization),
        seeds=args.seeds,
        epochs=args.epochs,
        cpus_per_task=args.cpus_per_task,
        address=args.address,
        tracking_uri=args.tracking_uri,
        out_dir=args.out,
        progress=args.progress and not args.json,
        study_overrides={"precision": args.precision} if args.precision else {},
    )
    payload = run_landscape(options)
    if args.json:
        print_json(payload)
    else:
        print(format_table(payload))
        print(f"figure: {payload['figure']}   MLflow parent run: {payload['mlflow_parent_run']}")
    return 0
