"""2D Navier-Stokes vorticity on the torus, learned in space-time (``mutransfer.data._navier_stokes``).

FNO-3D on space-time: w0 broadcast along t -> w(x, y, t). Space is periodic, time is
not; the FNO pads every axis equally, so 4 points of padding are paid on the periodic
space axes too (harmless, ~25% more FFT work at 32^2) to stop the time axis wrapping.
"""

from __future__ import annotations

from mutransfer._problems.base import problem_from_facts
from mutransfer.data._navier_stokes import generate_navier_stokes


def generate(n: int, resolution: int, *, seed: int, progress: bool = True, **options) -> dict:
    return generate_navier_stokes(n, resolution, seed=seed, progress=progress, **options)


PROBLEM = problem_from_facts(
    "navier_stokes",
    description="2D Navier-Stokes vorticity, Re=500 Kolmogorov forcing on [0,2pi]^2; map w0 -> w(x, y, t), t in (0, 0.125]",
    generator=generate,
    generated_resolution=64,
    resolution=32,
    n_train=40,  # small: an FNO-3D step costs ~0.4 CPU-s per sample at 32x32x16 (width 32, K=8)
    n_test=10,
    padding=4,
    time_resolution=16,
    generator_options=("preset", "nu", "time_steps", "solver_resolution", "spinup", "dt", "device"),
)
