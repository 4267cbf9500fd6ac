"""2D incompressible Navier-Stokes data in vorticity form on the periodic torus.

    w_t + u . grad w = nu Laplacian(w) + f,   u = (d psi/dy, -d psi/dx),   -Laplacian(psi) = w,

on [0, L)^2 with periodic boundaries. Map w0 -> w(x, y, t) at the recorded times.

The solver (discretisation, time stepping, stability checks) is
``mutransfer.data._navier_stokes_solver``; this module holds the presets, the
initial-vorticity GRF and the generator, and re-exports the solver's names.

Presets
-------
``mutransfer`` (muTransfer-FNO, the PINO "Re500" Kolmogorov flow): L = 2 pi,
nu = 1/500, f = -4 cos(4 y); w recorded every 1/512 time unit ("512 steps per
unit time"), 64 records by default, i.e. t_k = k/512, k = 1..64, t in (0, 0.125].
Solver step 1/1024 (2 steps per record; relative time error ~1e-5). w0 ~ N(0, 7^3 (-Laplacian + 49 I)^(-2.5))
on [0, 2 pi)^2 -- the FNO/PINO ``GaussianRF(alpha=2.5, tau=7)`` with L = 2 pi
(eigenvalues 7^3 (|k|^2 + 49)^(-2.5) for integer wavevectors k, zero mean).
PINO's own Re500 data first spins the GRF up for 100 time units onto the
turbulent attractor; ``spinup`` does the same (default 0: w0 is the GRF draw).

``fno`` (FNO paper): L = 1, nu in {1e-3, 1e-4, 1e-5} (default 1e-3),
f = 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y)), w0 ~ N(0, 7^3 (-Laplacian + 49 I)^(-2.5))
periodic on [0, 1)^2 (eigenvalues 7^3 (4 pi^2 |k|^2 + 49)^(-2.5)), solver step 1e-4,
w recorded at t = 1, 2, ..., T (T = 50, 30, 20 for nu = 1e-3, 1e-4, 1e-5 as in
the published files).

Both GRFs use the FNO/PINO code's normalisation (sigma = tau^(alpha - 1)
multiplies the standard deviation): the "7^(3/2)" of the papers'
N(0, 7^(3/2) (-Laplacian + 49 I)^(-2.5)) is read as the code draws it, so the
covariance is 7^3 (...)^(-2.5) (the code, not the formula, made the published files).

Data are generated on a fine ``solver_resolution`` grid (default 2 x the
stored resolution) and stored strided to ``resolution`` (as the FNO data:
256 -> 64; the muTransfer paper: 512 -> 64).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from mutransfer.data._navier_stokes_solver import MAX_CFL, VorticitySolver, check_positive_int, solve_navier_stokes
from mutransfer.errors import UserInputError

__all__ = [
    "PRESETS",
    "FNO_TIME_STEPS",
    "MAX_CFL",
    "VorticitySolver",
    "periodic_grf_2d",
    "solve_navier_stokes",
    "generate_navier_stokes",
]

#: Default number of recorded times of the fno preset per viscosity (the published files).
FNO_TIME_STEPS = {1e-3: 50, 1e-4: 30, 1e-5: 20}

PRESETS = {
    "mutransfer": {
        "length": 2.0 * math.pi,
        "nu": 1.0 / 500.0,
        "record_interval": 1.0 / 512.0,
        "time_steps": 64,
        "dt": 1.0 / 1024.0,
        "forcing": "-4 cos(4 y)",
        "domain": "periodic [0, 2pi)^2, x_i = 2 pi i/N",
    },
    "fno": {
        "length": 1.0,
        "nu": 1e-3,
        "record_interval": 1.0,
        "time_steps": None,  # from FNO_TIME_STEPS
        "dt": 1e-4,
        "forcing": "0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y)))",
        "domain": "periodic [0, 1)^2, x_i = i/N",
    },
}
_GRF = {"alpha": 2.5, "tau": 7.0}


def _forcing_field(preset: str, n: int, length: float) -> np.ndarray:
    x = np.arange(n) * (length / n)
    xx, yy = np.meshgrid(x, x, indexing="ij")
    if preset == "mutransfer":
        return -4.0 * np.cos(4.0 * yy)
    return 0.1 * (np.sin(2 * np.pi * (xx + yy)) + np.cos(2 * np.pi * (xx + yy)))


def periodic_grf_2d(
    n_samples: int,
    resolution: int,
    rng: np.random.Generator,
    *,
    length: float = 1.0,
    alpha: float = 2.5,
    tau: float = 7.0,
    scale: float | None = None,
) -> np.ndarray:
    """Sample w ~ N(0, scale^2 (-Laplacian + tau^2 I)^(-alpha)) on the periodic square [0, length)^2.

    Covariance eigenvalue of the Fourier mode exp(i 2pi/length k.x), k in Z^2,
    k != 0: ``scale^2 ((2pi/length)^2 |k|^2 + tau^2)^(-alpha)``; the k = 0 mode is
    0 (zero mean). ``scale`` defaults to tau^(alpha - 1), the FNO code's
    sigma = tau^(0.5 (2 alpha - d)) for d = 2. As in the FNO code, independent
    complex normal coefficients (E|xi|^2 = 1) are placed on all N^2 modes of the
    grid and the real part of the inverse FFT is taken; the real part halves
    the variance, hence the factor sqrt(2). Returns float64 (n, N, N) at
    x_i = i length/N. Deterministic given ``rng``, sample-major draws.
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise UserInputError(f"n_samples {n_samples!r}: must be a positive integer; try 100")
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)) or resolution < 4:
        raise UserInputError(f"resolution {resolution!r}: must be an integer >= 4; try 64")
    n = int(resolution)
    sigma = tau ** (alpha - 1.0) if scale is None else float(scale)
    k = np.fft.fftfreq(n, d=1.0 / n)
    c = 2.0 * np.pi / length
    k2 = (c * k[:, None]) ** 2 + (c * k[None, :]) ** 2
    std = np.sqrt(2.0) * sigma * (k2 + tau**2) ** (-alpha / 2.0)
    std[0, 0] = 0.0
    z = rng.standard_normal((int(n_samples), 2, n, n))
    coef = (z[:, 0] + 1j * z[:, 1]) * (std / np.sqrt(2.0))
    return np.real(np.fft.ifft2(coef * (n * n), axes=(-2, -1)))


