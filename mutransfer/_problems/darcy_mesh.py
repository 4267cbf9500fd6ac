"""Darcy flow on random point sets (``mutransfer.data._pointclouds``).

Darcy solved on the 61x61 node grid, then each sample sampled at its own random nodes
(exact grid values, padded to points_max with a mask); point-set operators only.
"""

from __future__ import annotations

from mutransfer._problems.base import problem_from_facts
from mutransfer.data._pointclouds import generate_darcy_mesh


def generate(n: int, resolution: int, *, seed: int, progress: bool = True, **options) -> dict:
    return generate_darcy_mesh(n, resolution, seed=seed, progress=progress, **options)


PROBLEM = problem_from_facts(
    "darcy_mesh",
    description="2D Darcy flow on random point sets (300–600 nodes of a 61×61 grid per sample); map a -> u",
    generator=generate,
    generated_resolution=61,
    resolution=61,  # the grid of the solve; point sets are not strided
    n_train=400,
    n_test=100,
    padding=0,
    generator_options=("points_min", "points_max"),
)
