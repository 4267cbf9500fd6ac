"""The project's HDF5 schema for PDE input/output pairs ("mutransfer-pde", version 1).

| Name                 | Kind      | Type, shape                  | Meaning                                         |
|----------------------|-----------|------------------------------|-------------------------------------------------|
| `input`              | dataset   | float32 (n, N) / (n, S, S)   | Burgers u0 at x_j; Darcy coefficient a at nodes; NS w0 |
| `output`             | dataset   | float32, shape of `input`, or that + (T,) | Burgers u(., t_final); Darcy solution u; NS w(x, y, t_k) (n, S, S, T) |
| `grid/x`             | dataset   | float64 (N,) / (S,)          | axis-1 coordinates: j/N (Burgers), i/(S-1) (Darcy), i L/S (NS) |
| `grid/y`             | dataset   | float64 (S,), 2D only        | axis-2 coordinates                              |
| `grid/t`             | dataset   | float64 (T,), only with a time axis | recorded times of the output's last axis |
| `schema`             | attribute | str                          | "mutransfer-pde"                                |
| `schema_version`     | attribute | int                          | 1                                               |
| `problem`            | attribute | str                          | "burgers", "darcy" or "navier_stokes"           |
| `mutransfer_version` | attribute | str                          | package version that wrote the file             |
| `seed`               | attribute | int                          | generator seed (-1: unknown)                    |
| `n_samples`          | attribute | int                          | n = input.shape[0]                              |
| `resolution`         | attribute | int                          | N or S = input.shape[1]                         |
| `created`            | attribute | str                          | ISO 8601 UTC time, e.g. "2025-01-31T12:00:00Z"  |
| `pde.*`              | attribute | float / str                  | `pde.nu`, `pde.t_final` (Burgers); `pde.forcing` (Darcy); `pde.domain` |
| `grf.*`              | attribute | float / str / bool           | `grf.kind`, `grf.tau`, `grf.alpha`, `grf.scale` (Burgers), `grf.zero_mean` |
| `darcy.*`            | attribute | float                        | `darcy.a_plus`, `darcy.a_minus` (a = a_plus where psi > 0) |
| `solver.*`           | attribute | float / int / str            | `solver.scheme`, `solver.dt`, `solver.n_steps` (Burgers), `solver.face_mean` (Darcy), `solver.seconds` |

Sample i is ``input[i]`` -> ``output[i]``; Darcy arrays are indexed [i, x, y].
All attributes are flat scalars (str, int, float, bool). In memory a data set
is the dict ``{"input", "output", "grid": {"x"[, "y"]}, "attrs": {...}}``
returned by ``generate_burgers`` / ``generate_darcy`` and ``read_dataset``.
"""

from __future__ import annotations

import codecs
import contextlib
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from mutransfer._atomic import atomic_path
from mutransfer.data._problem_facts import default_points_problem, space_dims
from mutransfer.data._schema_common import (
    GRID_SCHEMA,
    POINT_SCHEMA,
    check_stored,
    decode_attr,
    finish_attrs,
    read_attrs,
    utc_now,
)
from mutransfer.errors import UserInputError

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "write_dataset",
    "read_dataset",
    "inspect_dataset",
    "open_dataset",
    "decode_attr",
    "read_attrs",
    "utc_now",
    "generate_hint",
    "points_refused",
]

SCHEMA = GRID_SCHEMA
SCHEMA_VERSION = 1
_GRID_NAMES = ("x", "y", "z")
_BLOCK_BYTES = 32 * 2**20


def generate_hint(path, problem=None) -> str:
    """The `mutransfer data generate` command that would make ``path`` (for errors about missing data)."""
    problems = space_dims()  # read at call time: a registered problem counts
    if problem not in problems:
        guesses = [name for name in problems if name in Path(path).name.lower()]
        problem = guesses[0] if len(guesses) == 1 else "{" + "|".join(problems) + "}"
    return f"generate one with `mutransfer data generate {problem} --out {path}`"


def points_refused(path, problem) -> UserInputError:
    """The error of the grid readers for a point-set file."""
    return UserInputError(
        f"data file {path} holds point sets ({problem}); use problem {problem or default_points_problem()} "
        "(loaded by mutransfer.data._pointclouds), not a grid problem"
    )


