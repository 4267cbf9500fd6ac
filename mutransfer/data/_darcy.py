"""Darcy flow data: -div(a grad u) = f on (0,1)^2, u = 0 on the boundary.

Grid: S x S nodes including the boundary, x_i = y_i = i/(S-1), h = 1/(S-1);
arrays are indexed ``u[i, j] = u(x_i, y_j)``. Discretisation: 5-point finite
differences on the (S-2)^2 interior nodes,

    -[a_{i+1/2,j}(u_{i+1,j}-u_{ij}) - a_{i-1/2,j}(u_{ij}-u_{i-1,j})
      + a_{i,j+1/2}(u_{i,j+1}-u_{ij}) - a_{i,j-1/2}(u_{ij}-u_{i,j-1})] / h^2 = f_ij,

with face coefficients the harmonic mean of the two nodal values,
a_{i+1/2,j} = 2 a_ij a_{i+1,j} / (a_ij + a_{i+1,j}) (flux-continuous across
jumps of the piecewise-constant coefficient; second order for smooth a).
``face_mean="arithmetic"`` is available. The matrix is symmetric positive
definite (an M-matrix), assembled as scipy CSR on a sparsity pattern built
once per resolution, and solved with SuperLU (``scipy.sparse.linalg.splu``).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from tqdm.auto import tqdm

from mutransfer._config.progress import bar_disabled
from mutransfer.data._grf import neumann_grf_2d
from mutransfer.errors import UserInputError

__all__ = ["solve_darcy", "generate_darcy", "darcy_matrix"]


@functools.lru_cache(maxsize=8)
def _pattern(s: int):
    """CSR pattern of the interior 5-point operator and the map from entries to faces.

    Returns (indptr, indices, diag_pos, off_pos, off_face, node_faces); the CSR
    data array is filled as data[diag_pos] = faces[node_faces].sum(1) and
    data[off_pos] = -faces[off_face], where faces is the concatenation of the
    raveled x-faces (S-1, S) and y-faces (S, S-1).
    """
    m = s - 2
    n = m * m
    idx = np.arange(n).reshape(m, m)  # unknown number of interior node (i+1, j+1)
    xf = np.arange((s - 1) * s).reshape(s - 1, s)  # face between (i, j) and (i+1, j)
    yf = (s - 1) * s + np.arange(s * (s - 1)).reshape(s, s - 1)  # between (i, j) and (i, j+1)
    ii, jj = np.meshgrid(np.arange(1, s - 1), np.arange(1, s - 1), indexing="ij")
    # the 4 faces of each interior node: east, west, north, south
    node_faces = np.stack([xf[ii, jj], xf[ii - 1, jj], yf[ii, jj], yf[ii, jj - 1]], axis=-1)
    rows, cols, tags = [np.arange(n)], [np.arange(n)], [np.full(n, -1)]
    for k, (di, dj) in enumerate(((1, 0), (-1, 0), (0, 1), (0, -1))):
        ni, nj = ii + di, jj + dj
        inside = (ni >= 1) & (ni <= s - 2) & (nj >= 1) & (nj <= s - 2)
        rows.append(idx[ii[inside] - 1, jj[inside] - 1])
        cols.append(idx[ni[inside] - 1, nj[inside] - 1])
        tags.append(node_faces[..., k][inside])
    rows, cols, tag = np.concatenate(rows), np.concatenate(cols), np.concatenate(tags)
    order = np.lexsort((cols, rows))
    rows, cols, tag = rows[order], cols[order], tag[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    diag_pos = np.flatnonzero(tag < 0)  # one per row, in row order
    off_pos = np.flatnonzero(tag >= 0)
    node_faces = node_faces.reshape(n, 4)
    return indptr, cols.astype(np.int32), diag_pos, off_pos, tag[off_pos], node_faces


def _faces(a: np.ndarray, face_mean: str) -> np.ndarray:
    if face_mean == "harmonic":
        fx = 2.0 * a[1:, :] * a[:-1, :] / (a[1:, :] + a[:-1, :])
        fy = 2.0 * a[:, 1:] * a[:, :-1] / (a[:, 1:] + a[:, :-1])
    elif face_mean == "arithmetic":
        fx = 0.5 * (a[1:, :] + a[:-1, :])
        fy = 0.5 * (a[:, 1:] + a[:, :-1])
    else:
        raise UserInputError(f"face_mean {face_mean!r}: use 'harmonic' or 'arithmetic'")
    return np.concatenate([fx.ravel(), fy.ravel()])


def _check_coefficient(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 3:
        raise UserInputError(f"a shape {a.shape}: expected a square (S, S) node grid with S >= 3")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise UserInputError("a: the Darcy coefficient must be finite and > 0 at every node")
    return a


def darcy_matrix(a: np.ndarray, *, face_mean: str = "harmonic") -> scipy.sparse.csr_matrix:
    """Interior 5-point matrix A (scaled by h^2) for the (S, S) nodal coefficient a.

    Shape ((S-2)^2, (S-2)^2), unknowns ordered row-major over interior nodes;
    A u_int = h^2 f_int is the discrete problem.
    """
    a = _check_coefficient(a)
    s = a.shape[0]
    indptr, indices, diag_pos, off_pos, off_face, node_faces = _pattern(s)
    faces = _faces(a, face_mean)
    data = np.empty(indices.shape[0])
    data[diag_pos] = faces[node_faces].sum(axis=1)
    data[off_pos] = -faces[off_face]
    m = (s - 2) ** 2
    return scipy.sparse.csr_matrix((data, indices, indptr), shape=(m, m))


def solve_darcy(a: np.ndarray, f=1.0, *, face_mean: str = "harmonic") -> np.ndarray:
    """Solve -div(a grad u) = f, u = 0 on the boundary, on the S x S node grid.

    a: (S, S) coefficient at the nodes (> 0). f: scalar or (S, S) (only interior
    values are used). Returns u of shape (S, S), float64, boundary exactly 0.
    """
    a = _check_coefficient(a)
    s = a.shape[0]
    h = 1.0 / (s - 1)
    if np.ndim(f) == 0:
        rhs = np.full((s - 2) ** 2, float(f) * h * h)
    else:
        f = np.asarray(f, dtype=np.float64)
        if f.shape != a.shape:
            raise UserInputError(f"f shape {f.shape}: must be a scalar or match a's shape {a.shape}")
        rhs = (f[1:-1, 1:-1] * h * h).ravel()
    mat = darcy_matrix(a, face_mean=face_mean).tocsc()
    # Symmetric matrix: minimum-degree ordering on A^T + A with diagonal pivoting.
    lu = scipy.sparse.linalg.splu(mat, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True})
    u_int = lu.solve(rhs)
    u = np.zeros((s, s))
    u[1:-1, 1:-1] = u_int.reshape(s - 2, s - 2)
    return u


def generate_darcy(
    n: int,
    resolution: int,
    *,
    seed: int,
    a_plus: float = 12.0,
    a_minus: float = 3.0,
    tau: float = 3.0,
    alpha: float = 2.0,
    forcing: float = 1.0,
    face_mean: str = "harmonic",
    progress: bool = True,
) -> dict:
    """Generate n Darcy pairs (a, u) on the S x S node grid, S = resolution.

    a = a_plus where psi > 0 else a_minus, psi = neumann_grf_2d(tau, alpha)
    (zero-mean); f = forcing. Returns {"input": (n, S, S) a, "output": (n, S, S)
    u, "grid": {"x": (S,), "y": (S,)}, "attrs": {...}} in the layout of hdf5_io.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserInputError(f"seed {seed!r}: must be a non-negative integer; try 0")
    if not (a_plus > 0 and a_minus > 0):
        raise UserInputError(f"a_plus {a_plus}, a_minus {a_minus}: both must be > 0; try 12 and 3")
    t0 = time.perf_counter()
    rng = np.random.default_rng(int(seed))
    psi = neumann_grf_2d(n, resolution, rng, tau=tau, alpha=alpha, zero_mean=True)
    coeff = np.where(psi > 0, float(a_plus), float(a_minus))
    sol = np.empty_like(coeff)
    for i in tqdm(range(coeff.shape[0]), disable=bar_disabled(progress), desc="darcy", unit="sample", leave=False):
        sol[i] = solve_darcy(coeff[i], forcing, face_mean=face_mean)
    grid = np.linspace(0.0, 1.0, int(resolution))
    attrs = {
        "problem": "darcy",
        "seed": int(seed),
        "n_samples": int(n),
        "resolution": int(resolution),
        "pde.forcing": float(forcing),
        "pde.domain": "unit square, node grid x_i = i/(S-1), u = 0 on boundary",
        "darcy.a_plus": float(a_plus),
        "darcy.a_minus": float(a_minus),
        "grf.kind": "neumann-cosine",
        "grf.tau": float(tau),
        "grf.alpha": float(alpha),
        "grf.zero_mean": True,
        "solver.scheme": "5-point finite differences, SuperLU",
        "solver.face_mean": face_mean,
        "solver.seconds": round(time.perf_counter() - t0, 3),
    }
    return {"input": coeff, "output": sol, "grid": {"x": grid, "y": grid.copy()}, "attrs": attrs}
