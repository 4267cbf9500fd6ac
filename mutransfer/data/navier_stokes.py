"""2D incompressible Navier-Stokes data in vorticity form on the periodic torus.

    w_t + u . grad w = nu Laplacian(w) + f,   u = (d psi/dy, -d psi/dx),   -Laplacian(psi) = w,

on [0, L)^2 with periodic boundaries. Map w0 -> w(x, y, t) at the recorded times.

Discretisation
--------------
* Space: Fourier pseudo-spectral on an N x N grid x_i = i L/N, y_j = j L/N
  (arrays are indexed ``w[i, j] = w(x_i, y_j)``; y is the second coordinate x_2),
  real FFTs (torch, float64). The advection term is fully dealiased by the
  2/3 rule: the state is truncated to |k_x|, |k_y| <= N/3 before the
  velocity and the gradient are formed, and the product is truncated again,
  so no aliased product reaches a retained mode.
* Time: Crank-Nicolson for the diffusion (implicit, diagonal in Fourier space)
  with Heun's method (explicit trapezoidal predictor-corrector) for advection
  and forcing. One step of size h:

      w*      = [(1 + h/2 L) w^n + h N(w^n)] / (1 - h/2 L)
      w^{n+1} = [(1 + h/2 L) w^n + h/2 (N(w^n) + N(w*))] / (1 - h/2 L),

  L = -nu |k|^2, N(w) = -P(u . grad w) + f. Second order in h (the final
  stage is the trapezoidal rule with an O(h^2)-accurate predictor), two
  advection evaluations per step, self-starting. (The FNO paper's solver uses
  Crank-Nicolson with forward Euler for advection: first order.)
  The step is fixed (no adaptivity, so every sample's solution is independent
  of the batch it is solved in); the largest advective Courant number
  max(|u| h/dx + |v| h/dy) seen at the recorded times is stored as
  ``solver.max_cfl`` and a solve whose Courant number passes ``MAX_CFL`` or
  whose values become non-finite stops with a one-line error.

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
from tqdm.auto import tqdm

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

#: The solve stops with an error when the advective Courant number exceeds this.
MAX_CFL = 1.0
#: Default number of recorded times of the fno preset per viscosity (the published files).
FNO_TIME_STEPS = {1e-3: 50, 1e-4: 30, 1e-5: 20}
#: Target bytes of solver state per chunk of samples (GPU; CPU).
_CHUNK_BYTES = 256 * 2**20
_CPU_CHUNK_BYTES = 16 * 2**20

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


class VorticitySolver:
    """Batched pseudo-spectral CN-Heun solver for the vorticity equation (module docstring).

    Args:
        resolution: N, grid points per axis (even, >= 4).
        nu: viscosity (> 0).
        dt: time step.
        length: side L of the periodic square.
        forcing: None or an (N, N) array f(x_i, y_j).
        device: torch device for the solve (float64 throughout).

    States are Fourier coefficients ``w_hat = torch.fft.rfft2(w)`` of shape (B, N, N//2+1).
    """

    def __init__(self, resolution: int, *, nu: float, dt: float, length: float = 2.0 * math.pi,
                 forcing=None, device="cpu"):
        n = int(resolution)
        if n < 4 or n % 2:
            raise UserInputError(f"solver resolution {resolution}: must be an even integer >= 4; try 128")
        if not nu > 0 or not math.isfinite(nu):
            raise UserInputError(f"nu {nu}: the viscosity must be a positive number; try 1e-3")
        if not dt > 0 or not math.isfinite(dt):
            raise UserInputError(f"dt {dt}: the time step must be a positive number; try 1e-4")
        self.n, self.nu, self.dt, self.length = n, float(nu), float(dt), float(length)
        self.device = torch.device(device)
        opts = dict(dtype=torch.float64, device=self.device)
        kx_int = torch.fft.fftfreq(n, d=1.0 / n, **opts)[:, None]
        ky_int = torch.fft.rfftfreq(n, d=1.0 / n, **opts)[None, :]
        c = 2.0 * math.pi / self.length
        self.kx, self.ky = c * kx_int, c * ky_int
        k2 = self.kx**2 + self.ky**2
        self.inv_k2 = torch.where(k2 > 0, 1.0 / torch.where(k2 > 0, k2, torch.ones_like(k2)), torch.zeros_like(k2))
        cutoff = n // 3
        self.mask = ((kx_int.abs() <= cutoff) & (ky_int.abs() <= cutoff)).to(torch.float64)
        # Fourier multipliers with the 2/3 truncation folded in (complex128)
        self._u_op = (1j * self.ky * self.inv_k2 * self.mask).contiguous()
        self._v_op = (-1j * self.kx * self.inv_k2 * self.mask).contiguous()
        self._neg_dx = (-1j * self.kx * self.mask).contiguous()
        self._neg_dy = (-1j * self.ky * self.mask).contiguous()
        lin = -self.nu * k2
        self.cn_explicit = 1.0 + 0.5 * self.dt * lin
        self.cn_implicit = 1.0 / (1.0 - 0.5 * self.dt * lin)
        if forcing is None:
            self.f_hat = None
        else:
            f = torch.as_tensor(np.asarray(forcing, dtype=np.float64), **opts)
            if tuple(f.shape) != (n, n):
                raise UserInputError(f"forcing shape {tuple(f.shape)}: expected ({n}, {n})")
            self.f_hat = torch.fft.rfft2(f)
        self.dx = self.length / n

    # ------------------------------------------------------------------ transforms
    def to_spectral(self, w) -> torch.Tensor:
        w = torch.as_tensor(w, dtype=torch.float64, device=self.device)
        return torch.fft.rfft2(w)

    def to_physical(self, w_hat: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft2(w_hat, s=(self.n, self.n))

    def velocity(self, w_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, v) = (d psi/dy, -d psi/dx) in Fourier space, psi_hat = w_hat/|k|^2."""
        psi = w_hat * self.inv_k2
        return 1j * self.ky * psi, -1j * self.kx * psi

    def nonlinear(self, w_hat: torch.Tensor) -> torch.Tensor:
        """N(w) = -P_{2/3}(div(u w)) + f in Fourier space, from the truncated state P_{2/3} w.

        div(u w) = u . grad w because u is divergence-free (exactly, spectrally);
        the conservative form needs three inverse and two forward FFTs.
        """
        s = (self.n, self.n)
        u = torch.fft.irfft2(self._u_op * w_hat, s=s)
        v = torch.fft.irfft2(self._v_op * w_hat, s=s)
        w = torch.fft.irfft2(self.mask * w_hat, s=s)
        out = self._neg_dx * torch.fft.rfft2(u * w) + self._neg_dy * torch.fft.rfft2(v * w)
        if self.f_hat is not None:
            out = out + self.f_hat
        return out

    def step(self, w_hat: torch.Tensor) -> torch.Tensor:
        """One CN-Heun step of size dt."""
        n0 = self.nonlinear(w_hat)
        base = self.cn_explicit * w_hat
        w1 = (base + self.dt * n0) * self.cn_implicit
        n1 = self.nonlinear(w1)
        return (base + (0.5 * self.dt) * (n0 + n1)) * self.cn_implicit

    def advance(self, w_hat: torch.Tensor, n_steps: int) -> torch.Tensor:
        for _ in range(int(n_steps)):
            w_hat = self.step(w_hat)
        return w_hat

    def cfl(self, w_hat: torch.Tensor) -> float:
        """Advective Courant number max(|u| dt/dx + |v| dt/dy) over the batch."""
        u_hat, v_hat = self.velocity(w_hat)
        u = self.to_physical(u_hat).abs()
        v = self.to_physical(v_hat).abs()
        return float((u + v).max()) * self.dt / self.dx


def _check_positive_int(name: str, value, example) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserInputError(f"{name} {value!r}: must be a positive integer; try {example}")
    return int(value)


def solve_navier_stokes(
    w0,
    *,
    nu: float,
    dt: float,
    record_interval: float,
    time_steps: int,
    length: float = 2.0 * math.pi,
    forcing=None,
    stride: int = 1,
    spinup_steps: int = 0,
    device="cpu",
    progress: bool = False,
    threads: int | None = 1,
    _bar=None,
) -> dict:
    """Solve from w0 (n, N, N) and record w every ``record_interval`` (``time_steps`` records).

    ``dt`` is rounded down so that a record interval is a whole number of steps.
    ``spinup_steps`` steps are taken first; the state after them is returned as
    ``w0``. Records are strided by ``stride`` in space (w[:, ::stride, ::stride]).
    Returns {"w0": (n, N/s, N/s) float64, "w": (n, N/s, N/s, T) float32,
    "dt": step used, "substeps": steps per record, "max_cfl": float}.

    threads: torch intra-op threads during a CPU solve (restored afterwards;
    None keeps torch's setting). The solve works on cache-sized chunks of
    samples, whose FFTs gain nothing from more threads, and OpenMP threads
    spinning on an oversubscribed machine made a 2-thread solve 25x slower
    than a 1-thread one in our measurements.
    """
    w0 = np.asarray(w0, dtype=np.float64)
    if w0.ndim != 3 or w0.shape[1] != w0.shape[2]:
        raise UserInputError(f"w0 shape {w0.shape}: expected (n_samples, N, N)")
    if not np.all(np.isfinite(w0)):
        raise UserInputError("w0: contains NaN or inf values; pass finite initial vorticity")
    time_steps = _check_positive_int("time_steps", time_steps, 64)
    if not record_interval > 0:
        raise UserInputError(f"record_interval {record_interval}: must be > 0")
    substeps = max(1, math.ceil(record_interval / dt - 1e-9))
    h = record_interval / substeps
    n_grid = w0.shape[1]
    if n_grid % stride:
        raise UserInputError(f"stride {stride}: must divide the solver resolution {n_grid}")
    solver = VorticitySolver(n_grid, nu=nu, dt=h, length=length, forcing=forcing, device=device)
    n = w0.shape[0]
    m = n_grid // stride
    out_w0 = np.empty((n, m, m), dtype=np.float64)
    out_w = np.empty((n, m, m, time_steps), dtype=np.float32)
    per_sample = n_grid * n_grid * 128
    # CPU FFTs are fastest on cache-sized batches (~1 MB per complex field); GPUs want big batches
    budget = _CHUNK_BYTES if solver.device.type == "cuda" else _CPU_CHUNK_BYTES
    chunk = max(1, budget // per_sample)
    max_cfl = 0.0
    total = math.ceil(n / chunk) * (int(spinup_steps) + time_steps * substeps)
    bar = _bar or tqdm(total=total, disable=not progress, desc="navier-stokes", unit="step", leave=False)
    saved_threads = torch.get_num_threads()
    if threads is not None and solver.device.type == "cpu":
        torch.set_num_threads(int(threads))
    try:
        for start in range(0, n, chunk):
            w_hat = solver.to_spectral(w0[start : start + chunk])
            if spinup_steps:
                w_hat = solver.advance(w_hat, spinup_steps)
                bar.update(int(spinup_steps))
                cfl = _check_state(solver, w_hat, 0.0, h)
                max_cfl = max(max_cfl, cfl)
            out_w0[start : start + chunk] = solver.to_physical(w_hat)[:, ::stride, ::stride].cpu().numpy()
            max_cfl = max(max_cfl, solver.cfl(w_hat))
            for k in range(time_steps):
                w_hat = solver.advance(w_hat, substeps)
                bar.update(substeps)
                cfl = _check_state(solver, w_hat, (k + 1) * record_interval, h)
                max_cfl = max(max_cfl, cfl)
                w = solver.to_physical(w_hat)[:, ::stride, ::stride]
                out_w[start : start + chunk, :, :, k] = w.cpu().numpy()
    finally:
        torch.set_num_threads(saved_threads)
        if _bar is None:
            bar.close()
    return {"w0": out_w0, "w": out_w, "dt": h, "substeps": substeps, "max_cfl": max_cfl}


def _check_state(solver: VorticitySolver, w_hat: torch.Tensor, t: float, h: float) -> float:
    if not bool(torch.isfinite(w_hat).all()):
        raise UserInputError(
            f"dt {h:g}: the Navier-Stokes solve blew up (non-finite vorticity) by t = {t:g}; pass a smaller dt"
        )
    cfl = solver.cfl(w_hat)
    if cfl > MAX_CFL:
        raise UserInputError(
            f"dt {h:g}: advective Courant number reached {cfl:.3g} > {MAX_CFL} by t = {t:g}; "
            f"pass dt <= {h * 0.5 * MAX_CFL / cfl:.3g} or a coarser solver resolution"
        )
    return cfl


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
    n = _check_positive_int("n", n, 100)
    s = _check_positive_int("resolution", resolution, 64)
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
    time_steps = _check_positive_int("time_steps", time_steps, 64)
    fine = 2 * s if solver_resolution is None else _check_positive_int("solver_resolution", solver_resolution, 2 * s)
    if fine % s or fine % 2:
        raise UserInputError(
            f"solver_resolution {fine}: must be an even multiple of the resolution {s}; try {2 * s}"
        )
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
        w0, nu=nu, dt=h, record_interval=interval, time_steps=time_steps, length=length,
        forcing=forcing, stride=fine // s, spinup_steps=spinup_steps, device=device, progress=progress,
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
