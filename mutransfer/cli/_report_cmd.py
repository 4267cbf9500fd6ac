"""`mutransfer report STUDY`: the study's self-contained HTML page (settings, transfer, trials, figures)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mutransfer._reporting.study_files import load_study_files
from mutransfer.cli._outputs import check_out
from mutransfer.errors import UserInputError

STUDY_HELP = (
    "a study folder (holding state.json) or the name of a study under the runs directory "
    "(./mutransfer-runs unless --runs-dir)"
)
RUNS_DIR_HELP = "where study folders live, to look STUDY up by name (default: ./mutransfer-runs)"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="write a study's HTML report: settings, transfer table, trials, learning curves, importances",
        description="Write one self-contained HTML page (no external files or links; figures inline) for a study: "
        "its settings, the muP transfer table, the result, every proxy trial (table, optimization history, "
        "learning curves with the epochs where ASHA stopped trials, hyperparameter importances, slice plots), "
        "the target's learning curve, and the verification and direct-baseline sections when the study ran "
        "them. Built from the study folder's files only (no MLflow), so a copied folder works offline. "
        "Each sweep also writes it as report.html in the study folder and logs it to MLflow.",
    )
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    p.add_argument(
        "--out",
        metavar="FILE",
        help="where to write the page (default: STUDY's folder/report.html); an existing file is kept unless --force, "
        "and never a tracking store or another file of a study or model folder",
    )
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--runs-dir", metavar="DIR", help=RUNS_DIR_HELP)
    p.set_defaults(run=run_report_cmd)


def run_report_cmd(args: argparse.Namespace) -> int:
    files = load_study_files(args.study, args.runs_dir)
    out = Path(args.out) if args.out else files.root / "report.html"
    if out.is_dir() or not out.parent.is_dir():
        raise UserInputError(f"--out {out}: not a file in an existing folder; pass --out FOLDER/report.html")
    check_out(out, force=args.force, own=files.root / "report.html")
    from mutransfer._reporting.html import write_report_page  # noqa: PLC0415 -- deferred: heavy imports (matplotlib, optuna, pandas, the sweep package), `mutransfer --help` stays fast
    from mutransfer._sweep.strategies import html_sections  # noqa: PLC0415

    try:
        write_report_page(files, out, html_sections(files.report, files.state))
    except OSError as exc:
        raise UserInputError(
            f"--out {out}: cannot write there ({exc.strerror}); pass --out with a writable path"
        ) from None
    print(out)
    return 0
