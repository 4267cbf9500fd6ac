"""The 2D vorticity solver behind ``mutransfer.data._navier_stokes`` (which has the presets and the generator).

    w_t + u . grad w = nu Laplacian(w) + f,   u = (d psi/dy, -d psi/dx),   -Laplacian(psi) = w,

on [0, L)^2 with periodic boundaries.

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
"""

from __future__ import annotations

import math

import numpy as np
import torch
from tqdm.auto import tqdm

from mutransfer._config.progress import bar_disabled
from mutransfer.errors import UserInputError

__all__ = ["MAX_CFL", "VorticitySolver", "solve_navier_stokes"]

#: The solve stops with an error when the advective Courant number exceeds this.
MAX_CFL = 1.0
#: Target bytes of solver state per chunk of samples (GPU; CPU).
_CHUNK_BYTES = 256 * 2**20
_CPU_CHUNK_BYTES = 16 * 2**20


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

    def __init__(
        self, resolution: int, *, nu: float, dt: float, length: float = 2.0 * math.pi, forcing=None, device="cpu"
    ):
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


def check_positive_int(name: str, value, example) -> int:
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
    time_steps = check_positive_int("time_steps", time_steps, 64)
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
    bar = _bar or tqdm(total=total, disable=bar_disabled(progress), desc="navier-stokes", unit="step", leave=False)
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
