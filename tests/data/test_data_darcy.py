"""Darcy finite-difference solver: manufactured solution, structure, generator."""

import numpy as np
import pytest

from mutransfer.data._darcy import darcy_matrix, generate_darcy, solve_darcy
from mutransfer.errors import UserInputError

PI = np.pi


def manufactured(s):
    """u = sin(pi x) sin(pi y), a = 1 + 0.5 sin(2 pi x) cos(pi y)^2, f = -div(a grad u), on the node grid."""
    x = np.linspace(0.0, 1.0, s)
    X, Y = np.meshgrid(x, x, indexing="ij")
    u = np.sin(PI * X) * np.sin(PI * Y)
    a = 1 + 0.5 * np.sin(2 * PI * X) * np.cos(PI * Y) ** 2
    a_x = PI * np.cos(2 * PI * X) * np.cos(PI * Y) ** 2
    a_y = -0.5 * PI * np.sin(2 * PI * X) * np.sin(2 * PI * Y)
    u_x = PI * np.cos(PI * X) * np.sin(PI * Y)
    u_y = PI * np.sin(PI * X) * np.cos(PI * Y)
    lap_u = -2 * PI**2 * u
    f = -(a_x * u_x + a_y * u_y + a * lap_u)
    return a, f, u


@pytest.mark.parametrize("face_mean", ["harmonic", "arithmetic"])
def test_manufactured_solution_converges_second_order(face_mean):
    errors = []
    for s in (17, 33, 65):
        a, f, u = manufactured(s)
        errors.append(np.abs(solve_darcy(a, f, face_mean=face_mean) - u).max())
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((orders > 1.8) & (orders < 2.2)), (errors, orders)
    assert errors[-1] < 5e-4


def test_constant_coefficient_matches_poisson_series():
    # -Laplacian u = 1 on the unit square:
    # u(1/2, 1/2) = sum_{m,n odd} 16 (-1)^{(m+n)/2-1} / (pi^4 m n (m^2+n^2))
    m = np.arange(1, 400, 2)[:, None]
    n = np.arange(1, 400, 2)[None, :]
    center = np.sum(16 * (-1.0) ** ((m + n) // 2 - 1) / (PI**4 * m * n * (m**2 + n**2)))
    assert center == pytest.approx(0.07367, abs=1e-5)
    s = 65
    u = solve_darcy(np.ones((s, s)), 1.0)
    assert u[32, 32] == pytest.approx(center, abs=2e-5)
    # linear in f and in 1/a for a constant coefficient
    np.testing.assert_allclose(solve_darcy(np.full((s, s), 4.0), 2.0), u / 2, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(u, u.T, atol=1e-14)  # symmetry of the square


def test_matrix_matches_direct_loop_assembly():
    rng = np.random.default_rng(0)
    s = 6
    a = rng.uniform(1.0, 5.0, (s, s))
    harm = lambda p, q: 2 * p * q / (p + q)  # noqa: E731
    m = s - 2
    ref = np.zeros((m * m, m * m))
    for i in range(1, s - 1):
        for j in range(1, s - 1):
            row = (i - 1) * m + (j - 1)
            for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                w = harm(a[i, j], a[i + di, j + dj])
                ref[row, row] += w
                if 1 <= i + di <= s - 2 and 1 <= j + dj <= s - 2:
                    ref[row, (i + di - 1) * m + (j + dj - 1)] -= w
    mat = darcy_matrix(a)
    assert mat.format == "csr"
    np.testing.assert_allclose(mat.toarray(), ref, rtol=1e-14)


def test_piecewise_coefficient_solution_zero_on_boundary_and_positive():
    data = generate_darcy(3, 33, seed=0, progress=False)
    a, u = data["input"], data["output"]
    assert a.shape == u.shape == (3, 33, 33)
    assert set(np.unique(a)) == {3.0, 12.0}
    for k in range(3):
        assert np.any(a[k] == 3.0) and np.any(a[k] == 12.0)
    boundary = np.concatenate([u[:, 0, :], u[:, -1, :], u[:, :, 0], u[:, :, -1]], axis=1)
    assert np.all(boundary == 0.0)
    assert np.all(u[:, 1:-1, 1:-1] > 0.0)  # discrete maximum principle (M-matrix, f = 1 > 0)
    # compliance sum(f u) = b^T A(a)^-1 b is decreasing in a (A is monotone in the face values),
    # so it lies between the constant-coefficient values for a = 12 and a = 3
    s = 33
    lo = solve_darcy(np.full((s, s), 12.0), 1.0).sum()
    hi = solve_darcy(np.full((s, s), 3.0), 1.0).sum()
    assert np.all((u.sum(axis=(1, 2)) > lo) & (u.sum(axis=(1, 2)) < hi))
    # residual of the discrete equation is at round-off level
    h = 1.0 / (s - 1)
    res = darcy_matrix(a[0]) @ u[0, 1:-1, 1:-1].ravel() - h * h
    assert np.abs(res).max() < 1e-12


def test_generate_darcy_is_deterministic():
    a = generate_darcy(2, 17, seed=5, progress=False)
    b = generate_darcy(2, 17, seed=5, progress=False)
    c = generate_darcy(2, 17, seed=6, progress=False)
    np.testing.assert_array_equal(a["input"], b["input"])
    np.testing.assert_array_equal(a["output"], b["output"])
    assert not np.array_equal(a["input"], c["input"])
    np.testing.assert_array_equal(a["grid"]["x"], np.linspace(0, 1, 17))
    attrs = a["attrs"]
    assert attrs["problem"] == "darcy" and attrs["darcy.a_plus"] == 12.0 and attrs["darcy.a_minus"] == 3.0


def test_bad_inputs_raise_user_errors():
    with pytest.raises(UserInputError, match="a shape"):
        solve_darcy(np.ones((4, 5)))
    with pytest.raises(UserInputError, match="> 0"):
        solve_darcy(-np.ones((5, 5)))
    with pytest.raises(UserInputError, match="f shape"):
        solve_darcy(np.ones((5, 5)), np.ones((4, 4)))
    with pytest.raises(UserInputError, match="face_mean"):
        solve_darcy(np.ones((5, 5)), face_mean="geometric")
    with pytest.raises(UserInputError, match="a_plus"):
        generate_darcy(1, 9, seed=0, a_minus=0.0, progress=False)
