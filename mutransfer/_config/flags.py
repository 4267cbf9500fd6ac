"""CLI flags derived from declared settings (mutransfer._config.settings).

``add_flags(parser, Hyperparameters, ["lr", "batch_size"], defaults={"lr": 3e-3})``
adds ``--lr`` and ``--batch-size`` with the type, check, choices and help of their
declaration, the default shown in ``--help``. A bad value is argparse's one-line
error naming the flag, with the declaration's requirement ("must be > 0").
"""

from __future__ import annotations

import argparse
import math

from mutransfer._config.settings import REQUIRED, Setting, integer_requirement, settings_of


def arg_type(spec: Setting):
    """The argparse ``type`` of a setting: parse, then check as the declaration says."""

    def parse_int(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if spec.minimum is not None and value < spec.minimum:
            raise argparse.ArgumentTypeError(f"{value} {integer_requirement(spec.minimum)}")
        if spec.maximum is not None and value > spec.maximum:
            raise argparse.ArgumentTypeError(f"{value} must be <= {spec.maximum}")
        return value

    def parse_float(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        problem = "must be a finite number" if not math.isfinite(value) else (spec.check(value) if spec.check else None)
        if problem:
            raise argparse.ArgumentTypeError(f"{value:g} {problem}")
        return value

    return {"int": parse_int, "float": parse_float}.get(spec.kind, str)


def help_text(spec: Setting, default) -> str:
    """The declaration's help with its default ("(default: 1e-3)"; "(default: off)" for None)."""
    if default is REQUIRED:
        return spec.help
    shown = "off" if default is None else default
    return f"{spec.help} (default: {shown})"


def flag_kwargs(spec: Setting, name: str) -> dict:
    """argparse keyword arguments that type a flag as its declaration says: choices, or a checked int/float."""
    choices = spec.choice_values()
    if choices is not None:
        return {"choices": choices}
    if spec.kind in ("int", "float"):
        return {"type": arg_type(spec), "metavar": name.upper()}
    if spec.parse is not None:
        return {"type": spec.parse, "metavar": name.upper()}
    if spec.kind == "ints":  # a list of positive integers: --ladder 4 8 16
        return {"nargs": "+", "type": arg_type(Setting(spec.help, kind="int", minimum=1)), "metavar": "N"}
    return {}


def add_flags(
    parser,
    cls,
    names,
    *,
    defaults: dict | None = None,
    group=None,
    suppress_default: bool = False,
    note: str | None = None,
) -> None:
    """Add one flag per name of settings dataclass ``cls`` (in the order given).

    ``defaults`` replaces a declared default for this command (shown in --help; REQUIRED
    makes the flag required). ``suppress_default``: the flag's value is None unless
    given (overrides of a study file), while the help still shows the declared default.
    ``note`` replaces the "(default: …)" of the help (e.g. "carried over unchanged").
    """
    declared = {name: (default, spec) for name, default, spec in settings_of(cls)}
    target = group or parser
    for name in names:
        default, spec = declared[name]
        if defaults and name in defaults:
            default = defaults[name]
        flag = spec.flag_name(name)
        text = f"{spec.help} ({note})" if note else help_text(spec, default)
        kwargs = {
            "dest": name,
            "help": text,
            "default": None if suppress_default else default,
            **flag_kwargs(spec, name),
        }
        if default is REQUIRED:
            kwargs.pop("default")
            kwargs["required"] = True
        target.add_argument(flag, **kwargs)
