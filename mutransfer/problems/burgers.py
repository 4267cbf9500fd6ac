"""1D viscous Burgers (``mutransfer.data.burgers``)."""

from __future__ import annotations

from mutransfer.problems.base import problem_from_facts


def generate(n: int, resolution: int, *, seed: int, progress: bool = True) -> dict:
    from mutransfer.data.burgers import generate_burgers

    return generate_burgers(n, resolution, seed=seed, progress=progress)


PROBLEM = problem_from_facts(
    "burgers",
    description="1D viscous Burgers, nu=0.1, periodic; map u0 -> u(., 1)",
    generator=generate,
    generated_resolution=1024,
    resolution=256,
    n_train=400,
    n_test=100,
    padding=0,
)
