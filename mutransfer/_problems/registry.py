"""The registry of learning problems, looked up by name.

To add a problem: a module here defining ``PROBLEM = problem_from_facts(name, facts=ProblemFacts(...), ...)``
(its data facts, generator and default sizes), and its ``PROBLEM`` in the tuple below — two files
(docs/architecture.md). A plug-in or a test may instead call :func:`register_problem`.
"""

from __future__ import annotations

from mutransfer._problems import burgers, darcy, darcy_mesh, navier_stokes
from mutransfer._problems.base import Problem
from mutransfer.data._problem_facts import unregister_facts
from mutransfer.errors import UserInputError

__all__ = ["PROBLEMS", "get_problem", "register_problem", "unregister_problem"]

PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in (
        burgers.PROBLEM,
        darcy.PROBLEM,
        navier_stokes.PROBLEM,
        darcy_mesh.PROBLEM,
    )
}


def register_problem(problem: Problem) -> Problem:
    """Add ``problem`` (built by ``problem_from_facts``) so that studies, ``data generate`` and training find it."""
    if problem.name in PROBLEMS and PROBLEMS[problem.name] is not problem:
        raise UserInputError(f"problem {problem.name!r} is already registered; choose another name")
    PROBLEMS[problem.name] = problem
    return problem


def unregister_problem(name: str) -> None:
    """Remove a problem added by :func:`register_problem` (and its data facts)."""
    PROBLEMS.pop(name, None)
    unregister_facts(name)


def get_problem(name: str) -> Problem:
    """Look a problem up by name, with a one-line error listing the known ones."""
    try:
        return PROBLEMS[name]
    except KeyError:
        raise UserInputError(f"problem {name!r} is unknown; use one of: {', '.join(PROBLEMS)}") from None
