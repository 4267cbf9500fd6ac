"""The registry of learning problems, looked up by name.

To add a problem: its facts (one line in ``mutransfer.data.problem_facts.FACTS``),
a module here defining ``PROBLEM = problem_from_facts(name, ...)``, and one line below.
"""

from __future__ import annotations

from mutransfer.errors import UserInputError
from mutransfer.problems import burgers, darcy, darcy_mesh, navier_stokes
from mutransfer.problems.base import Problem

__all__ = ["PROBLEMS", "get_problem"]

PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in (
        burgers.PROBLEM,
        darcy.PROBLEM,
        navier_stokes.PROBLEM,
        darcy_mesh.PROBLEM,
    )
}


def get_problem(name: str) -> Problem:
    """Look a problem up by name, with a one-line error listing the known ones."""
    try:
        return PROBLEMS[name]
    except KeyError:
        raise UserInputError(f"problem {name!r} is unknown; use one of: {', '.join(PROBLEMS)}") from None
