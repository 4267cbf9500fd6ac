"""Viscous Burgers data: u_t + (u^2/2)_x = nu u_xx on the periodic unit interval.

Map u0 -> u(., t_final). Fourier pseudo-spectral in space (real FFT, 2/3-rule
dealiasing of the nonlinear term), ETDRK4 in time (Cox-Matthews scheme with
the Kassam-Trefethen contour-integral evaluation of the phi functions; the
diffusion term is integrated exactly). Batched over samples with numpy.

Grid: x_j = j/N, j = 0..N-1. The spatial mean (k = 0 mode) is conserved
exactly by construction.

Automatic time step (``stable_time_step``): with U = max|u0| (a bound for
max|u| at all later times by the maximum principle) and k_max = floor(N/3)
the largest retained wavenumber, the explicit (advective) part is resolved
with dt <= C / (2 pi k_a U), C = 2.5, where k_a = min(k_max, max(1, U/(2 pi nu))) is
the largest wavenumber at which advection is not dominated by the exactly
integrated diffusion; dt is further capped at 5e-3 for time accuracy and
rounded down so that t_final is a whole number of steps.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.fft
from tqdm.auto import tqdm

from mutransfer._config.progress import bar_disabled
from mutransfer.data._grf import periodic_grf_1d
from mutransfer.errors import UserInputError

__all__ = ["solve_burgers", "generate_burgers", "stable_time_step", "DT_MAX"]

#: Cap on the automatic time step, for time accuracy (max error ~5e-9 at nu = 0.1 on GRF data, N = 1024).
DT_MAX = 5e-3
#: Advective Courant number C of the automatic step (blow-up observed only above ~10).
_ADVECTIVE_CFL = 2.5
#: Number of contour points for the phi functions.
_CONTOUR_POINTS = 32
#: Target bytes per batch of the complex state (samples are solved in chunks of this size).
_CHUNK_BYTES = 8 * 2**20


def stable_time_step(u0: np.ndarray, *, nu: float, t_final: float) -> tuple[float, int]:
    """Automatic (dt, n_steps) for ``solve_burgers`` with dt * n_steps == t_final.

    u0: (n, N) or (N,) initial data. See the module docstring for the rule.
    """
    u0 = np.asarray(u0, dtype=np.float64)
    n = u0.shape[-1]
    umax = float(np.max(np.abs(u0))) if u0.size else 0.0
    k_max = max(n // 3, 1)
    if umax > 0:
        k_a = min(k_max, max(1.0, umax / (2.0 * math.pi * nu)))
        dt = min(DT_MAX, _ADVECTIVE_CFL / (2.0 * math.pi * k_a * umax))
    else:
        dt = DT_MAX
    if t_final <= 0:
        return 0.0, 0
    n_steps = max(1, math.ceil(t_final / dt - 1e-9))
    return t_final / n_steps, n_steps


def _etdrk4_coefficients(lin: np.ndarray, dt: float):
    """E, E/2, Q, f1, f2, f3 for the diagonal linear operator ``lin`` (real, <= 0)."""
    h_l = dt * lin
    r = np.exp(1j * np.pi * (np.arange(1, _CONTOUR_POINTS + 1) - 0.5) / _CONTOUR_POINTS)
    lr = h_l[:, None] + r[None, :]
    with np.errstate(over="ignore", under="ignore"):
        e_lr = np.exp(lr)
        q = dt * np.real(np.mean((np.exp(lr / 2.0) - 1.0) / lr, axis=1))
        f1 = dt * np.real(np.mean((-4.0 - lr + e_lr * (4.0 - 3.0 * lr + lr**2)) / lr**3, axis=1))
        f2 = dt * np.real(np.mean((2.0 + lr + e_lr * (lr - 2.0)) / lr**3, axis=1))
        f3 = dt * np.real(np.mean((-4.0 - 3.0 * lr - lr**2 + e_lr * (4.0 - lr)) / lr**3, axis=1))
    return np.exp(h_l), np.exp(h_l / 2.0), q, f1, f2, f3


def _validate(u0, nu, t_final, dt, n_steps) -> np.ndarray:
    u0 = np.asarray(u0, dtype=np.float64)
    if u0.ndim not in (1, 2) or u0.shape[-1] < 4:
        raise UserInputError(f"u0 shape {u0.shape}: expected (n_samples, N) with N >= 4")
    if not np.all(np.isfinite(u0)):
        raise UserInputError("u0: contains NaN or inf values; pass finite initial data")
    if not nu > 0:
        raise UserInputError(f"nu {nu}: viscosity must be > 0; try 0.1")
    if not t_final >= 0:
        raise UserInputError(f"t_final {t_final}: must be >= 0; try 1.0")
    if dt is not None and n_steps is not None:
        raise UserInputError("dt and n_steps: give at most one of them")
    if dt is not None and not dt > 0:
        raise UserInputError(f"dt {dt}: must be > 0; omit it for an automatic stable step")
    if n_steps is not None and (int(n_steps) != n_steps or n_steps < 1):
        raise UserInputError(f"n_steps {n_steps}: must be a positive integer; omit it for automatic")
    return u0


def solve_burgers(
    u0: np.ndarray,
    *,
    nu: float = 0.1,
    t_final: float = 1.0,
    dt: float | None = None,
    n_steps: int | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Solve viscous Burgers from u0 to time t_final; returns u(., t_final).

    u0: (n, N) (or (N,)) float values at x_j = j/N. nu: viscosity (> 0).
    dt / n_steps: give at most one; the step actually used is t_final/n_steps
    (dt is rounded down to fit). Default: ``stable_time_step``.
    Returns float64 with the shape of u0.
    """
    u0 = _validate(u0, nu, t_final, dt, n_steps)
    squeeze = u0.ndim == 1
    u = np.atleast_2d(u0)
    if t_final == 0:
        return u0.copy()
    if n_steps is None:
        if dt is None:
            _, n_steps = stable_time_step(u, nu=nu, t_final=t_final)
        else:
            n_steps = max(1, math.ceil(t_final / dt - 1e-9))
    n_steps = int(n_steps)
    h = t_final / n_steps

    n_grid = u.shape[-1]
    k = np.arange(n_grid // 2 + 1, dtype=np.float64)
    lin = -nu * (2.0 * np.pi * k) ** 2
    # Nonlinear term -(u^2/2)_x in Fourier space, with the 2/3 rule (also removes Nyquist).
    g = np.where(k <= n_grid // 3, -0.5j * (2.0 * np.pi * k), 0.0)
    e, e2, q, f1, f2, f3 = _etdrk4_coefficients(lin, h)
    gq, gf1, gf2, gf3 = g * q, g * f1, 2.0 * g * f2, g * f3

    def sq_hat(vh):
        return scipy.fft.rfft(scipy.fft.irfft(vh, n=n_grid, axis=-1) ** 2, axis=-1)

    chunk = max(1, _CHUNK_BYTES // (16 * (n_grid // 2 + 1)))
    out = np.empty_like(u)
    n_chunks = math.ceil(u.shape[0] / chunk)
    update_every = max(1, n_steps // 50)
    # Overflow on blow-up is reported once, after the loop, as a UserInputError.
    with (
        np.errstate(over="ignore", invalid="ignore"),
        tqdm(total=n_chunks * n_steps, disable=bar_disabled(progress), desc="burgers", unit="step", leave=False) as bar,
    ):
        for start in range(0, u.shape[0], chunk):
            v = scipy.fft.rfft(u[start : start + chunk], axis=-1)
            pending = 0
            for _ in range(n_steps):
                nv = sq_hat(v)
                a = e2 * v + gq * nv
                na = sq_hat(a)
                b = e2 * v + gq * na
                nb = sq_hat(b)
                c = e2 * a + gq * (2.0 * nb - nv)
                nc = sq_hat(c)
                v = e * v + gf1 * nv + gf2 * (na + nb) + gf3 * nc
                pending += 1
                if pending == update_every:
                    bar.update(pending)
                    pending = 0
            bar.update(pending)
            out[start : start + chunk] = scipy.fft.irfft(v, n=n_grid, axis=-1)
    if not np.all(np.isfinite(out)):
        raise UserInputError(f"dt {h:g}: Burgers solve blew up (non-finite values); use a smaller dt or omit it")
    return out[0] if squeeze else out


def generate_burgers(
    n: int,
    resolution: int,
    *,
    seed: int,
    nu: float = 0.1,
    t_final: float = 1.0,
    scale: float = 25.0,
    tau: float = 25.0,
    alpha: float = 2.0,
    dt: float | None = None,
    progress: bool = True,
) -> dict:
    """Generate n Burgers pairs (u0, u(., t_final)) on N = resolution periodic points.

    u0 ~ N(0, scale^2 (-Laplacian + tau I)^(-alpha)) with zero mean (see _grf.py).
    Returns {"input": (n, N) float64, "output": (n, N) float64,
    "grid": {"x": (N,) float64}, "attrs": {...}} in the layout of _hdf5_io.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserInputError(f"seed {seed!r}: must be a non-negative integer; try 0")
    if isinstance(resolution, (int, np.integer)) and not isinstance(resolution, bool) and resolution < 4:
        raise UserInputError(f"resolution {resolution}: Burgers needs at least 4 points; try 1024")
    rng = np.random.default_rng(int(seed))
    t0 = time.perf_counter()
    u0 = periodic_grf_1d(n, resolution, rng, scale=scale, tau=tau, alpha=alpha, zero_mean=True)
    if dt is None:
        h, n_steps = stable_time_step(u0, nu=nu, t_final=t_final)
    else:
        _validate(u0, nu, t_final, dt, None)
        n_steps = max(1, math.ceil(t_final / dt - 1e-9)) if t_final > 0 else 0
        h = t_final / n_steps if n_steps else 0.0
    u1 = solve_burgers(u0, nu=nu, t_final=t_final, n_steps=n_steps or None, progress=progress)
    x = np.arange(int(resolution), dtype=np.float64) / int(resolution)
    attrs = {
        "problem": "burgers",
        "seed": int(seed),
        "n_samples": int(n),
        "resolution": int(resolution),
        "pde.nu": float(nu),
        "pde.t_final": float(t_final),
        "pde.domain": "periodic [0,1), x_j = j/N",
        "grf.kind": "periodic",
        "grf.scale": float(scale),
        "grf.tau": float(tau),
        "grf.alpha": float(alpha),
        "grf.zero_mean": True,
        "solver.scheme": "fourier-pseudospectral ETDRK4 (Kassam-Trefethen), 2/3 dealiasing",
        "solver.dt": float(h),
        "solver.n_steps": int(n_steps),
        "solver.seconds": round(time.perf_counter() - t0, 3),
    }
    return {"input": u0, "output": u1, "grid": {"x": x}, "attrs": attrs}
