"""Irregular-mesh data: PDE solutions sampled on random point sets, and their HDF5 schema.

``darcy_mesh``: Darcy flow (``mutransfer.data.darcy``) solved on the S x S node
grid x_i = i/(S-1), then, per sample, a random subset of n_i distinct grid nodes
with n_i uniform in [points_min, points_max]. Values at the points are the exact
grid values (no interpolation); coordinates are in [0, 1]^2 (dimensionless, the
unit square). Samples are padded to P = points_max with a mask.

In memory a point data set is the dict::

    {"coords": (n, P, d) float32, "input": (n, P, C_in) float32,
     "output": (n, P, C_out) float32, "mask": (n, P) bool, "attrs": {...}}

with padded rows (mask False) all zero. On disk it is the HDF5 schema
"mutransfer-points", version 1:

| Name                 | Kind      | Type, shape              | Meaning                                          |
|----------------------|-----------|--------------------------|--------------------------------------------------|
| `coords`             | dataset   | float32 (n, P, d)        | point coordinates in [0, 1]^d; 0 at padding      |
| `input`              | dataset   | float32 (n, P, C_in)     | input function at the points (Darcy: a)          |
| `output`             | dataset   | float32 (n, P, C_out)    | output function at the points (Darcy: u)         |
| `mask`               | dataset   | uint8 (or bool) (n, P)   | 1 at real points, 0 at padding                   |
| `n_points`           | dataset   | int64 (n,)               | real points per sample (= mask.sum(1))           |
| `schema`             | attribute | str                      | "mutransfer-points"                              |
| `schema_version`     | attribute | int                      | 1                                                |
| `problem`            | attribute | str                      | e.g. "darcy_mesh"                                |
| `n_samples`          | attribute | int                      | n                                                |
| `max_points`         | attribute | int                      | P                                                |
| `coord_dim`          | attribute | int                      | d                                                |
| `seed`               | attribute | int                      | generator seed (-1: unknown)                     |
| `created`            | attribute | str                      | ISO 8601 UTC time                                |
| `mutransfer_version` | attribute | str                      | package version that wrote the file              |
| generator attrs      | attribute | flat scalars             | `points_min`, `points_max`, `grid_resolution`, `grid_problem`, `darcy.*`, `grf.*`, `pde.*`, `solver.*` |

``load_point_split`` turns a file into train/test tensors in the packed layout
of ``operators.adapters.pack_points``: x (n, P, d + C_in + 1) =
[coords | input | mask as 1.0/0.0], y (n, P, C_out), zero at padded points.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Iterator

import h5py
import numpy as np

import mutransfer
from mutransfer.atomic import atomic_path
from mutransfer.data.hdf5_io import decode_attr, read_attrs, utc_now
from mutransfer.errors import UserInputError

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

POINT_SCHEMA = "mutransfer-points"
POINT_SCHEMA_VERSION = 1
#: points per darcy_mesh sample unless the user asks for others (fit a 61 x 61 grid: 3721 nodes)
DEFAULT_POINTS_MIN = 300
DEFAULT_POINTS_MAX = 600
#: grid problem -> the point-set problem made from it
_MESH_PROBLEMS = {"darcy": "darcy_mesh"}
#: grid attributes not carried over to the point set (they describe the grid file, not the points)
_GRID_ONLY_ATTRS = {"problem", "n_samples", "resolution", "schema", "schema_version", "seed", "created"}
#: entropy mixed into the seed of the point selection, so it is a stream independent of the PDE generator's
_SAMPLING_STREAM = 0x706F696E
_DATASETS = ("coords", "input", "output", "mask", "n_points")
_BLOCK_BYTES = 32 * 2**20


def _hint(path) -> str:
    return f"generate one with `mutransfer data generate darcy_mesh --out {path}`"


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
    attrs = {k: v for k, v in ((k, _flat(v)) for k, v in src_attrs.items()) if v is not None and k not in _GRID_ONLY_ATTRS}
    attrs.update(
        problem=_MESH_PROBLEMS.get(src_problem, f"{src_problem}_points" if src_problem else "points"),
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
    from mutransfer.data.darcy import generate_darcy

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


# ----------------------------------------------------------------------------- HDF5 schema


def _check_points(data: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    if not isinstance(data, dict):
        raise UserInputError(f"data: expected a dict with coords/input/output/mask/attrs, got {type(data).__name__}")
    for key in ("coords", "input", "output", "mask"):
        if key not in data:
            raise UserInputError(f"data: missing {key!r} array; pass the dict from generate_darcy_mesh or sample_point_sets")
    coords = np.asarray(data["coords"])
    inp = np.asarray(data["input"])
    out = np.asarray(data["output"])
    mask = np.asarray(data["mask"])
    if coords.ndim != 3 or coords.shape[0] < 1 or coords.shape[1] < 1 or coords.shape[2] < 1:
        raise UserInputError(f"coords shape {coords.shape}: expected (n, P, d) with n, P, d >= 1")
    n, p = coords.shape[:2]
    for key, arr in (("input", inp), ("output", out)):
        if arr.ndim != 3 or arr.shape[:2] != (n, p) or arr.shape[2] < 1:
            raise UserInputError(f"{key} shape {arr.shape}: expected ({n}, {p}, C) to match coords {coords.shape}")
        if arr.dtype.kind not in "fiu":
            raise UserInputError(f"{key} dtype {arr.dtype}: expected floating point")
    if mask.shape != (n, p):
        raise UserInputError(f"mask shape {mask.shape}: expected ({n}, {p}) to match coords {coords.shape}")
    if mask.dtype.kind not in "biu" or (mask.dtype.kind != "b" and not np.isin(mask, (0, 1)).all()):
        raise UserInputError(f"mask dtype {mask.dtype}: expected bool (True at real points)")
    attrs = dict(data.get("attrs") or {})
    if not isinstance(attrs.get("problem"), str) or not attrs["problem"]:
        raise UserInputError("attrs['problem']: missing; name the problem, e.g. 'darcy_mesh'")
    return coords, inp, out, mask.astype(bool), attrs


def write_point_dataset(path, data: dict) -> Path:
    """Write a point data set to ``path`` atomically (schema "mutransfer-points", version 1).

    ``data``: {"coords": (n, P, d), "input": (n, P, C_in), "output": (n, P, C_out), "mask": (n, P)
    bool, "attrs": {"problem": ..., ...}}. Arrays are stored as float32 (padded rows zeroed), the
    mask as uint8, ``n_points`` = mask.sum(1) as int64. Fills the schema attributes; ``seed``,
    ``created`` and ``mutransfer_version`` only when absent. Returns the path.
    """
    from mutransfer.data.hdf5_io import _attr_value

    coords, inp, out, mask, attrs = _check_points(data)
    n, p, d = coords.shape
    attrs.update(
        schema=POINT_SCHEMA,
        schema_version=POINT_SCHEMA_VERSION,
        n_samples=int(n),
        max_points=int(p),
        coord_dim=int(d),
    )
    attrs.setdefault("seed", -1)
    attrs.setdefault("mutransfer_version", mutransfer.__version__)
    attrs.setdefault("created", utc_now())
    attrs = {str(k): _attr_value(str(k), v) for k, v in attrs.items()}
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"output path {path} is a directory; pass a file name such as {path / 'points.h5'}")
    keep = mask[..., None]
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("coords", data=np.where(keep, coords, 0).astype(np.float32, copy=False))
        f.create_dataset("input", data=np.where(keep, inp, 0).astype(np.float32, copy=False))
        f.create_dataset("output", data=np.where(keep, out, 0).astype(np.float32, copy=False))
        f.create_dataset("mask", data=mask.astype(np.uint8))
        f.create_dataset("n_points", data=mask.sum(axis=1).astype(np.int64))
        for k in sorted(attrs):
            f.attrs[k] = attrs[k]
    return path


def _schema_of(f: h5py.File):
    return decode_attr(f.attrs.get("schema"))


@contextlib.contextmanager
def _open_points(path) -> Iterator[h5py.File]:
    """Open and validate a point file read-only (structure and shapes; arrays are not read)."""
    p = Path(path)
    if not p.exists():
        raise UserInputError(f"data file {p} not found; {_hint(p)}")
    if p.is_dir():
        raise UserInputError(f"data file {p} is a directory; pass the path of an .h5 point file")
    try:
        hdf5 = h5py.is_hdf5(p)
    except OSError as exc:
        raise UserInputError(f"data file {p} could not be read ({exc.strerror or type(exc).__name__}); check its permissions") from None
    if not hdf5:
        raise UserInputError(f"data file {p} is not an HDF5 file ({p.stat().st_size} bytes); {_hint(p)}")
    try:
        f = h5py.File(p, "r")
    except OSError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserInputError(f"data file {p} could not be opened as HDF5 ({msg}); {_hint(p)}") from None
    with f:
        schema = _schema_of(f)
        if schema != POINT_SCHEMA:
            problem = decode_attr(f.attrs.get("problem"))
            if schema == "mutransfer-pde":
                raise UserInputError(
                    f"data file {p} holds grid data ({problem}), not point sets; use it with problem {problem}, or "
                    f"generate point sets with `mutransfer data generate darcy_mesh --out {p.with_name(p.stem + '_mesh.h5')}`"
                )
            raise UserInputError(
                f"data file {p} has schema {schema!r}, not {POINT_SCHEMA!r} (point sets); {_hint(p)}"
            )
        version = f.attrs.get("schema_version")
        if version is not None and int(version) > POINT_SCHEMA_VERSION:
            raise UserInputError(
                f"data file {p} has point schema_version {int(version)}; this mutransfer reads up to "
                f"{POINT_SCHEMA_VERSION}, so upgrade mutransfer"
            )
        for key in _DATASETS:
            if not isinstance(f.get(key), h5py.Dataset):
                found = ", ".join(sorted(f.keys())) or "nothing"
                raise UserInputError(f"data file {p} has no {key!r} dataset (found: {found}); the file is incomplete, {_hint(p)}")
        c, i, o, m, k = (f[key] for key in _DATASETS)
        if len(c.shape) != 3 or c.shape[0] < 1 or c.shape[1] < 1 or c.shape[2] < 1:
            raise UserInputError(f"data file {p}: coords shape {c.shape} must be (n, P, d) with n >= 1; {_hint(p)}")
        n, pts = c.shape[:2]
        for key, ds in (("input", i), ("output", o)):
            if len(ds.shape) != 3 or ds.shape[:2] != (n, pts):
                raise UserInputError(
                    f"data file {p}: {key} shape {ds.shape} does not match coords {c.shape} (expected ({n}, {pts}, C)); {_hint(p)}"
                )
        if m.shape != (n, pts) or k.shape != (n,):
            raise UserInputError(
                f"data file {p}: mask shape {m.shape} / n_points shape {k.shape} do not match coords {c.shape} "
                f"(expected ({n}, {pts}) and ({n},)); {_hint(p)}"
            )
        for key, ds, kinds in (("coords", c, "f"), ("input", i, "f"), ("output", o, "f"), ("mask", m, "biu"), ("n_points", k, "iu")):
            if ds.dtype.kind not in kinds:
                raise UserInputError(f"data file {p}: dataset {key!r} has dtype {ds.dtype}; {_hint(p)}")
        yield f


def _check_counts(path, mask: np.ndarray, n_points: np.ndarray, offset: int = 0) -> None:
    counts = mask.sum(axis=1)
    bad = np.flatnonzero(counts != n_points)
    if bad.size:
        j = int(bad[0])
        raise UserInputError(
            f"data file {path}: n_points[{j + offset}] = {int(n_points[j])} but mask has {int(counts[j])} real points; "
            f"the file is damaged, {_hint(path)}"
        )


def read_point_dataset(path) -> dict:
    """Read a whole point file: {"coords", "input", "output" float32, "mask" bool (n, P), "n_points" (n,), "attrs"}."""
    with _open_points(path) as f:
        data = {key: f[key][()] for key in _DATASETS}
        data["mask"] = data["mask"].astype(bool)
        data["attrs"] = read_attrs(f)
    _check_counts(path, data["mask"], data["n_points"])
    return data


def is_point_file(path) -> bool:
    """True for an HDF5 file whose ``schema`` attribute is "mutransfer-points"; False otherwise (never raises)."""
    try:
        p = Path(path)
        if not p.is_file() or not h5py.is_hdf5(p):
            return False
        with h5py.File(p, "r") as f:
            return _schema_of(f) == POINT_SCHEMA
    except Exception:  # unreadable, damaged, a permission error: not a point file we can use
        return False


def point_file_header(path) -> dict:
    """n_samples, problem, coord_dim, max_points, in_channels, out_channels (and attrs), without reading arrays."""
    with _open_points(path) as f:
        n, pts, d = f["coords"].shape
        attrs = read_attrs(f)
        return {
            "n_samples": int(n),
            "problem": attrs.get("problem"),
            "coord_dim": int(d),
            "max_points": int(pts),
            "in_channels": int(f["input"].shape[2]),
            "out_channels": int(f["output"].shape[2]),
            "attrs": attrs,
        }


def inspect_point_dataset(path) -> dict:
    """Summary of a point file: shapes/dtypes, points per sample (min/mean/max), value ranges at real points, attrs.

    Arrays are read in blocks of samples.
    """
    with _open_points(path) as f:
        n, pts = f["coords"].shape[:2]
        counts = f["n_points"][()]
        datasets = {}
        for key in ("coords", "input", "output"):
            ds = f[key]
            per_sample = max(1, int(np.prod(ds.shape[1:])) * ds.dtype.itemsize)
            block = max(1, _BLOCK_BYTES // per_sample)
            lo, hi, total, count = np.inf, -np.inf, 0.0, 0
            for start in range(0, n, block):
                real = f["mask"][start : start + block].astype(bool)
                vals = ds[start : start + block][real]
                if vals.size:
                    lo, hi = min(lo, float(vals.min())), max(hi, float(vals.max()))
                    total += float(vals.sum(dtype=np.float64))
                    count += vals.size
            stats = {"min": lo, "max": hi, "mean": total / count} if count else {}
            datasets[key] = {"shape": tuple(ds.shape), "dtype": str(ds.dtype), **stats}
        for key in ("mask", "n_points"):
            datasets[key] = {"shape": tuple(f[key].shape), "dtype": str(f[key].dtype)}
        attrs = read_attrs(f)
        return {
            "format": POINT_SCHEMA,
            "path": str(path),
            "problem": attrs.get("problem"),
            "n_samples": int(n),
            "max_points": int(pts),
            "coord_dim": int(f["coords"].shape[2]),
            "in_channels": int(f["input"].shape[2]),
            "out_channels": int(f["output"].shape[2]),
            "points": {"min": int(counts.min()), "mean": float(counts.mean()), "max": int(counts.max())},
            "datasets": datasets,
            "attrs": attrs,
        }


def load_point_split(path, *, n_train: int, n_test: int):
    """The first ``n_train`` samples as train, the last ``n_test`` as test, as packed tensors.

    Returns ``mutransfer.data.loading.SplitData`` with float32 tensors
    train_x/test_x (n, P, d + C_in + 1) = [coords | input | mask 1.0/0.0] (``operators.adapters.pack_points``)
    and train_y/test_y (n, P, C_out), zero at padded points. P is trimmed to the last real point of
    the loaded samples; grid_shape = (P,); source = {"format": "mutransfer-points", "coord_dim",
    "in_channels", "out_channels", "max_points"}.
    """
    import torch

    from mutransfer.data.loading import SplitData, _positive_int
    from operators.adapters import pack_points

    n_train = _positive_int("n_train", n_train, 400)
    n_test = _positive_int("n_test", n_test, 100)
    with _open_points(path) as f:
        n_total = f["coords"].shape[0]
        if n_train + n_test > n_total:
            raise UserInputError(
                f"n_train {n_train} + n_test {n_test} = {n_train + n_test} exceeds the {n_total} samples "
                f"in data file {path}; lower n_train or n_test, or generate more samples"
            )
        attrs = read_attrs(f)
        parts = {}
        for name, sl in (("train", slice(0, n_train)), ("test", slice(n_total - n_test, n_total))):
            parts[name] = {key: f[key][sl] for key in _DATASETS}
            parts[name]["mask"] = parts[name]["mask"].astype(bool)
            _check_counts(path, parts[name]["mask"], parts[name]["n_points"], sl.start)
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
        problem=attrs.get("problem") or "darcy_mesh",
        attrs=attrs,
        source=source,
    )
