"""The one table of facts about each PDE problem that the data layer needs.

Everything that reads or writes data files (``hdf5_io``, ``loading``, the format
readers, ``pointclouds``) asks this table; ``mutransfer._problems`` builds its
learning-problem records (generator, default sizes, padding, ...) on top of it,
so each fact is stated here once. This module imports nothing from the project:
it is the bottom of the data layer.

The built-in problems are listed in ``FACTS`` below. A new problem states its facts in
its own module in ``mutransfer._problems`` (``problem_from_facts(name, facts=ProblemFacts(...))``),
which adds them here with :func:`register_facts` (docs/architecture.md, "Add a PDE problem").
"""

from __future__ import annotations

from dataclasses import dataclass

from mutransfer.errors import UserInputError

__all__ = [
    "ProblemFacts",
    "FACTS",
    "get_facts",
    "register_facts",
    "unregister_facts",
    "grid_problems",
    "space_dims",
    "periodic_grids",
    "problem_for_dim",
    "problem_from_file_name",
    "points_problem_of",
    "default_points_problem",
]


@dataclass(frozen=True)
class ProblemFacts:
    """What a problem's data looks like."""

    name: str
    #: grid dimensions the model sees: the space axes, plus the output's time axis when it has one
    dim: int
    #: spatial axes of the stored input array (n, *space); dim - 1 for space-time problems
    space_dim: int
    #: periodic grid x_j = j/N (True) or a boundary-inclusive node grid x_i = i/(S-1) (False)
    periodic: bool
    #: "grid" (schema mutransfer-pde) or "points" (random point sets, schema mutransfer-points)
    kind: str = "grid"
    #: points problems: the grid problem whose solutions are sampled at the points
    grid_problem: str | None = None
    #: lower-case file-name fragments that suggest this problem for files without a problem attribute
    name_hints: tuple[str, ...] = ()


FACTS: dict[str, ProblemFacts] = {
    f.name: f
    for f in (
        ProblemFacts("burgers", dim=1, space_dim=1, periodic=True, name_hints=("burgers",)),
        ProblemFacts("darcy", dim=2, space_dim=2, periodic=False, name_hints=("darcy", "piececonst")),
        ProblemFacts(
            "navier_stokes",
            dim=3,
            space_dim=2,
            periodic=True,
            name_hints=("navier", "kolmogorov", "vorticity", "ns_", "ns-"),
        ),
        ProblemFacts("darcy_mesh", dim=2, space_dim=2, periodic=False, kind="points", grid_problem="darcy"),
    )
}


def get_facts(name: str) -> ProblemFacts:
    """Look a problem up by name, with a one-line error listing the known ones."""
    try:
        return FACTS[name]
    except KeyError:
        raise UserInputError(f"problem {name!r} is unknown; use one of: {', '.join(FACTS)}") from None


def register_facts(facts: ProblemFacts) -> ProblemFacts:
    """Add a problem's facts to the table (a problem module does this when it declares new facts).

    Registering the same facts twice is harmless; other facts under a known name are refused.
    """
    known = FACTS.get(facts.name)
    if known is not None and known != facts:
        raise UserInputError(f"problem {facts.name!r} is already registered with other facts; choose another name")
    FACTS[facts.name] = facts
    return facts


def unregister_facts(name: str) -> None:
    """Remove a registered problem's facts (tests that register a toy problem clean up with this)."""
    FACTS.pop(name, None)


def grid_problems() -> list[str]:
    """Names of the problems whose data are arrays on a regular grid, in table order."""
    return [name for name, f in FACTS.items() if f.kind == "grid"]


def space_dims() -> dict[str, int]:
    """Grid problem -> number of spatial axes of its stored input (the mutransfer-pde schema)."""
    return {name: FACTS[name].space_dim for name in grid_problems()}


def periodic_grids() -> dict[str, bool]:
    """Grid problem -> whether its grid is periodic (x_j = j/N) rather than a node grid (x_i = i/(S-1))."""
    return {name: FACTS[name].periodic for name in grid_problems()}


def problem_for_dim(dim: int) -> str | None:
    """The first grid problem whose model grid has ``dim`` dimensions (None when there is none)."""
    return next((name for name in grid_problems() if FACTS[name].dim == dim), None)


def problem_from_file_name(file_name: str, dim: int) -> str | None:
    """The grid problem of model dimension ``dim`` that a hint in ``file_name`` names, else None."""
    lower = file_name.lower()
    for name in grid_problems():
        f = FACTS[name]
        if f.dim == dim and any(hint in lower for hint in f.name_hints):
            return name
    return None


def points_problem_of(grid_problem: str | None) -> str | None:
    """The point-set problem made from ``grid_problem`` (e.g. darcy -> darcy_mesh), None when there is none."""
    return next((name for name, f in FACTS.items() if f.kind == "points" and f.grid_problem == grid_problem), None)


def default_points_problem() -> str:
    """The first point-set problem (named in hints for point files without a problem attribute)."""
    return next(name for name, f in FACTS.items() if f.kind == "points")
