"""The learning-problem record and how it is built from the data layer's problem facts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mutransfer.data._problem_facts import ProblemFacts, get_facts, register_facts

__all__ = ["Problem", "problem_from_facts"]


@dataclass(frozen=True)
class Problem:
    """A learning problem: map the input function to the output function on a grid or on point sets."""

    name: str
    dim: int
    periodic: bool
    description: str
    generator: Callable[..., dict]
    #: resolution at which the default cached dataset is generated
    generated_resolution: int
    #: training resolution used unless the user asks for another
    resolution: int
    n_train: int
    n_test: int
    #: grid points padded at the end of each axis inside the FNO (0 for periodic problems)
    padding: int
    #: output times used for training unless the user asks for another (None: all; time-dependent problems)
    time_resolution: int | None = None
    #: extra keyword options the generator accepts (``mutransfer data generate`` flags)
    generator_options: tuple[str, ...] = ()
    #: "grid" (arrays on a regular grid, schema mutransfer-pde) or "points" (random point sets,
    #: schema mutransfer-points, loaded packed by ``mutransfer.data._pointclouds.load_point_split``)
    kind: str = "grid"
    #: training losses this problem offers: relative_l2 always; pino where its PDE residual is implemented
    losses: tuple[str, ...] = ("relative_l2",)

    @property
    def n_samples(self) -> int:
        return self.n_train + self.n_test


def problem_from_facts(name: str, *, facts: ProblemFacts | None = None, **fields) -> Problem:
    """The Problem ``name`` with dim, periodic and kind taken from ``mutransfer.data._problem_facts``.

    ``facts``: a new problem's facts, registered with the data layer here (built-in problems have theirs
    in ``mutransfer.data._problem_facts.FACTS`` already).
    """
    if facts is not None:
        if facts.name != name:
            raise ValueError(f"facts for {facts.name!r} given to problem {name!r}")
        register_facts(facts)
    facts = get_facts(name)
    return Problem(name=name, dim=facts.dim, periodic=facts.periodic, kind=facts.kind, **fields)
