"""The HDF5 schema of point-set data ("mutransfer-points", version 1): write, validate, read, inspect.

In memory a point data set is the dict::

    {"coords": (n, P, d) float32, "input": (n, P, C_in) float32,
     "output": (n, P, C_out) float32, "mask": (n, P) bool, "attrs": {...}}

with padded rows (mask False) all zero. On disk:

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

Point sets are made by ``mutransfer.data._pointclouds`` (sampling, ``darcy_mesh``),
which also re-exports everything here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from mutransfer._atomic import atomic_path
from mutransfer.data._hdf5_io import open_hdf5
from mutransfer.data._problem_facts import default_points_problem
from mutransfer.data._schema_common import (
    GRID_SCHEMA,
    POINT_SCHEMA,
    check_stored,
    decode_attr,
    finish_attrs,
    read_attrs,
    schema_of,
)
from mutransfer.errors import UserInputError

__all__ = [
    "POINT_SCHEMA",
    "POINT_SCHEMA_VERSION",
    "POINT_DATASETS",
    "write_point_dataset",
    "read_point_dataset",
    "is_point_file",
    "point_file_header",
    "inspect_point_dataset",
    "open_points",
    "check_counts",
]

POINT_SCHEMA_VERSION = 1
#: the datasets of a point file
POINT_DATASETS = ("coords", "input", "output", "mask", "n_points")
_BLOCK_BYTES = 32 * 2**20


def _hint(path) -> str:
    return f"generate one with `mutransfer data generate {default_points_problem()} --out {path}`"


def _check_points(data: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    if not isinstance(data, dict):
        raise UserInputError(f"data: expected a dict with coords/input/output/mask/attrs, got {type(data).__name__}")
    for key in ("coords", "input", "output", "mask"):
        if key not in data:
            raise UserInputError(
                f"data: missing {key!r} array; pass the dict from generate_darcy_mesh or sample_point_sets"
            )
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
    coords, inp, out, mask, attrs = _check_points(data)
    n, p, d = coords.shape
    attrs.update(
        schema=POINT_SCHEMA,
        schema_version=POINT_SCHEMA_VERSION,
        n_samples=int(n),
        max_points=int(p),
        coord_dim=int(d),
    )
    attrs = finish_attrs(attrs)
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


@contextlib.contextmanager
def open_points(path) -> Iterator[h5py.File]:
    """Open and validate a point file read-only (structure and shapes; arrays are not read)."""
    p = Path(path)
    f = open_hdf5(p, _hint(p))
    with f:
        schema = schema_of(f)
        if schema != POINT_SCHEMA:
            problem = decode_attr(f.attrs.get("problem"))
            if schema == GRID_SCHEMA:
                raise UserInputError(
                    f"data file {p} holds grid data ({problem}), not point sets; use it with problem {problem}, or "
                    f"generate point sets with `mutransfer data generate {default_points_problem()} --out {p.with_name(p.stem + '_mesh.h5')}`"
                )
            raise UserInputError(f"data file {p} has schema {schema!r}, not {POINT_SCHEMA!r} (point sets); {_hint(p)}")
        version = f.attrs.get("schema_version")
        if version is not None and int(version) > POINT_SCHEMA_VERSION:
            raise UserInputError(
                f"data file {p} has point schema_version {int(version)}; this mutransfer reads up to "
                f"{POINT_SCHEMA_VERSION}, so upgrade mutransfer"
            )
        for key in POINT_DATASETS:
            if not isinstance(f.get(key), h5py.Dataset):
                found = ", ".join(sorted(f.keys())) or "nothing"
                raise UserInputError(
                    f"data file {p} has no {key!r} dataset (found: {found}); the file is incomplete, {_hint(p)}"
                )
        for key in POINT_DATASETS:
            check_stored(p, key, f[key])  # values written in the file, not in other files
        c, i, o, m, k = (f[key] for key in POINT_DATASETS)
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
        for key, ds, kinds in (
            ("coords", c, "f"),
            ("input", i, "f"),
            ("output", o, "f"),
            ("mask", m, "biu"),
            ("n_points", k, "iu"),
        ):
            if ds.dtype.kind not in kinds:
                raise UserInputError(f"data file {p}: dataset {key!r} has dtype {ds.dtype}; {_hint(p)}")
        yield f


def check_counts(path, mask: np.ndarray, n_points: np.ndarray, offset: int = 0) -> None:
    """Each sample's ``n_points`` is its mask's count of real points, and at least one (a model trained on the file
    checks no values inside a population: operators.value_checks)."""
    counts = mask.sum(axis=1)
    bad = np.flatnonzero(counts != n_points)
    if bad.size:
        j = int(bad[0])
        raise UserInputError(
            f"data file {path}: n_points[{j + offset}] = {int(n_points[j])} but mask has {int(counts[j])} real points; "
            f"the file is damaged, {_hint(path)}"
        )
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise UserInputError(
            f"data file {path}: sample {int(empty[0]) + offset} has no real point (mask all 0); remove the empty "
            "samples from the file"
        )


def read_point_dataset(path) -> dict:
    """Read a whole point file: {"coords", "input", "output" float32, "mask" bool (n, P), "n_points" (n,), "attrs"}."""
    with open_points(path) as f:
        data = {key: f[key][()] for key in POINT_DATASETS}
        data["mask"] = data["mask"].astype(bool)
        data["attrs"] = read_attrs(f)
    check_counts(path, data["mask"], data["n_points"])
    return data


def is_point_file(path) -> bool:
    """True for an HDF5 file whose ``schema`` attribute is "mutransfer-points"; False otherwise (never raises)."""
    try:
        p = Path(path)
        if not p.is_file() or not h5py.is_hdf5(p):
            return False
        with h5py.File(p, "r") as f:
            return schema_of(f) == POINT_SCHEMA
    except Exception:  # unreadable, damaged, a permission error: not a point file we can use
        return False


def point_file_header(path) -> dict:
    """n_samples, problem, coord_dim, max_points, in_channels, out_channels (and attrs), without reading arrays."""
    with open_points(path) as f:
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
    with open_points(path) as f:
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
