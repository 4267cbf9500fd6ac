"""Checks a user runs on their own operator, from Python (the command: ``mutransfer check-operator``)::

    from mutransfer.testing import check_operator
    result = check_operator(build, dim=2, options={"layers": 2})   # your factory (docs/byo.md)
    assert result.passed, result.to_text()

What it checks and how: :mod:`mutransfer._diagnostics.operator_check`.
"""

from mutransfer._diagnostics.operator_check import Curve, OperatorCheck, check_operator

__all__ = ["Curve", "OperatorCheck", "check_operator"]
