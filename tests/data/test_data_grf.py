"""Gaussian random fields: spectra, boundary conditions, determinism."""

import numpy as np
import pytest
import scipy.fft

from mutransfer.data._grf import (
    neumann_grf_2d,
    neumann_spectrum_2d,
    periodic_grf_1d,
    periodic_spectrum_1d,
)
from mutransfer.errors import UserInputError


def test_periodic_spectrum_matches_covariance_operator():
    # 625 (-Laplacian + 25 I)^-2, eigenvalues of -Laplacian are (2 pi k)^2
    k = np.arange(5)
    expected = 625.0 / ((2 * np.pi * k) ** 2 + 25.0) ** 2
    np.testing.assert_allclose(periodic_spectrum_1d(k), expected, rtol=1e-14)
    assert periodic_spectrum_1d(0) == pytest.approx(1.0)


def test_periodic_mode_variance_matches_spectrum():
    n = 2000
    u = periodic_grf_1d(n, 64, np.random.default_rng(0))
    assert u.shape == (n, 64) and u.dtype == np.float64
    c = scipy.fft.rfft(u, axis=-1, norm="forward")  # coefficient of e^{2 pi i k x}
    # u = sum_k sqrt(lam_k) (xi sqrt2 cos + eta sqrt2 sin)  =>  E|c_k|^2 = lam_k
    k = np.arange(1, 9)
    ratio = np.mean(np.abs(c[:, k]) ** 2, axis=0) / periodic_spectrum_1d(k)
    # |c_k|^2 ~ lam/2 chi^2_2: relative standard error 1/sqrt(2000) ~ 2.2 %
    assert np.all(np.abs(ratio - 1) < 0.10), ratio
    # sin and cos parts are independent with equal variance
    re, im = np.mean(c[:, 1:4].real ** 2, 0), np.mean(c[:, 1:4].imag ** 2, 0)
    np.testing.assert_allclose(re / im, 1.0, atol=0.15)
    # zero mean (k = 0 dropped) and no Nyquist energy
    np.testing.assert_allclose(c[:, 0], 0.0, atol=1e-14)
    np.testing.assert_allclose(c[:, 32], 0.0, atol=1e-14)
    # pointwise variance: sum_{1 <= k < N/2} 2 lam_k (cos^2 + sin^2) = sum 2 lam_k
    expected_var = 2 * periodic_spectrum_1d(np.arange(1, 32)).sum()
    assert np.var(u) == pytest.approx(expected_var, rel=0.1)


def test_periodic_constant_mode_when_not_zero_mean():
    u = periodic_grf_1d(2000, 32, np.random.default_rng(1), zero_mean=False)
    means = u.mean(axis=1)
    assert np.var(means) == pytest.approx(periodic_spectrum_1d(0), rel=0.1)
    # the switch does not change the other modes
    v = periodic_grf_1d(2000, 32, np.random.default_rng(1), zero_mean=True)
    np.testing.assert_allclose(u - means[:, None], v, atol=1e-12)


def test_periodic_determinism_and_prefix_stability():
    a = periodic_grf_1d(5, 128, np.random.default_rng(7))
    b = periodic_grf_1d(5, 128, np.random.default_rng(7))
    c = periodic_grf_1d(5, 128, np.random.default_rng(8))
    prefix = periodic_grf_1d(2, 128, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    np.testing.assert_array_equal(a[:2], prefix)


def _cosine_coefficients(psi):
    """Coefficients b of psi_ij = sum_kl b_kl cos(pi k x_i) cos(pi l y_j) by a direct solve."""
    s = psi.shape[-1]
    x = np.linspace(0.0, 1.0, s)
    cmat = np.cos(np.pi * np.outer(x, np.arange(s)))
    inv = np.linalg.inv(cmat)
    return np.einsum("ki,nij,lj->nkl", inv, psi, inv)


def test_neumann_cosine_mode_variance():
    n, s = 2000, 9
    psi = neumann_grf_2d(n, s, np.random.default_rng(2))
    assert psi.shape == (n, s, s)
    b = _cosine_coefficients(psi)
    np.testing.assert_allclose(b[:, 0, 0], 0.0, atol=1e-12)  # zero mean
    for k1, k2 in [(0, 1), (1, 0), (1, 1), (2, 0), (0, 3), (2, 2)]:
        norm2 = (1 if k1 == 0 else 2) * (1 if k2 == 0 else 2)  # orthonormal cosine basis
        expected = neumann_spectrum_2d(k1, k2) * norm2
        # (-Laplacian + 9 I)^-2 with eigenvalues pi^2 (k1^2 + k2^2)
        assert expected == pytest.approx(norm2 / (np.pi**2 * (k1**2 + k2**2) + 9.0) ** 2)
        assert np.mean(b[:, k1, k2] ** 2) == pytest.approx(expected, rel=0.1), (k1, k2)
    # distinct modes are uncorrelated
    corr = np.corrcoef(b[:, 0, 1], b[:, 1, 0])[0, 1]
    assert abs(corr) < 0.1


def test_neumann_zero_normal_derivative():
    s = 129
    h = 1.0 / (s - 1)
    psi = neumann_grf_2d(20, s, np.random.default_rng(3), n_modes=8)
    # second-order one-sided normal derivatives on all four sides
    d_left = (-3 * psi[:, 0, :] + 4 * psi[:, 1, :] - psi[:, 2, :]) / (2 * h)
    d_right = (3 * psi[:, -1, :] - 4 * psi[:, -2, :] + psi[:, -3, :]) / (2 * h)
    d_bottom = (-3 * psi[:, :, 0] + 4 * psi[:, :, 1] - psi[:, :, 2]) / (2 * h)
    d_top = (3 * psi[:, :, -1] - 4 * psi[:, :, -2] + psi[:, :, -3]) / (2 * h)
    interior = np.abs(np.gradient(psi, h, axis=1)[:, 20:-20, 20:-20]).max()
    boundary = max(np.abs(d).max() for d in (d_left, d_right, d_bottom, d_top))
    assert interior > 0.05
    assert boundary < 1e-3 * interior


def test_neumann_determinism_and_validation():
    a = neumann_grf_2d(3, 17, np.random.default_rng(5))
    np.testing.assert_array_equal(a, neumann_grf_2d(3, 17, np.random.default_rng(5)))
    assert not np.allclose(a, neumann_grf_2d(3, 17, np.random.default_rng(6)))
    with pytest.raises(UserInputError, match="resolution"):
        neumann_grf_2d(3, 2, np.random.default_rng(0))
    with pytest.raises(UserInputError, match="n_modes"):
        neumann_grf_2d(3, 9, np.random.default_rng(0), n_modes=10)
    with pytest.raises(UserInputError, match="n_samples"):
        periodic_grf_1d(0, 16, np.random.default_rng(0))
