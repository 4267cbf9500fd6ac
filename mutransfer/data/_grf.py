"""Gaussian random fields (GRFs) for PDE initial data and coefficients.

Both samplers are vectorised over samples and deterministic given a
``numpy.random.Generator``. The random draws are laid out sample-major, so the
first ``m`` samples of a batch of ``n > m`` equal a batch of ``m`` drawn from an
identically seeded generator (same resolution and settings).

k = 0 (the constant mode): by default (``zero_mean=True``) its coefficient is
set to 0, as in the generators of the classic FNO data sets, so every sample
has exactly zero spatial mean. With ``zero_mean=False`` the constant mode is
drawn with its prescribed variance ``lambda_0``. The normal variate for k = 0
is drawn in both cases, so the other modes do not depend on this switch.
"""

from __future__ import annotations

import numpy as np
import scipy.fft

from mutransfer.errors import UserInputError

__all__ = ["periodic_grf_1d", "neumann_grf_2d", "periodic_spectrum_1d", "neumann_spectrum_2d"]


def _check_common(n_samples: int, resolution: int, min_resolution: int, rng) -> None:
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise UserInputError(f"n_samples {n_samples!r}: must be a positive integer; try 100")
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)) or resolution < min_resolution:
        raise UserInputError(f"resolution {resolution!r}: must be an integer >= {min_resolution}; try 64")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def periodic_spectrum_1d(k: np.ndarray, *, scale: float = 25.0, tau: float = 25.0, alpha: float = 2.0) -> np.ndarray:
    """Covariance eigenvalues ``scale**2 * ((2 pi k)**2 + tau)**(-alpha)`` for integer k."""
    k = np.asarray(k, dtype=np.float64)
    return scale**2 * ((2.0 * np.pi * k) ** 2 + tau) ** (-alpha)


def periodic_grf_1d(
    n_samples: int,
    resolution: int,
    rng: np.random.Generator,
    *,
    scale: float = 25.0,
    tau: float = 25.0,
    alpha: float = 2.0,
    zero_mean: bool = True,
) -> np.ndarray:
    """Sample u ~ N(0, scale^2 (-Laplacian + tau I)^(-alpha)) on the periodic unit interval.

    Defaults give the FNO Burgers initial data N(0, 625 (-Laplacian + 25 I)^(-2)).
    Note ``tau`` is the shift itself here (not squared). The field is the
    Karhunen-Loeve sum over the real Fourier basis 1, sqrt(2)cos(2 pi k x),
    sqrt(2)sin(2 pi k x) with eigenvalues ``periodic_spectrum_1d(k)``, truncated
    to 1 <= k < N/2 (the Nyquist mode of an even grid is left at 0), plus the
    k = 0 mode unless ``zero_mean``.

    Returns float64 of shape (n_samples, N), sampled at x_j = j/N, j = 0..N-1.
    Equivalently ``rfft(u, norm="forward")[:, k]`` has E|.|^2 = lambda_k.
    """
    _check_common(n_samples, resolution, 2, rng)
    if tau <= 0 and not zero_mean:
        raise UserInputError(f"tau {tau}: the k=0 mode needs tau > 0; use zero_mean=True or tau > 0")
    n = int(resolution)
    n_modes = (n - 1) // 2  # k = 1 .. n_modes, all strictly below the Nyquist wavenumber
    z = rng.standard_normal((int(n_samples), 2, n_modes + 1))
    lam = periodic_spectrum_1d(np.arange(n_modes + 1), scale=scale, tau=tau, alpha=alpha)
    coef = np.zeros((int(n_samples), n // 2 + 1), dtype=np.complex128)
    amp = np.sqrt(lam[1:] / 2.0)
    coef[:, 1 : n_modes + 1] = amp * (z[:, 0, 1:] - 1j * z[:, 1, 1:])
    if not zero_mean:
        coef[:, 0] = np.sqrt(lam[0]) * z[:, 0, 0]
    return scipy.fft.irfft(coef, n=n, axis=-1, norm="forward")


def neumann_spectrum_2d(
    k1: np.ndarray, k2: np.ndarray, *, scale: float = 1.0, tau: float = 3.0, alpha: float = 2.0
) -> np.ndarray:
    """Covariance eigenvalues ``scale**2 * (pi**2 (k1**2 + k2**2) + tau**2)**(-alpha)``."""
    k1 = np.asarray(k1, dtype=np.float64)
    k2 = np.asarray(k2, dtype=np.float64)
    return scale**2 * (np.pi**2 * (k1**2 + k2**2) + tau**2) ** (-alpha)


def neumann_grf_2d(
    n_samples: int,
    resolution: int,
    rng: np.random.Generator,
    *,
    tau: float = 3.0,
    alpha: float = 2.0,
    scale: float = 1.0,
    n_modes: int | None = None,
    zero_mean: bool = True,
) -> np.ndarray:
    """Sample psi ~ N(0, scale^2 (-Laplacian + tau^2 I)^(-alpha)) on (0,1)^2, zero Neumann BC.

    Defaults give the FNO Darcy field N(0, (-Laplacian + 9 I)^(-2)) (``tau`` is
    squared here). Cosine Karhunen-Loeve series
    psi = sum_{k1,k2 < n_modes} sqrt(lambda_k) c_k1 c_k2 xi_k cos(pi k1 x) cos(pi k2 y)
    with c_0 = 1, c_k = sqrt(2) (orthonormal basis), lambda from
    ``neumann_spectrum_2d``; ``n_modes`` defaults to S (all cosines the grid
    resolves) and must be <= S. Evaluated with a type-I DCT.

    Returns float64 of shape (n_samples, S, S) on the node grid including the
    boundary, ``psi[:, i, j] = psi(x_i, y_j)`` with x_i = y_i = i/(S-1).
    """
    _check_common(n_samples, resolution, 3, rng)
    s = int(resolution)
    m = s if n_modes is None else int(n_modes)
    if not 1 <= m <= s:
        raise UserInputError(f"n_modes {n_modes}: must be between 1 and resolution {s}; try {s}")
    if tau <= 0 and not zero_mean:
        raise UserInputError(f"tau {tau}: the k=0 mode needs tau > 0; use zero_mean=True or tau > 0")
    z = rng.standard_normal((int(n_samples), m, m))
    k = np.arange(m)
    norm = np.where(k == 0, 1.0, np.sqrt(2.0))
    std = np.sqrt(neumann_spectrum_2d(k[:, None], k[None, :], scale=scale, tau=tau, alpha=alpha))
    std *= norm[:, None] * norm[None, :]
    if zero_mean:
        std[0, 0] = 0.0
    # Unnormalised DCT-I: y_i = x_0 + (-1)^i x_{S-1} + 2 sum_{k=1}^{S-2} x_k cos(pi k i/(S-1)),
    # so halve the inner coefficients to get y_i = sum_k b_k cos(pi k i/(S-1)).
    w = np.full(s, 0.5)
    w[0] = w[-1] = 1.0
    w = w[:m]
    coef = np.zeros((int(n_samples), s, s))
    coef[:, :m, :m] = z * (std * w[:, None] * w[None, :])
    return scipy.fft.dctn(coef, type=1, axes=(1, 2))
