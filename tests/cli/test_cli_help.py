"""Every flag of every command has a help text, and a flag with a default shows it in --help."""

from __future__ import annotations

import argparse

import pytest

from mutransfer.cli.main import COMMANDS, build_parser


def _parsers(parser: argparse.ArgumentParser, prefix: str):
    """(command path, parser) for the parser and each of its subcommands, recursively."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{prefix} {name}")


def _shows_default(action: argparse.Action) -> bool:
    text = action.help or ""
    return "%(default)" in text or "default" in text.lower()


def flag_problems(parser: argparse.ArgumentParser) -> list[str]:
    """The flags of ``parser`` and its subcommands without help, or with a default their help does not show."""
    problems = []
    for command, p in _parsers(parser, parser.prog):
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            name = "/".join(action.option_strings) or action.dest
            if not action.help or action.help == argparse.SUPPRESS:
                problems.append(f"{command} {name}: no help")
            elif (
                action.default not in (None, False, [], argparse.SUPPRESS)
                and not isinstance(action, argparse._StoreFalseAction)
                and not _shows_default(action)
            ):
                problems.append(f"{command} {name}: default {action.default!r} not shown")
    return problems


def test_every_flag_has_help_and_shows_its_default():
    problems = flag_problems(build_parser())
    assert not problems, "\n".join(problems)


def test_the_flag_check_fires_on_a_flag_without_help_or_default():
    """A check that cannot fail is a defect: a planted flag without help, and one hiding its default, are found."""
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers()
    p = sub.add_parser("cmd")
    p.add_argument("--quiet-flag")
    p.add_argument("--hidden", default=3, help="a number")
    p.add_argument("--shown", default=3, help="a number (default: 3)")
    p.add_argument("--switch", action="store_true", help="on or off")
    problems = flag_problems(parser)
    assert problems == ["x cmd --quiet-flag: no help", "x cmd --hidden: default 3 not shown"]


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_new_commands_list_in_help(command, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    assert command in capsys.readouterr().out


def test_sweep_help_is_grouped_and_shows_the_defaults_that_run(capsys):
    """The groups of `sweep --help`, and each override's default is the built-in quick study's value (what runs
    without --study), read from it: --epochs 20, not the declaration's 10."""
    import re

    import yaml

    from mutransfer._study import default_study_text
    from mutransfer.cli.main import main

    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for title in (
        "the study (",
        "the search:",
        "the target:",
        "measuring the transfer:",
        "the study folder and the tracking store:",
        "the cluster:",
        "output:",
    ):
        assert title in text, title
    quick = yaml.safe_load(default_study_text())
    assert re.search(rf"--proxy-K PROXY_K .*?overrides proxy_K; default: {quick['proxy_K']}\)", text)
    assert re.search(rf"--epochs EPOCHS .*?overrides budget.epochs; default: {quick['budget']['epochs']}\)", text)
    assert "else 10" not in text and "the study file's" not in text


def test_each_command_is_in_the_table_that_loads_it_alone_in_help_order():
    """COMMANDS (which module a command line loads) names every command the whole parser has, in its order."""
    (everything,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(everything.choices) == list(COMMANDS)
    for command, module in COMMANDS.items():
        (alone,) = [a for a in build_parser(command)._actions if isinstance(a, argparse._SubParsersAction)]
        assert command in alone.choices, (command, module)


def test_a_command_line_imports_that_commands_module_and_no_other():
    """`mutransfer trials ...` loads trials_cmd (and report_cmd, whose helpers it uses), not sweep's or train's."""
    import subprocess
    import sys

    code = (
        "import sys; from mutransfer.cli.main import build_parser; build_parser(sys.argv[1]); "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('mutransfer.cli.') and m.endswith('_cmd'))))"
    )
    loaded = {
        command: subprocess.run(
            [sys.executable, "-c", code, command], capture_output=True, text=True, check=True
        ).stdout.split()
        for command in ("trials", "--version", "--help")
    }
    assert "mutransfer.cli._trials_cmd" in loaded["trials"]
    assert "mutransfer.cli._sweep_cmd" not in loaded["trials"] and "mutransfer.cli._train_cmd" not in loaded["trials"]
    assert loaded["--version"] == []
    assert loaded["--help"] == sorted(f"mutransfer.cli.{m}" for m in set(COMMANDS.values())), loaded["--help"]
