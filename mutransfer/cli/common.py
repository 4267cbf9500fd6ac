"""Argument types and output helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
import json
import sys


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be a positive integer")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer ≥ 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be zero or positive")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} must be a positive number")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number ≥ 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} must be zero or positive")
    return value


def unit_interval(text: str) -> float:
    """argparse type: a number in [0, 1), e.g. Adam betas."""
    value = non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"{value} must be in [0, 1)")
    return value


def print_json(payload) -> None:
    """Write ``payload`` as indented JSON to stdout."""
    json.dump(payload, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
