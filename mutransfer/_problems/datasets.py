"""Default datasets: generated once per (problem, n, resolution, seed) and cached."""

from __future__ import annotations

import os
from pathlib import Path

from mutransfer._problems.base import Problem
from mutransfer.data._hdf5_io import write_dataset
from mutransfer.data._point_schema import write_point_dataset

__all__ = ["cache_dir", "default_dataset", "writer_for"]


def cache_dir() -> Path:
    """Where generated default datasets live: $MUTRANSFER_CACHE, else ~/.cache/mutransfer."""
    root = os.environ.get("MUTRANSFER_CACHE") or Path.home() / ".cache" / "mutransfer"
    return Path(root) / "data"


def writer_for(problem: Problem):
    """The schema writer of a problem's data: ``write_dataset`` (grids) or ``write_point_dataset`` (point sets)."""

    return {"grid": write_dataset, "points": write_point_dataset}[problem.kind]


def default_dataset(
    problem: Problem, *, n: int | None = None, resolution: int | None = None, seed: int = 0, progress: bool = True
) -> Path:
    """Path of a generated dataset (default: the problem's sizes), generating and caching it on first use."""
    n = problem.n_samples if n is None else int(n)
    resolution = problem.generated_resolution if resolution is None else int(resolution)
    path = cache_dir() / f"{problem.name}_n{n}_r{resolution}_seed{seed}.h5"
    if not path.exists():
        data = problem.generator(n, resolution, seed=seed, progress=progress)
        writer_for(problem)(path, data)  # atomic: temp file, then rename
    return path
