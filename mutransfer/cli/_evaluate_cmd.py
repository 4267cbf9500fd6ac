"""`mutransfer evaluate`: a trained target's test metric on any data file, per resolution."""

from __future__ import annotations

import argparse

from mutransfer.cli._common import positive_int, print_json
from mutransfer.serving._evaluation import evaluate_file, format_evaluation
from mutransfer.serving._load import load_model


def add_model_arguments(p) -> None:
    """The arguments `evaluate` and `predict` share: which model, which data, where studies and MLflow live."""
    p.add_argument(
        "model",
        metavar="STUDY|MODEL_DIR|MODEL_URI",
        help="a study (its directory, or its name in --runs-dir), a model folder (`mutransfer train --out DIR`), "
        "or an MLflow model URI: runs:/<run>/model, "
        "models:/<name>/<version>, models:/<name>@<alias> or models:/m-<id>",
    )
    p.add_argument(
        "--data",
        metavar="FILE",
        required=True,
        help="data file in any format `mutransfer data inspect` reads (every sample is used)",
    )
    p.add_argument("--runs-dir", default=None, help="where study directories live (default: ./mutransfer-runs)")
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI for runs:/ and models:/ (default: sqlite:///mlflow.db in this directory)",
    )


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="a trained target's test metric (relative L2) on a data file, per resolution",
        description="Load the target a sweep trained (from its study or from MLflow) and report the mean relative L2 "
        "over every sample of --data. Grid models run at any resolution the file can be strided to and the operator "
        "supports (give several with --resolution to compare); point-set models take the file's point sets.",
    )
    add_model_arguments(p)
    p.add_argument(
        "--resolution",
        type=positive_int,
        nargs="+",
        metavar="R",
        default=None,
        help="grid resolutions to evaluate at, each reached by striding the file (default: as stored)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run_evaluate_cmd)


def run_evaluate_cmd(args: argparse.Namespace) -> int:
    loaded = load_model(args.model, runs_dir=args.runs_dir, tracking_uri=args.tracking_uri)
    result = evaluate_file(loaded, args.data, args.resolution)
    if args.json:
        print_json(result)
    else:
        print(format_evaluation(result))
    return 0
