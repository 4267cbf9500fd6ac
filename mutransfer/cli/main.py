"""The `mutransfer` command line: parse, dispatch, and turn bad input into exit code 2."""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import os
import re
import sys
from pathlib import Path

from mutransfer._tracking._sqlite_file import full_store_error, sqlite_path
from mutransfer._version import __version__
from mutransfer.cli._quiet import quiet_third_party
from mutransfer.errors import USER_ERRORS

EXIT_USER_ERROR = 2


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a single line (no usage dump) and exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        message = " ".join(message.split())  # a value holding a line break (\r, \x1c, ...) stays on the one line
        self.exit(
            EXIT_USER_ERROR, f"{self.prog}: error: {message}{self.suggestion(message)} (see {self.prog} --help)\n"
        )

    def suggestion(self, message: str) -> str:
        """ "; did you mean X?" for a mistyped subcommand or choice (difflib), else ""."""
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if not match:
            return ""
        choices = [c.strip().strip("'") for c in match[2].split(",")]
        close = difflib.get_close_matches(match[1], choices, n=1, cutoff=0.6)
        return f"; did you mean {close[0]!r}?" if close else ""

    def unrecognized(self, extras: list[str]) -> None:
        """Refuse arguments this (sub)command does not take, suggesting the closest flag of its own."""
        flags = [s for action in self._actions for s in action.option_strings if s.startswith("--")]
        hints = []
        for extra in extras:
            name = extra.split("=", 1)[0]
            close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6) if name.startswith("-") else []
            if close:
                hints.append(f"did you mean {close[0]} (not {name})?")
        message = " ".join(
            f"unrecognized arguments: {' '.join(extras)}{'; ' if hints else ''}{' '.join(hints)}".split()
        )
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_values(self, action, arg_strings):
        # argparse drops a lone "--" value (--flag=--), leaving nothing (or None for nargs="+") where values belong
        if arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings) or action.dest}: expected a value, not '--'")
        return super()._get_values(action, arg_strings)


#: each command and the module (``mutransfer.cli.<module>``) that adds its parser and runs it, in ``--help``'s order.
#: A command line that names a command imports that module alone (0.3-0.8 CPU-s less than all of them), never
#: another command's; ``--version`` none; ``--help`` and a mistyped command (its suggestion) load them all.
COMMANDS = {
    "init": "_init_cmd",
    "sweep": "_sweep_cmd",
    "studies": "_sweep_cmd",
    "train": "_train_cmd",
    "transfer": "_transfer_cmd",
    "plan": "_plan_cmd",
    "data": "_data_cmd",
    "landscape": "_landscape_cmd",
    "coord-check": "_coord_check_cmd",
    "check-operator": "_check_operator_cmd",
    "ui": "_ui_cmd",
    "evaluate": "_evaluate_cmd",
    "predict": "_predict_cmd",
    "report": "_report_cmd",  # a study folder read back (mutransfer._reporting): report, trials, dashboard
    "trials": "_trials_cmd",
    "dashboard": "_dashboard_cmd",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: with ``command`` (a name in :data:`COMMANDS`), that command's alone."""
    parser = OneLineParser(
        prog="mutransfer",
        description="Tune a small proxy FNO, transfer its hyperparameters to a large one by the muP rule.",
    )
    parser.add_argument("--version", action="version", version=f"mutransfer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser)
    named = COMMANDS.get(command or "")
    modules = [named] if named else [] if command == "--version" else dict.fromkeys(COMMANDS.values())
    for module in modules:
        importlib.import_module(f"mutransfer.cli.{module}").add_parser(sub)
    _add_verbose(sub)
    return parser


def _add_verbose(sub: argparse._SubParsersAction) -> None:
    """``--verbose`` on every command that runs (nested ones too: ``data generate``)."""
    for command in sub.choices.values():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            _add_verbose(nested[0])
            continue
        command.add_argument(
            "--verbose",
            action="store_true",
            help="show third-party INFO logs and known-harmless warnings (hidden by default: mutransfer.cli._quiet)",
        )


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` ran: ``mutransfer data generate``'s for ``data generate``."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name is None:
            return parser
        parser = subs[0].choices[name]


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(words[0] if words else None)
    args, extras = parser.parse_known_args(argv)
    if extras:
        command = _command_parser(parser, args)
        if isinstance(command, OneLineParser):
            command.unrecognized(extras)
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    quiet_third_party(bool(getattr(args, "verbose", False)))
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
    except OSError as exc:  # a folder that cannot be written (read-only, immutable, not ours, full), in any phase
        if exc.errno in FULL:
            print(f"mutransfer {args.command}: error: {full_message(exc)}", file=sys.stderr)
            return EXIT_USER_ERROR
        if exc.errno == errno.ENAMETOOLONG:  # a name given (a study's, a file's) longer than the file system takes
            name = max(Path(os.fspath(exc.filename or "?")).parts, key=len)  # the part the file system refused
            print(
                f"mutransfer {args.command}: error: {name[:40]}… ({len(name)} characters) is too long a name for the "
                "file system; use a shorter name or path",
                file=sys.stderr,
            )
            return EXIT_USER_ERROR
        if exc.errno not in UNWRITABLE or not exc.filename:
            raise
        print(f"mutransfer {args.command}: error: {unwritable_message(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as exc:
        # any write to a SQLite tracking store on a full disk, in any phase; the store, where the command names it
        named = sqlite_path(str(getattr(args, "tracking_uri", None) or "sqlite:///mlflow.db"))
        full = full_store_error(named, exc) if named is not None else None
        if full is None:
            raise
        if not getattr(args, "tracking_uri", None):
            full.filename = "the tracking store"
        print(f"mutransfer {args.command}: error: {full_message(full)}", file=sys.stderr)
        return EXIT_USER_ERROR


#: the errors of a write the file system refuses
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)
#: the errors of a write the file system has no room for (h5py's error names no file; mutransfer._atomic.save_torch's
#: does)
FULL = (errno.ENOSPC, errno.EDQUOT)


def full_message(exc: OSError) -> str:
    """One line for a full file system (or quota): where, if known, and how to go on without losing what was written
    (every file mutransfer writes is replaced whole or not at all: mutransfer._atomic)."""
    where = f" to write {os.fspath(exc.filename)}" if exc.filename else ""
    what = "no space is left" if exc.errno == errno.ENOSPC else "the disk quota is used up"
    return (
        f"{what} on the device{where}; free some space, then run the same command again (with --resume if a sweep "
        "had started: what it wrote is kept)"
    )


def unwritable_message(exc: OSError) -> str:
    """One line naming the folder that refused a write, and how to go on without losing what was written."""
    path = os.fspath(exc.filename)
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    return (
        f"cannot write in {folder} ({exc.strerror}: {path}); make the folder writable, then run the same command "
        "again (with --resume if a sweep had started: what it wrote is kept)"
    )


if __name__ == "__main__":
    sys.exit(main())
