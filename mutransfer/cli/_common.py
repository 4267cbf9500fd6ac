"""Argument types and output helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
import json
import sys

from mutransfer._config.checks import check_model_name
from mutransfer.errors import UserInputError
from operators.errors import OperatorConfigError


def _parse(text: str, cast, ok, requirement: str):
    """Cast ``text`` and check it, raising argparse's one-line error naming the requirement."""
    try:
        value = cast(text)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
    if not ok(value) or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{value} {requirement}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    return _parse(text, int, lambda v: v >= 1, "must be a positive integer")


def positive_int_at_most(maximum: int):
    """argparse type: an integer in [1, ``maximum``] (a count of trainings a run could never finish is refused)."""

    def parse(text: str) -> int:
        return _parse(text, int, lambda v: 1 <= v <= maximum, f"must be an integer from 1 to {maximum}")

    return parse


def int_from_0_to(maximum: int):
    """argparse type: an integer in [0, ``maximum``] (e.g. a seed: 64-bit)."""

    def parse(text: str) -> int:
        return _parse(text, int, lambda v: 0 <= v <= maximum, f"must be an integer from 0 to {maximum}")

    return parse


def non_negative_int(text: str) -> int:
    """argparse type: an integer ≥ 0."""
    return _parse(text, int, lambda v: v >= 0, "must be zero or positive")


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _parse(text, float, lambda v: v > 0, "must be a positive number")


def non_negative_float(text: str) -> float:
    """argparse type: a finite number ≥ 0."""
    return _parse(text, float, lambda v: v >= 0, "must be zero or positive")


def unit_interval(text: str) -> float:
    """argparse type: a number in [0, 1), e.g. Adam betas."""
    return _parse(text, float, lambda v: 0 <= v < 1, "must be in [0, 1)")


def memory_size(text: str) -> int:
    """argparse type: a memory size such as 80GiB, 24GB or 512MiB, in bytes."""

    from operators.planning import parse_bytes  # noqa: PLC0415 -- deferred: the planner imports torch (2 s)

    try:
        return parse_bytes(text)
    except OperatorConfigError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size; write e.g. 80GiB, 24GB or 512MiB") from None


def model_name(text: str) -> str:
    """argparse type: a model registry name MLflow accepts (mutransfer._config.checks.check_model_name)."""
    try:
        return check_model_name(text, "")
    except UserInputError as exc:
        raise argparse.ArgumentTypeError(str(exc).strip()) from None


def print_json(payload) -> None:
    """Write ``payload`` as indented JSON to stdout."""
    json.dump(payload, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


#: ``--study`` given without a file: the built-in default study
BUILTIN_STUDY = "<the built-in quick study>"


def study_argument(value: str) -> str | None:
    """``--study``'s value as load_study takes it: None for the built-in study (``--study`` alone); an empty path
    is refused in one line."""
    if value == BUILTIN_STUDY:
        return None
    if not value.strip():
        raise UserInputError("--study: an empty path; give a study file, or --study alone for the built-in study")
    return value
