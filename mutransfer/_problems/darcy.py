"""2D Darcy flow on the unit square (``mutransfer.data._darcy``)."""

from __future__ import annotations

from mutransfer._problems.base import problem_from_facts


def generate(n: int, resolution: int, *, seed: int, progress: bool = True) -> dict:
    from mutransfer.data._darcy import generate_darcy  # noqa: PLC0415 -- deferred: scipy, needed only to generate data; the problem registry is on every command's path

    return generate_darcy(n, resolution, seed=seed, progress=progress)


PROBLEM = problem_from_facts(
    "darcy",
    description="2D Darcy flow -div(a grad u) = 1, zero Dirichlet; map a -> u",
    generator=generate,
    generated_resolution=61,
    resolution=31,
    n_train=400,
    n_test=100,
    padding=5,
    losses=("relative_l2", "pino"),  # mutransfer._training.pino: the residual of -div(a grad u) = 1
)
