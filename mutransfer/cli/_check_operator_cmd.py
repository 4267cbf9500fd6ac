"""`mutransfer check-operator FACTORY`: the conformance kit of a user's operator (mutransfer._diagnostics.operator_check)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import yaml
from torch import nn

from mutransfer._diagnostics.operator_check import PROBLEMS, check_operator
from mutransfer.cli._common import positive_int, print_json
from mutransfer.errors import UserInputError
from operators.errors import OperatorConfigError
from operators.factory import is_factory_path, load_factory, locate, plugins
from operators.family import family_factory
from operators.registry import OPERATORS

#: exit code of a factory that runs but does not conform (bad input is 2, as everywhere)
EXIT_FAILED = 1


def _builtin_families() -> list[str]:
    """The registered families the kit builds by name (a user's factory family is named by its path instead)."""
    return [f.name for f in OPERATORS.values() if not f.facts_on_parameters]


def _families() -> str:
    return ", ".join(_builtin_families())


def _problems() -> str:
    return ", ".join(f"{name} in {dim}-D" for dim, (name, _res, _stride) in sorted(PROBLEMS.items()))


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "check-operator",
        help="check that your operator's factory conforms: roles, counts, save/load, coordinate checks (seconds in 1-D)",
        description="Build FACTORY (module:function, e.g. mymodel:build for mymodel.py in this directory, or "
        f"mutransfer.neuralop:fno1d; or a built-in family: {_families()}) at a few sizes; print the muP role of every "
        "parameter; check that the planner's parameter count equals the model's and that saved weights load back to "
        f"the same output; then measure, on a small generated problem ({_problems()}), the update after one Adam "
        "step as the width and K grow: flat under the muP facts, growing with the multipliers off and with a wrong K rule (the controls). "
        "Exit 0 when it conforms, 1 when a check fails, 2 on bad input.",
    )
    p.add_argument(
        "factory",
        metavar="FACTORY",
        help="the factory, module:function, an installed plug-in's name (operator.type), or a built-in family "
        f"({_families()}: built in the standard parametrization, its muP from the facts it declares)",
    )
    p.add_argument(
        "--dim", type=int, choices=sorted(PROBLEMS), default=1, help="the model's grid dimension (default 1)"
    )
    p.add_argument(
        "--options",
        default="{}",
        help="the factory's other arguments as a YAML mapping, e.g. '{layers: 2}' (operator.options in a study) "
        "(default: {})",
    )
    p.add_argument("--seeds", type=positive_int, default=8, help="seeds per size (default 8)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)


def factory_options(text: str) -> dict[str, object]:
    """``--options``: a YAML mapping of the factory's other arguments; one line naming the flag otherwise."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        raise UserInputError(f"--options {text!r}: not YAML; give a mapping, e.g. '{{layers: 2}}'") from None
    if not isinstance(value, dict):
        raise UserInputError(f"--options {text!r}: must be a mapping of argument names to values, e.g. '{{layers: 2}}'")
    return value


def load_named_factory(
    name: str, dim: int | None = None, options: dict[str, object] | None = None, flag: str = "FACTORY"
) -> Callable[..., nn.Module]:
    """The factory ``name``: an installed plug-in's name, module:function (found in the working directory first),
    or, given the grid's ``dim``, a built-in or registered family's name (built in the standard parametrization:
    operators.family.family_factory; ``options``, the ``--options`` given, checked against what it takes)."""
    families = _builtin_families() if dim is not None else []
    if name in families:
        assert dim is not None
        try:
            return family_factory(name, dim, options)
        except OperatorConfigError as exc:
            prefix = "--options: " if str(exc).startswith("option ") else ""  # an option's fault, or the family's
            raise UserInputError(f"{prefix}{exc}") from None
    path = plugins().get(name, name)
    if not is_factory_path(path):
        also = f"a family ({', '.join(families)}), " if families else ""
        raise UserInputError(
            f"{flag} {name!r}: give {also}an installed plug-in's name or a factory module:function, e.g. "
            "mymodel:build for a build() in mymodel.py here"
        )
    return load_factory(path, locate(path, [Path.cwd()]))


def run(args: argparse.Namespace) -> int:
    options = factory_options(args.options)
    factory = load_named_factory(args.factory, args.dim, options)
    result = check_operator(factory, name=args.factory, dim=args.dim, options=options, seeds=args.seeds)
    if args.json:
        print_json(result.as_dict())
    else:
        print(result.to_text())
    return 0 if result.passed else EXIT_FAILED
