"""`mutransfer predict`: a trained target's predictions for a data file, written in the project's HDF5 schema."""

from __future__ import annotations

import argparse

from mutransfer.cli._common import positive_int, print_json
from mutransfer.cli._evaluate_cmd import add_model_arguments
from mutransfer.cli._outputs import check_out
from mutransfer.serving._evaluation import write_predictions
from mutransfer.serving._load import load_model


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "predict",
        help="write a trained target's predictions for a data file (the project's HDF5 schema)",
        description="Load the target a sweep trained (from its study or from MLflow), run it on every sample of --data "
        "and write the inputs with the predicted outputs to --out: the mutransfer-pde schema for grids, "
        "mutransfer-points for point sets (`mutransfer data inspect` reads it; `evaluate` against the truth).",
    )
    add_model_arguments(p)
    p.add_argument(
        "--out",
        metavar="FILE.h5",
        required=True,
        help="HDF5 file to write; an existing file is kept unless --force, and never the input, a tracking store "
        "or a file of a study or model folder",
    )
    p.add_argument("--force", action="store_true", help="replace --out if it exists (atomically)")
    p.add_argument(
        "--resolution",
        type=positive_int,
        metavar="R",
        default=None,
        help="grid resolution to predict at, reached by striding the file (default: as stored)",
    )
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(run=run_predict_cmd)


def run_predict_cmd(args: argparse.Namespace) -> int:
    check_out(args.out, force=args.force, inputs=[args.data], example="predictions.h5")
    loaded = load_model(args.model, runs_dir=args.runs_dir, tracking_uri=args.tracking_uri)
    written = write_predictions(loaded, args.data, args.out, args.resolution)
    if args.json:
        print_json(written)
    else:
        print(
            f"wrote {written['samples']} predictions of {written['model']} to {written['out']}"
            + (f" (resolution {written['resolution']})" if written["resolution"] else "")
        )
    return 0
