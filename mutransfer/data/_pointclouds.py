"""Irregular-mesh data: PDE solutions sampled on random point sets, and packed train/test splits.

``darcy_mesh``: Darcy flow (``mutransfer.data._darcy``) solved on the S x S node
grid x_i = i/(S-1), then, per sample, a random subset of n_i distinct grid nodes
with n_i uniform in [points_min, points_max]. Values at the points are the exact
grid values (no interpolation); coordinates are in [0, 1]^2 (dimensionless, the
unit square). Samples are padded to P = points_max with a mask.

The in-memory dict and the HDF5 schema "mutransfer-points" are described in
``mutransfer.data._point_schema``, whose functions are re-exported here.

``load_point_split`` turns a file into train/test tensors in the packed layout
of ``operators.adapters.pack_points``: x (n, P, d + C_in + 1) =
[coords | input | mask as 1.0/0.0], y (n, P, C_out), zero at padded points.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from mutransfer.data._loading import SplitData, _check_finite, _positive_int
from mutransfer.data._point_schema import (
    POINT_DATASETS,
    POINT_SCHEMA,
    POINT_SCHEMA_VERSION,
    check_counts,
    inspect_point_dataset,
    is_point_file,
    open_points,
    point_file_header,
    read_point_dataset,
    write_point_dataset,
)
from mutransfer.data._problem_facts import default_points_problem, points_problem_of
from mutransfer.data._schema_common import read_attrs
from mutransfer.errors import UserInputError
from operators.adapters import pack_points

__all__ = [
    "POINT_SCHEMA",
    "POINT_SCHEMA_VERSION",
    "DEFAULT_POINTS_MIN",
    "DEFAULT_POINTS_MAX",
    "sample_point_sets",
    "generate_darcy_mesh",
    "write_point_dataset",
    "read_point_dataset",
    "is_point_file",
    "point_file_header",
    "inspect_point_dataset",
    "load_point_split",
]

#: points per darcy_mesh sample unless the user asks for others (fit a 61 x 61 grid: 3721 nodes)
DEFAULT_POINTS_MIN = 300
DEFAULT_POINTS_MAX = 600
#: grid attributes not carried over to the point set (they describe the grid file, not the points)
_GRID_ONLY_ATTRS = {"problem", "n_samples", "resolution", "schema", "schema_version", "seed", "created"}
#: entropy mixed into the seed of the point selection, so it is a stream independent of the PDE generator's
_SAMPLING_STREAM = 0x706F696E


def _int_arg(name: str, value, *, minimum: int, example) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        need = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise UserInputError(f"{name} {value!r}: must be {need}; try {example}")
    return int(value)


def _check_point_range(points_min, points_max, nodes: int, resolution: int | None = None) -> tuple[int, int]:
    lo = _int_arg("points_min", points_min, minimum=1, example=min(DEFAULT_POINTS_MIN, nodes))
    hi = _int_arg("points_max", points_max, minimum=1, example=min(DEFAULT_POINTS_MAX, nodes))
    if lo > hi:
        raise UserInputError(f"points_min {lo} exceeds points_max {hi}; pass points_min <= points_max")
    if hi > nodes:
        grid = f"{resolution}x{resolution} grid" if resolution else "grid"
        need = int(np.ceil(np.sqrt(hi)))
        raise UserInputError(
            f"points_max {hi} exceeds the {nodes} nodes of the {grid}; pass points_max <= {nodes} "
            f"(and points_min <= points_max) or a resolution >= {need}"
        )
    return lo, hi


def _flat(value):
    if isinstance(value, np.generic):
        value = value.item()
    return value if isinstance(value, (bool, int, float, str)) else None


def sample_point_sets(grid_data: dict, *, points_min: int, points_max: int, seed: int) -> dict:
    """Sample each 2D grid sample at its own random set of distinct nodes.

    grid_data: {"input": (n, S, S), "output": (n, S, S), "grid": {"x": (S,), "y": (S,)}, "attrs"}
    as returned by ``generate_darcy`` (arrays indexed [i, x, y]; without "grid" the nodes are
    x_i = i/(S-1)). Sample i gets n_i ~ Uniform{points_min, ..., points_max} nodes chosen without
    replacement (listed in row-major node order); deterministic given ``seed``.

    Returns {"coords": (n, P, 2) float32 in [0, 1], "input": (n, P, 1) float32, "output": (n, P, 1)
    float32, "mask": (n, P) bool, "attrs": {...}} with P = points_max and padded rows zero. Values
    at the points are the grid values there, exactly (cast to float32).
    """
    if not isinstance(grid_data, dict) or "input" not in grid_data or "output" not in grid_data:
        got = sorted(grid_data) if isinstance(grid_data, dict) else type(grid_data).__name__
        raise UserInputError(
            f"grid_data: expected the dict from generate_darcy with 'input' and 'output' arrays, got {got}"
        )
    a = np.asarray(grid_data["input"])
    u = np.asarray(grid_data["output"])
    if a.ndim != 3 or a.shape != u.shape or a.shape[1] != a.shape[2] or a.shape[0] < 1 or a.shape[1] < 2:
        raise UserInputError(
            f"grid_data input/output shapes {a.shape}/{u.shape}: expected equal (n, S, S) with n >= 1, S >= 2"
        )
    n, s = a.shape[0], a.shape[1]
    seed = _int_arg("seed", seed, minimum=0, example=0)
    lo, hi = _check_point_range(points_min, points_max, s * s, s)
    grid = dict(grid_data.get("grid") or {})
    axes = []
    for name in ("x", "y"):
        c = np.linspace(0.0, 1.0, s) if grid.get(name) is None else np.asarray(grid[name], dtype=np.float64)
        if c.shape != (s,):
            raise UserInputError(f"grid_data grid/{name} shape {c.shape}: expected ({s},)")
        axes.append(c)

    rng = np.random.default_rng([seed, _SAMPLING_STREAM])
    coords = np.zeros((n, hi, 2), dtype=np.float32)
    inp = np.zeros((n, hi, 1), dtype=np.float32)
    out = np.zeros((n, hi, 1), dtype=np.float32)
    mask = np.zeros((n, hi), dtype=bool)
    a_flat, u_flat = a.reshape(n, s * s), u.reshape(n, s * s)
    for i in range(n):
        count = int(rng.integers(lo, hi + 1))
        nodes = np.sort(rng.choice(s * s, size=count, replace=False))
        ix, iy = np.divmod(nodes, s)  # flat node index = ix * S + iy (arrays are [i, x, y])
        coords[i, :count, 0] = axes[0][ix]
        coords[i, :count, 1] = axes[1][iy]
        inp[i, :count, 0] = a_flat[i, nodes]
        out[i, :count, 0] = u_flat[i, nodes]
        mask[i, :count] = True

    src_attrs = dict(grid_data.get("attrs") or {})
    src_problem = src_attrs.get("problem")
    attrs = {
        k: v for k, v in ((k, _flat(v)) for k, v in src_attrs.items()) if v is not None and k not in _GRID_ONLY_ATTRS
    }
    attrs.update(
        problem=points_problem_of(src_problem) or (f"{src_problem}_points" if src_problem else "points"),
        grid_problem=str(src_problem or "unknown"),
        grid_resolution=int(s),
        points_min=lo,
        points_max=hi,
        seed=seed,
        n_samples=int(n),
    )
    return {"coords": coords, "input": inp, "output": out, "mask": mask, "attrs": attrs}


def generate_darcy_mesh(
    n: int,
    resolution: int,
    *,
    seed: int,
    progress: bool = True,
    points_min: int | None = None,
    points_max: int | None = None,
) -> dict:
    """Darcy flow on random point sets: ``generate_darcy(n, resolution)``, then ``sample_point_sets``.

    resolution: S of the S x S solve grid (nodes at i/(S-1)). points_min/points_max: range of the
    points per sample (defaults 300 and 600, which fit S = 61: 3721 nodes). The PDE and the point
    selection both derive from ``seed`` (as independent streams). Returns the point dict of
    ``sample_point_sets``: coords (n, P, 2), input a (n, P, 1), output u (n, P, 1), mask (n, P),
    P = points_max; attrs carry problem "darcy_mesh", points_min/max, grid_resolution, seed and
    the Darcy generator's attrs.
    """
    from mutransfer.data._darcy import generate_darcy  # noqa: PLC0415 -- deferred: scipy, needed only to generate the mesh data

    lo = DEFAULT_POINTS_MIN if points_min is None else points_min
    hi = DEFAULT_POINTS_MAX if points_max is None else points_max
    _int_arg("n", n, minimum=1, example=500)
    res = _int_arg("resolution", resolution, minimum=3, example=61)
    if (points_min is None) != (points_max is None):
        _int_arg("points_min", lo, minimum=1, example=DEFAULT_POINTS_MIN)
        _int_arg("points_max", hi, minimum=1, example=DEFAULT_POINTS_MAX)
        if lo > hi:
            default = "points_min" if points_min is None else "points_max"
            raise UserInputError(
                f"points_min {lo} exceeds points_max {hi} ({default} is the default {lo if points_min is None else hi}); "
                f"pass {default} as well"
            )
    _check_point_range(lo, hi, res * res, res)  # before the (slow) solves
    t0 = time.perf_counter()
    grid_data = generate_darcy(n, res, seed=seed, progress=progress)
    data = sample_point_sets(grid_data, points_min=lo, points_max=hi, seed=seed)
    data["attrs"]["generator.seconds"] = round(time.perf_counter() - t0, 3)
    return data


def load_point_split(path, *, n_train: int, n_test: int):
    """The first ``n_train`` samples as train, the last ``n_test`` as test, as packed tensors.

    Returns ``mutransfer.data._loading.SplitData`` with float32 tensors
    train_x/test_x (n, P, d + C_in + 1) = [coords | input | mask 1.0/0.0] (``operators.adapters.pack_points``)
    and train_y/test_y (n, P, C_out), zero at padded points. P is trimmed to the last real point of
    the loaded samples; grid_shape = (P,); source = {"format": "mutransfer-points", "coord_dim",
    "in_channels", "out_channels", "max_points"}.
    """

    n_train = _positive_int("n_train", n_train, 400)
    n_test = _positive_int("n_test", n_test, 100)
    with open_points(path) as f:
        n_total = f["coords"].shape[0]
        if n_train + n_test > n_total:
            raise UserInputError(
                f"n_train {n_train} + n_test {n_test} = {n_train + n_test} exceeds the {n_total} samples "
                f"in data file {path}; lower n_train or n_test, or generate more samples"
            )
        attrs = read_attrs(f)
        parts = {}
        for name, sl in (("train", slice(0, n_train)), ("test", slice(n_total - n_test, n_total))):
            parts[name] = {key: f[key][sl] for key in POINT_DATASETS}
            parts[name]["mask"] = parts[name]["mask"].astype(bool)
            check_counts(path, parts[name]["mask"], parts[name]["n_points"], sl.start)
            for key in ("coords", "input", "output"):  # NaN/Inf at real points refused now, not mid-training
                real_values = np.where(parts[name]["mask"][..., None], parts[name][key], 0.0)
                _check_finite(real_values, sl.start, key, path)
    real = np.concatenate([parts["train"]["mask"], parts["test"]["mask"]]).any(axis=0)
    p = int(np.flatnonzero(real)[-1]) + 1 if real.any() else 1
    tensors = {}
    for name, part in parts.items():
        mask = torch.from_numpy(part["mask"][:, :p].copy())
        coords = torch.from_numpy(np.ascontiguousarray(part["coords"][:, :p], dtype=np.float32))
        features = torch.from_numpy(np.ascontiguousarray(part["input"][:, :p], dtype=np.float32))
        target = torch.from_numpy(np.ascontiguousarray(part["output"][:, :p], dtype=np.float32))
        tensors[f"{name}_x"] = pack_points(coords, features, mask)
        tensors[f"{name}_y"] = torch.where(mask.unsqueeze(-1), target, torch.zeros((), dtype=target.dtype))
    d = int(parts["train"]["coords"].shape[2])
    source = {
        "format": POINT_SCHEMA,
        "coord_dim": d,
        "in_channels": int(parts["train"]["input"].shape[2]),
        "out_channels": int(parts["train"]["output"].shape[2]),
        "max_points": p,
    }
    return SplitData(
        train_x=tensors["train_x"],
        train_y=tensors["train_y"],
        test_x=tensors["test_x"],
        test_y=tensors["test_y"],
        grid_shape=(p,),
        problem=attrs.get("problem") or default_points_problem(),
        attrs=attrs,
        source=source,
    )