def generate_navier_stokes(
    n: int,
    resolution: int,
    *,
    seed: int,
    preset: str = "mutransfer",
    nu: float | None = None,
    time_steps: int | None = None,
    solver_resolution: int | None = None,
    spinup: float = 0.0,
    dt: float | None = None,
    device="cpu",
    progress: bool = True,
) -> dict:
    """Generate n Navier-Stokes samples (w0, w(., ., t_k)) of a preset (module docstring).

    resolution: stored grid S (S x S); the solve runs on ``solver_resolution``
    (default 2 S, must be a multiple of S) and is strided to S.
    nu: viscosity (default: the preset's; the mutransfer preset is defined by
    Re = 500 but accepts another nu). time_steps: number of recorded times
    (default 64 for mutransfer, FNO_TIME_STEPS[nu] for fno). spinup: time
    units solved before w0 is taken (0: w0 is the GRF draw). dt: solver step
    (default: the preset's).

    Returns {"input": (n, S, S) float64 w0, "output": (n, S, S, T) float32,
    "grid": {"x", "y": (S,), "t": (T,)}, "attrs": {...}} in the layout of hdf5_io.
    """
    if preset not in PRESETS:
        raise UserInputError(f"preset {preset!r} is unknown; use one of: {', '.join(PRESETS)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserInputError(f"seed {seed!r}: must be a non-negative integer; try 0")
    n = check_positive_int("n", n, 100)
    s = check_positive_int("resolution", resolution, 64)
    if s < 4 or s % 2:
        raise UserInputError(f"resolution {s}: Navier-Stokes needs an even grid of at least 4 points; try 64")
    cfg = PRESETS[preset]
    nu = float(cfg["nu"] if nu is None else nu)
    if not nu > 0 or not math.isfinite(nu):
        raise UserInputError(f"nu {nu}: the viscosity must be a positive number; try {cfg['nu']:g}")
    if time_steps is None:
        if preset == "fno":
            time_steps = FNO_TIME_STEPS.get(nu)
            if time_steps is None:
                raise UserInputError(
                    f"time_steps: the fno preset has no default for nu {nu:g} (defaults for "
                    f"{', '.join(f'{v:g}' for v in FNO_TIME_STEPS)}); pass --time-steps, e.g. 20"
                )
        else:
            time_steps = cfg["time_steps"]
    time_steps = check_positive_int("time_steps", time_steps, 64)
    fine = 2 * s if solver_resolution is None else check_positive_int("solver_resolution", solver_resolution, 2 * s)
    if fine % s or fine % 2:
        raise UserInputError(f"solver_resolution {fine}: must be an even multiple of the resolution {s}; try {2 * s}")
    step = float(cfg["dt"] if dt is None else dt)
    if not step > 0 or not math.isfinite(step):
        raise UserInputError(f"dt {dt}: the solver step must be a positive number; try {cfg['dt']:g}")
    if not (isinstance(spinup, (int, float)) and math.isfinite(spinup) and spinup >= 0):
        raise UserInputError(f"spinup {spinup!r}: must be a number of time units >= 0; try 0")
    interval = float(cfg["record_interval"])
    substeps = max(1, math.ceil(interval / step - 1e-9))
    h = interval / substeps
    spinup_steps = math.ceil(spinup / h - 1e-9) if spinup > 0 else 0
    length = float(cfg["length"])

    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserInputError(f"device {device!r}: use a torch device such as cpu or cuda") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserInputError(f"device {str(device)!r}: CUDA is not available on this machine; use cpu")
    t0 = time.perf_counter()
    rng = np.random.default_rng(int(seed))
    w0 = periodic_grf_2d(n, fine, rng, length=length, **_GRF)
    forcing = _forcing_field(preset, fine, length)
    sol = solve_navier_stokes(
        w0,
        nu=nu,
        dt=h,
        record_interval=interval,
        time_steps=time_steps,
        length=length,
        forcing=forcing,
        stride=fine // s,
        spinup_steps=spinup_steps,
        device=device,
        progress=progress,
    )
    x = np.arange(s, dtype=np.float64) * (length / s)
    t = np.arange(1, time_steps + 1, dtype=np.float64) * interval
    attrs = {
        "problem": "navier_stokes",
        "preset": preset,
        "seed": int(seed),
        "n_samples": n,
        "resolution": s,
        "time_steps": time_steps,
        "pde.nu": nu,
        "pde.reynolds": 1.0 / nu,
        "pde.forcing": cfg["forcing"],
        "pde.domain": cfg["domain"],
        "pde.t_final": float(t[-1]),
        "pde.record_interval": interval,
        "pde.time_grid": "t_k = k * record_interval, k = 1..time_steps (t = 0 is the input)",
        "grf.kind": "periodic",
        "grf.alpha": _GRF["alpha"],
        "grf.tau": _GRF["tau"],
        "grf.scale": _GRF["tau"] ** (_GRF["alpha"] - 1.0),
        "grf.zero_mean": True,
        "grf.length": length,
        "solver.scheme": "fourier pseudo-spectral, 2/3 dealiasing, Crank-Nicolson diffusion + Heun advection (2nd order)",
        "solver.resolution": fine,
        "solver.dt": h,
        "solver.substeps": substeps,
        "solver.n_steps": spinup_steps + substeps * time_steps,
        "solver.spinup": spinup_steps * h,
        "solver.max_cfl": float(sol["max_cfl"]),
        "solver.device": str(device),
        "solver.seconds": round(time.perf_counter() - t0, 3),
    }
    return {
        "input": sol["w0"],
        "output": sol["w"],
        "grid": {"x": x, "y": x.copy(), "t": t},
        "attrs": attrs,
    }
