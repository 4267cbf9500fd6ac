"""``operator.k_exponent``: the exponent of muP's K rule as a study reads it, a number or ``data``.

``data`` asks for the exponent to be measured on the training data when a study starts
(mutransfer._diagnostics.k_exponent); the number goes to operators.parametrization.data_aware_scale.
"""

from __future__ import annotations

import argparse

from operators.errors import OperatorConfigError
from operators.parametrization import MAX_K_EXPONENT, check_k_exponent

__all__ = ["K_EXPONENT_FROM_DATA", "parse_k_exponent", "read_k_exponent"]

#: ``operator.k_exponent``'s value that asks for the K rule's exponent to be estimated from the data
K_EXPONENT_FROM_DATA = "data"


def parse_k_exponent(text: str) -> float | str:
    """``--k-exponent``'s value: ``data`` or a number in [0, MAX_K_EXPONENT]."""
    if text == K_EXPONENT_FROM_DATA:
        return text
    try:
        return check_k_exponent(float(text))
    except (ValueError, OperatorConfigError):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a number in [0, {MAX_K_EXPONENT:g}] (1 is the paper's muP rule) or {K_EXPONENT_FROM_DATA}"
        ) from None


def read_k_exponent(r, name, default):
    """A number in [0, MAX_K_EXPONENT] (also as text, from ``--k-exponent``), or ``data``."""
    value = r.raw(name, default)
    if value == K_EXPONENT_FROM_DATA:
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    try:
        return check_k_exponent(value)
    except OperatorConfigError:
        r.fail(
            r.where(name),
            f"must be a number in [0, {MAX_K_EXPONENT:g}] (1 is the paper's muP rule) or {K_EXPONENT_FROM_DATA!r} "
            f"(estimated from the training data), got {value!r}, e.g. {name}: {K_EXPONENT_FROM_DATA}",
        )
