"""The `mutransfer` command line: parse, dispatch, and turn bad input into exit code 2."""

from __future__ import annotations

import argparse
import os
import sys

from mutransfer import __version__
from mutransfer.cli import (coord_check_cmd, data_cmd, evaluate_cmd, landscape_cmd, plan_cmd, predict_cmd, sweep_cmd,
                            train_cmd, transfer_cmd, ui_cmd)
from mutransfer.cli import report_cmd, trials_cmd
from mutransfer.errors import USER_ERRORS

EXIT_USER_ERROR = 2


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a single line (no usage dump) and exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        message = " ".join(message.split())  # a value holding a line break (\r, \x1c, ...) stays on the one line
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_values(self, action, arg_strings):
        # argparse drops a lone "--" value (--flag=--), leaving nothing (or None for nargs="+") where values belong
        if arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings) or action.dest}: expected a value, not '--'")
        return super()._get_values(action, arg_strings)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="mutransfer",
        description="Tune a small proxy FNO, transfer its hyperparameters to a large one by the muP rule.",
    )
    parser.add_argument("--version", action="version", version=f"mutransfer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser)
    for module in (sweep_cmd, train_cmd, transfer_cmd, plan_cmd, data_cmd, landscape_cmd, coord_check_cmd, ui_cmd,
                   evaluate_cmd, predict_cmd):
        module.add_parser(sub)
    for module in (report_cmd, trials_cmd):  # a study folder read back (mutransfer.reporting)
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except USER_ERRORS as exc:
        message = " ".join(str(exc).split())
        print(f"mutransfer {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"mutransfer {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`mutransfer trials X | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 0


if __name__ == "__main__":
    sys.exit(main())
