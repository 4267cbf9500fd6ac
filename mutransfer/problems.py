"""The PDE problems mutransfer knows: their dimension, data generator and defaults.

A problem ties a data generator to the FNO that learns it (d truncated
dimensions, padding for non-periodic domains) and to the dataset sizes used when
the user gives no data file. Default datasets are generated once and cached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mutransfer.errors import UserInputError


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
    #: schema mutransfer-points, loaded packed by ``mutransfer.data.pointclouds.load_point_split``)
    kind: str = "grid"

    @property
    def n_samples(self) -> int:
        return self.n_train + self.n_test


def _generate_burgers(n: int, resolution: int, *, seed: int, progress: bool = True) -> dict:
    from mutransfer.data.burgers import generate_burgers

    return generate_burgers(n, resolution, seed=seed, progress=progress)


def _generate_darcy(n: int, resolution: int, *, seed: int, progress: bool = True) -> dict:
    from mutransfer.data.darcy import generate_darcy

    return generate_darcy(n, resolution, seed=seed, progress=progress)


def _generate_navier_stokes(n: int, resolution: int, *, seed: int, progress: bool = True, **options) -> dict:
    from mutransfer.data.navier_stokes import generate_navier_stokes

    return generate_navier_stokes(n, resolution, seed=seed, progress=progress, **options)


def _generate_darcy_mesh(n: int, resolution: int, *, seed: int, progress: bool = True, **options) -> dict:
    from mutransfer.data.pointclouds import generate_darcy_mesh

    return generate_darcy_mesh(n, resolution, seed=seed, progress=progress, **options)


PROBLEMS: dict[str, Problem] = {
    "burgers": Problem(
        name="burgers",
        dim=1,
        periodic=True,
        description="1D viscous Burgers, nu=0.1, periodic; map u0 -> u(., 1)",
        generator=_generate_burgers,
        generated_resolution=1024,
        resolution=256,
        n_train=400,
        n_test=100,
        padding=0,
    ),
    "darcy": Problem(
        name="darcy",
        dim=2,
        periodic=False,
        description="2D Darcy flow -div(a grad u) = 1, zero Dirichlet; map a -> u",
        generator=_generate_darcy,
        generated_resolution=61,
        resolution=31,
        n_train=400,
        n_test=100,
        padding=5,
    ),
    # FNO-3D on space-time: w0 broadcast along t -> w(x, y, t). Space is periodic, time is
    # not; the FNO pads every axis equally, so 4 points of padding are paid on the periodic
    # space axes too (harmless, ~25% more FFT work at 32^2) to stop the time axis wrapping.
    "navier_stokes": Problem(
        name="navier_stokes",
        dim=3,
        periodic=True,
        description="2D Navier-Stokes vorticity, Re=500 Kolmogorov forcing on [0,2pi]^2; map w0 -> w(x, y, t), t in (0, 0.125]",
        generator=_generate_navier_stokes,
        generated_resolution=64,
        resolution=32,
        n_train=40,  # small: an FNO-3D step costs ~0.4 CPU-s per sample at 32x32x16 (width 32, K=8)
        n_test=10,
        padding=4,
        time_resolution=16,
        generator_options=("preset", "nu", "time_steps", "solver_resolution", "spinup", "dt", "device"),
    ),
    # Darcy solved on the 61x61 node grid, then each sample sampled at its own random nodes
    # (exact grid values, padded to points_max with a mask); point-set operators only.
    "darcy_mesh": Problem(
        name="darcy_mesh",
        dim=2,
        periodic=False,
        description="2D Darcy flow on random point sets (300–600 nodes of a 61×61 grid per sample); map a -> u",
        generator=_generate_darcy_mesh,
        generated_resolution=61,
        resolution=61,  # the grid of the solve; point sets are not strided
        n_train=400,
        n_test=100,
        padding=0,
        generator_options=("points_min", "points_max"),
        kind="points",
    ),
}


def get_problem(name: str) -> Problem:
    """Look a problem up by name, with a one-line error listing the known ones."""
    try:
        return PROBLEMS[name]
    except KeyError:
        raise UserInputError(f"problem {name!r} is unknown; use one of: {', '.join(PROBLEMS)}") from None


def cache_dir() -> Path:
    """Where generated default datasets live: $MUTRANSFER_CACHE, else ~/.cache/mutransfer."""
    root = os.environ.get("MUTRANSFER_CACHE") or Path.home() / ".cache" / "mutransfer"
    return Path(root) / "data"


def default_dataset(
    problem: Problem, *, n: int | None = None, resolution: int | None = None, seed: int = 0, progress: bool = True
) -> Path:
    """Path of a generated dataset (default: the problem's sizes), generating and caching it on first use."""
    from mutransfer.data.hdf5_io import write_dataset
    from mutransfer.data.pointclouds import write_point_dataset

    n = problem.n_samples if n is None else int(n)
    resolution = problem.generated_resolution if resolution is None else int(resolution)
    path = cache_dir() / f"{problem.name}_n{n}_r{resolution}_seed{seed}.h5"
    if not path.exists():
        data = problem.generator(n, resolution, seed=seed, progress=progress)
        write = write_point_dataset if problem.kind == "points" else write_dataset
        write(path, data)  # atomic: temp file, then rename
    return path