def _check_data(data: dict) -> tuple[str, np.ndarray, np.ndarray, dict, dict]:
    if not isinstance(data, dict):
        raise UserInputError(f"data: expected a dict with input/output/grid/attrs, got {type(data).__name__}")
    attrs = dict(data.get("attrs") or {})
    problem = attrs.get("problem", data.get("problem"))
    problems = space_dims()  # grid problem -> spatial axes of `input`, read at call time
    if problem not in problems:
        raise UserInputError(f"problem {problem!r}: use one of {', '.join(problems)}")
    for key in ("input", "output"):
        if key not in data:
            raise UserInputError(f"data: missing {key!r} array; pass the dict from generate_{problem}")
    x = np.asarray(data["input"])
    y = np.asarray(data["output"])
    ndim = problems[problem]
    # the output may carry a trailing time axis (Navier-Stokes: (n, S, S, T)) described by grid/t
    timed = y.ndim == x.ndim + 1 and y.shape[:-1] == x.shape
    if x.ndim != ndim + 1 or not (y.shape == x.shape or timed) or len(set(x.shape[1:])) != 1 or x.shape[0] < 1:
        raise UserInputError(
            f"input/output shapes {x.shape}/{y.shape}: {problem} needs equal shapes "
            f"(n, {', '.join(['R'] * ndim)}) (the output may add a trailing time axis)"
        )
    grid = dict(data.get("grid") or {})
    names = _GRID_NAMES[:ndim]
    if timed:
        if np.shape(grid.get("t")) != (y.shape[-1],):
            raise UserInputError(
                f"grid/t shape {np.shape(grid.get('t'))}: the output's time axis needs ({y.shape[-1]},) recorded times"
            )
        names = names + ("t",)
    res = x.shape[1]
    for name in names[:ndim]:
        if name not in grid:
            raise UserInputError(f"grid/{name}: missing coordinates for {problem} data")
        if np.shape(grid[name]) != (res,):
            raise UserInputError(f"grid/{name} shape {np.shape(grid[name])}: expected ({res},)")
    extra = set(grid) - set(names)
    if extra:
        raise UserInputError(f"grid: unexpected coordinates {sorted(extra)} for {problem} data")
    return problem, x, y, grid, attrs


