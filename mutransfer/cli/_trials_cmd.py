"""`mutransfer trials STUDY`: one row per proxy trial (configuration, status, epochs, errors, device-seconds)."""

from __future__ import annotations

import argparse

from mutransfer._reporting.study_files import load_study_files
from mutransfer.cli._common import print_json
from mutransfer.cli._report_cmd import RUNS_DIR_HELP, STUDY_HELP


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "trials",
        help="list a study's proxy trials: configuration, status, epochs reached, best/final error, device-seconds",
        description="One row per proxy trial of a study, read from its folder: number, trial id, status "
        "(completed, pruned by ASHA, diverged, failed), the searched hyperparameters, epochs reached, the best "
        "and the final validation relative L2, and device-seconds.",
    )
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    p.add_argument("--sort", metavar="COLUMN", help="sort by this column, ascending (e.g. final_error, lr, epochs)")
    p.add_argument("--json", action="store_true", help="print a JSON list of records (one per trial)")
    p.add_argument("--runs-dir", metavar="DIR", help=RUNS_DIR_HELP)
    p.set_defaults(run=run_trials_cmd)


def run_trials_cmd(args: argparse.Namespace) -> int:
    from mutransfer._reporting.trials_table import format_trials, sort_trials, trials_frame, trials_records  # noqa: PLC0415 -- deferred: heavy imports (pandas), `mutransfer --help` stays fast

    frame = sort_trials(trials_frame(load_study_files(args.study, args.runs_dir)), args.sort)
    if args.json:
        print_json(trials_records(frame))
    else:
        print(format_trials(frame))
    return 0