def write_dataset(path, data: dict) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, then os.replace).

    ``data``: {"input": (n, *grid), "output": (n, *grid), "grid": {"x"[, "y"]}, "attrs": {...}};
    arrays are stored as float32, coordinates as float64. Fills ``schema``,
    ``schema_version``, ``n_samples``, ``resolution`` and, if absent,
    ``mutransfer_version``, ``created`` and ``seed`` (-1). Returns the path.
    """
    problem, x, y, grid, attrs = _check_data(data)
    attrs["problem"] = problem
    attrs["schema"] = SCHEMA
    attrs["schema_version"] = SCHEMA_VERSION
    attrs["n_samples"] = int(x.shape[0])
    attrs["resolution"] = int(x.shape[1])
    attrs = finish_attrs(attrs)

    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"output path {path} is a directory; pass a file name such as {path / 'data.h5'}")
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("input", data=x.astype(np.float32, copy=False))
        f.create_dataset("output", data=y.astype(np.float32, copy=False))
        g = f.create_group("grid")
        for name, coords in grid.items():
            g.create_dataset(name, data=np.asarray(coords, dtype=np.float64))
        for k in sorted(attrs):
            f.attrs[k] = attrs[k]
    return path


def kind_of_bytes(head: bytes) -> str:
    """ "text" or "binary data": what a file's first bytes look like, for a message that echoes none of them
    (a message must not show a file's contents, e.g. of /etc/shadow passed by mistake)."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a character cut at the end is fine
    except UnicodeDecodeError:
        return "binary data"
    return "text" if all(c.isprintable() or c in "\t\r\n" for c in text) else "binary data"


def open_hdf5(p: Path, hint: str) -> h5py.File:
    """``p`` opened read-only as HDF5, or a one-line UserInputError (missing, a directory, unreadable, not HDF5)."""
    if not p.exists():
        raise UserInputError(f"data file {p} not found; {hint}")
    if p.is_dir():
        raise UserInputError(f"data file {p} is a directory; pass the path of an .h5 file")
    if not p.is_file():  # reading a FIFO would wait for a writer, a device would not end
        raise UserInputError(f"data file {p} is not a regular file (a FIFO, a device or a socket); pass an .h5 file")
    try:
        is_hdf5 = h5py.is_hdf5(p)
        with open(p, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserInputError(f"data file {p} could not be read ({reason}); check its permissions") from None
    if not is_hdf5:
        found = "an empty file" if not head else f"{p.stat().st_size} bytes of {kind_of_bytes(head)}"
        raise UserInputError(f"data file {p} is not an HDF5 file (found {found}); {hint}")
    try:
        return h5py.File(p, "r")
    except OSError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserInputError(f"data file {p} could not be opened as HDF5 ({msg}); {hint}") from None


@contextlib.contextmanager
def open_dataset(path) -> Iterator[h5py.File]:
    """Open and validate a schema file read-only; yields the h5py.File.

    Raises UserInputError (one line, naming the file) for a missing file, a
    non-HDF5 file, or one without float ``input``/``output`` of equal shape.
    """
    p = Path(path)
    f = open_hdf5(p, generate_hint(p))
    with f:
        problem = f.attrs.get("problem")
        problem = problem.decode() if isinstance(problem, bytes) else problem
        schema = f.attrs.get("schema")
        if (schema.decode() if isinstance(schema, bytes) else schema) == POINT_SCHEMA:
            raise points_refused(p, problem)
        version = f.attrs.get("schema_version")
        if version is not None and int(version) > SCHEMA_VERSION:
            raise UserInputError(
                f"data file {p} has schema_version {int(version)}; this mutransfer reads up to "
                f"{SCHEMA_VERSION}, so upgrade mutransfer"
            )
        for key in ("input", "output"):
            if not isinstance(f.get(key), h5py.Dataset):
                found = ", ".join(sorted(f.keys())) or "nothing"
                raise UserInputError(
                    f"data file {p} has no {key!r} dataset (found: {found}); {generate_hint(p, problem)}"
                )
        xi, yo = f["input"], f["output"]
        timed = len(yo.shape) == len(xi.shape) + 1 and yo.shape[:-1] == xi.shape
        if not (xi.shape == yo.shape or timed) or len(xi.shape) < 2 or xi.shape[0] < 1:
            raise UserInputError(
                f"data file {p}: input shape {xi.shape} and output shape {yo.shape} must be equal "
                f"(n, *grid) with n >= 1; {generate_hint(p, problem)}"
            )
        for key, ds in (("input", xi), ("output", yo)):
            if ds.dtype.kind != "f":
                raise UserInputError(f"data file {p}: dataset {key!r} has dtype {ds.dtype}, expected floating point")
            check_stored(p, key, ds)
        yield f


def read_dataset(path) -> dict:
    """Read a whole data set: {"input", "output" (float32 arrays), "grid": {...}, "attrs": {...}}."""
    with open_dataset(path) as f:
        grid = {}
        if isinstance(f.get("grid"), h5py.Group):
            grid = {k: f["grid"][k][()] for k in f["grid"] if isinstance(f["grid"][k], h5py.Dataset)}
        return {
            "input": f["input"][()],
            "output": f["output"][()],
            "grid": grid,
            "attrs": read_attrs(f),
        }


def _stats(ds: h5py.Dataset) -> dict:
    """min/max/mean of a dataset, read in blocks of samples (bounded memory)."""
    per_sample = max(1, int(np.prod(ds.shape[1:])) * ds.dtype.itemsize)
    block = max(1, _BLOCK_BYTES // per_sample)
    lo, hi, total, count = np.inf, -np.inf, 0.0, 0
    for start in range(0, ds.shape[0], block):
        arr = ds[start : start + block]
        lo = min(lo, float(arr.min()))
        hi = max(hi, float(arr.max()))
        total += float(arr.sum(dtype=np.float64))
        count += arr.size
    return {"min": lo, "max": hi, "mean": total / max(count, 1)}


def inspect_dataset(path) -> dict:
    """Summary of a data file: problem, n_samples, grid_shape, per-dataset shape/dtype/min/max/mean, attrs.

    Arrays are scanned in blocks of samples, never loaded whole.
    """
    with open_dataset(path) as f:
        attrs = read_attrs(f)
        datasets = {}
        for key in ("input", "output"):
            ds = f[key]
            datasets[key] = {"shape": tuple(ds.shape), "dtype": str(ds.dtype), **_stats(ds)}
        grid = {}
        if isinstance(f.get("grid"), h5py.Group):
            grid = {k: tuple(v.shape) for k, v in f["grid"].items() if isinstance(v, h5py.Dataset)}
        return {
            "path": str(path),
            "problem": attrs.get("problem"),
            "n_samples": int(f["input"].shape[0]),
            "grid_shape": tuple(f["input"].shape[1:]),
            "datasets": datasets,
            "grid": grid,
            "attrs": attrs,
        }
