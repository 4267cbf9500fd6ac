"""Readers for the classic operator-learning data formats, selected by file content.

``open_data(path, **options)`` detects the format from the file's bytes and
structure (never from the extension alone) and returns a :class:`DataSource`:
lazily readable input and output arrays in one canonical layout, plus the grid
coordinates, a problem guess and a one-line description. ``load_split`` in
``mutransfer.data.loading`` builds train/test tensors from it, so every command
that loads data accepts every format.

| format            | detected by                                               | arrays |
|-------------------|-----------------------------------------------------------|--------|
| `mutransfer`      | HDF5 with attribute schema="mutransfer-pde" or root `input`/`output` | `input` (n, *grid), `output` (n, *grid[, T]) |
| `mat-v5`          | 128-byte header "MATLAB 5.0 MAT-file" (scipy.io.loadmat)  | named arrays, natural order |
| `mat-v7.3`        | HDF5 with the 512-byte "MATLAB 7.3 MAT-file" user block or `MATLAB_class` attributes | named arrays, stored with reversed axes (MATLAB is column-major): read back transposed |
| `pdebench`        | HDF5 with root `tensor` and/or `x-coordinate`/`t-coordinate` | `tensor` (N, t, x[, y, z]); other fields (N, t, *x) or time-free (N, *x) |
| `pdebench-groups` | HDF5 whose root groups ("0000", "0001", ...) hold `data` | `data` (t, x[, y], c) per sample, `grid/x`, `grid/t` |
| `the-well`        | HDF5 with groups `t0_fields`/`t1_fields`/`t2_fields` and `dimensions` | fields (trajectory, time, x, y[, z][, D[, D]]) |
| `hdf5`            | any other HDF5: its root datasets                          | named arrays (n, ...) |
| `torch`           | zip archive holding `data.pkl`, or the legacy torch pickle magic | a dict of tensors, e.g. neuraloperator's `x`/`y`; loaded with ``weights_only=True`` |

HDF5-based files (including MATLAB v7.3) are read lazily, block by block;
MATLAB v5 and .pt files are loaded whole by scipy/torch (only the two arrays
used), so very large v5 files need the memory to hold them.

Canonical layout: ``(n, *space, [T], C)``: samples first, then the spatial
axes, then a time axis when one is kept, then channels (1 for scalar fields;
vector/tensor components of The Well and PDEBench per-sample data otherwise).

Options (the CLI's ``--input-key``, ``--output-key``, ``--field``, ``--input-time``,
``--output-time``):

* ``input_key`` / ``output_key``: which arrays (fields) are input and output.
  Defaults: the format's own (`input`/`output`; `a`/`u`, `coeff`/`sol`, `x`/`y`
  when present; PDEBench `tensor` / `data`; the single field of a Well file).
  ``field`` sets both, for trajectory data.
* Time axes: PDEBench and The Well arrays carry time on axis 1 (by format).
  In .mat/.pt/generic HDF5 arrays (the FNO convention, e.g. `u` (N, 64, 64, T))
  the time axis is the LAST one, and exists when the input and output are the
  same array (a trajectory), when a time index is given for that array, or
  when the output has one more axis than the input (then the input is taken at
  t = 0 and broadcast along time by ``load_split``).
* ``input_time``: one time index for the input. ``output_time``: an index
  (a single time), ``"all"`` or a ``"start:stop[:step]"`` slice (a space-time
  output). Defaults for trajectories: input 0, output -1 (the final time).
"""

from __future__ import annotations

import difflib
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from mutransfer.data.hdf5_io import decode_attr, read_attrs
from mutransfer.errors import UserInputError

__all__ = [
    "FORMATS",
    "LazyArray",
    "DataSource",
    "detect_format",
    "open_data",
    "describe",
    "parse_time_spec",
]

FORMATS = {
    "mutransfer": "mutransfer HDF5 (schema mutransfer-pde)",
    "mat-v5": "MATLAB v5 .mat",
    "mat-v7.3": "MATLAB v7.3 .mat (HDF5, arrays stored transposed)",
    "pdebench": "PDEBench HDF5 (single arrays)",
    "pdebench-groups": "PDEBench HDF5 (per-sample groups)",
    "the-well": "The Well HDF5",
    "hdf5": "HDF5 (root datasets)",
    "torch": "PyTorch .pt dict",
}
_SUPPORTED = "HDF5 (mutransfer, PDEBench, The Well), MATLAB .mat v5/v7.3, PyTorch .pt"
_PAIRS = (("input", "output"), ("a", "u"), ("coeff", "sol"), ("x", "y"))
_SPACE_NAMES = ("x", "y", "z")
_TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
_NAME_HINTS = (
    ("darcy", "darcy"),
    ("piececonst", "darcy"),
    ("burgers", "burgers"),
    ("navier", "navier_stokes"),
    ("kolmogorov", "navier_stokes"),
    ("vorticity", "navier_stokes"),
    ("ns_", "navier_stokes"),
    ("ns-", "navier_stokes"),
)
_DIM_PROBLEMS = {1: "burgers", 2: "darcy", 3: "navier_stokes"}


# ----------------------------------------------------------------------------- options


def parse_time_spec(value, *, name: str = "output_time"):
    """None, an int, "all" or "start:stop[:step]" (positive step) -> None | int | slice."""
    if value is None or isinstance(value, slice):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    text = str(value).strip()
    if text == "all":
        return slice(None)
    try:
        return int(text)
    except ValueError:
        pass
    parts = text.split(":")
    if len(parts) in (2, 3):
        try:
            nums = [int(p) if p.strip() else None for p in parts]
        except ValueError:
            nums = None
        if nums is not None and (len(nums) == 2 or nums[2] is None or nums[2] >= 1):
            return slice(*nums)
    raise UserInputError(
        f"{name} {value!r}: use a time index (e.g. -1), 'all', or a slice 'start:stop[:step]' with a positive step"
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# ----------------------------------------------------------------------------- lazy arrays


class _GroupStack:
    """Per-sample datasets (PDEBench groups) seen as one array (n, *item_shape)."""

    def __init__(self, datasets: list):
        self.datasets = datasets
        first = datasets[0]
        self.shape = (len(datasets),) + tuple(first.shape)
        self.dtype = first.dtype
        self.ndim = len(self.shape)

    def __getitem__(self, index):
        rows, rest = index[0], tuple(index[1:])
        items = [np.asarray(ds[rest]) for ds in self.datasets[rows]]
        return np.stack(items) if items else np.empty((0,))


class LazyArray:
    """A stored array seen in the canonical layout (n, *space, [T], C), read by sample blocks.

    ``sample_axis``, ``space_axes``, ``time_axis`` and ``channel_axes`` name axes
    of the stored array; selections (a time index or slice, strides) are kept
    as ranges per stored axis and applied when reading, so only the needed
    values leave the file.
    """

    def __init__(self, source, name: str, *, sample_axis: int = 0, space_axes, time_axis=None, channel_axes=()):
        self.source = source
        self.name = name
        self.sample_axis = sample_axis
        self.space_axes = tuple(space_axes)
        self.time_axis = time_axis
        self.channel_axes = tuple(channel_axes)
        shape = tuple(source.shape)
        self._sel = {ax: range(shape[ax]) for ax in range(len(shape)) if ax != sample_axis}

    def _copy(self) -> "LazyArray":
        new = object.__new__(LazyArray)
        new.__dict__.update(self.__dict__)
        new._sel = dict(self._sel)
        return new

    # -- shape ---------------------------------------------------------------
    @property
    def stored_shape(self) -> tuple:
        return tuple(self.source.shape)

    @property
    def n(self) -> int:
        return int(self.source.shape[self.sample_axis])

    @property
    def has_time(self) -> bool:
        return self.time_axis is not None and isinstance(self._sel[self.time_axis], range)

    @property
    def time_range(self):
        """Range of stored time indices kept (None without a time axis), or the selected int."""
        return None if self.time_axis is None else self._sel[self.time_axis]

    @property
    def space_ranges(self) -> tuple:
        return tuple(self._sel[a] for a in self.space_axes)

    @property
    def space_shape(self) -> tuple:
        return tuple(len(r) for r in self.space_ranges)

    @property
    def channels(self) -> int:
        return int(np.prod([len(self._sel[a]) for a in self.channel_axes])) if self.channel_axes else 1

    @property
    def grid_shape(self) -> tuple:
        """Grid seen by the model: space axes, then time when kept."""
        return self.space_shape + ((len(self._sel[self.time_axis]),) if self.has_time else ())

    @property
    def shape(self) -> tuple:
        return (self.n,) + self.grid_shape + (self.channels,)

    @property
    def dtype(self):
        return self.source.dtype

    # -- selections ----------------------------------------------------------
    def select_time(self, index, *, role: str) -> "LazyArray":
        """Keep one time (int) or a slice of times of the time axis."""
        flag = _flag(f"{role}_time")
        if self.time_axis is None:
            raise UserInputError(
                f"{role} {self.name!r} (shape {self.stored_shape}) has no time axis; drop {flag}"
            )
        r = self._sel[self.time_axis]
        new = self._copy()
        if isinstance(index, slice):
            if index.step is not None and index.step < 1:
                raise UserInputError(f"{flag} {_slice_text(index)}: the step must be positive")
            sub = r[index]
            if len(sub) == 0:
                raise UserInputError(
                    f"{flag} {_slice_text(index)} selects no time of the {len(r)} in {role} {self.name!r}; "
                    f"use e.g. 1:{len(r)}"
                )
            new._sel[self.time_axis] = sub
        else:
            if not -len(r) <= index < len(r):
                raise UserInputError(
                    f"{flag} {index}: {role} {self.name!r} has {len(r)} times; use an index in "
                    f"[{-len(r)}, {len(r) - 1}]"
                )
            new._sel[self.time_axis] = r[index]
        return new

    def stride_space(self, step: int) -> "LazyArray":
        new = self._copy()
        for a in self.space_axes:
            new._sel[a] = self._sel[a][::step]
        return new

    def stride_time(self, step: int) -> "LazyArray":
        """Every ``step``-th time counted back from the last (the final time is kept)."""
        r = self._sel[self.time_axis]
        new = self._copy()
        new._sel[self.time_axis] = r[(len(r) - 1) % step :: step]
        return new

    # -- reading ---------------------------------------------------------------
    def read(self, start: int, stop: int) -> np.ndarray:
        """Samples [start, stop) in the canonical layout, float32."""
        index, kept = [], []
        for ax in range(len(self.source.shape)):
            if ax == self.sample_axis:
                index.append(slice(start, stop))
                kept.append(ax)
                continue
            sel = self._sel[ax]
            if isinstance(sel, range):
                index.append(slice(sel.start, sel.stop, sel.step) if sel.stop >= 0 else slice(sel.start, None, sel.step))
                kept.append(ax)
            else:
                index.append(int(sel))
        arr = np.asarray(self.source[tuple(index)])
        if arr.dtype.kind not in "fiub":
            raise UserInputError(f"array {self.name!r} has dtype {arr.dtype}; expected real numbers")
        order = [self.sample_axis, *self.space_axes]
        if self.has_time:
            order.append(self.time_axis)
        channel_kept = [a for a in self.channel_axes if a in kept]
        order += channel_kept
        arr = arr.transpose([kept.index(a) for a in order])
        rows = arr.shape[0]
        return np.ascontiguousarray(arr.reshape((rows,) + self.grid_shape + (self.channels,)), dtype=np.float32)


def _slice_text(s: slice) -> str:
    parts = ["" if s.start is None else str(s.start), "" if s.stop is None else str(s.stop)]
    if s.step is not None:
        parts.append(str(s.step))
    return ":".join(parts)


# ----------------------------------------------------------------------------- result type


@dataclass
class DataSource:
    """An opened data file: lazily readable input/output in the canonical layout.

    ``input`` / ``output`` are :class:`LazyArray` s of shape (n, *space, [T], C);
    ``grid`` holds coordinates per stored axis name ("x", "y", "z", "t") when the
    file has them; ``problem`` is the file's own problem attribute (project
    files), ``problem_guess`` a guess from the name and the grid's rank.
    Use as a context manager (HDF5 files stay open while it is in use).
    """

    path: str
    format: str
    input: LazyArray
    output: LazyArray
    input_key: str
    output_key: str
    problem: str | None = None
    description: str = ""
    grid: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)
    _file: object = None

    @property
    def n_samples(self) -> int:
        return self.output.n

    @property
    def grid_shape(self) -> tuple:
        """The model's grid: output space axes, then time when the output keeps one."""
        return self.output.grid_shape

    @property
    def problem_guess(self) -> str | None:
        if self.problem is not None:
            return self.problem
        dims = len(self.grid_shape)
        name = Path(self.path).name.lower()
        for hint, problem in _NAME_HINTS:
            if hint in name and _problem_dim(problem) == dims:
                return problem
        if dims == 3 and not self.output.has_time:
            return None
        return _DIM_PROBLEMS.get(dims)

    def load(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(input, output) float32 numpy arrays for samples [start, stop) (all by default)."""
        stop = self.n_samples if stop is None else stop
        return self.input.read(start, stop), self.output.read(start, stop)

    def summary(self) -> dict:
        def arr(a: LazyArray, key):
            return {
                "key": key,
                "shape": list(a.shape),
                "stored_shape": list(a.stored_shape),
                "dtype": str(a.dtype),
                "time": _time_text(a),
            }

        return {
            "path": self.path,
            "format": self.format,
            "format_name": FORMATS.get(self.format, self.format),
            "description": self.description,
            "problem": self.problem,
            "problem_guess": self.problem_guess,
            "n_samples": self.n_samples,
            "grid_shape": list(self.grid_shape),
            "input": arr(self.input, self.input_key),
            "output": arr(self.output, self.output_key),
            "arrays": self.arrays,
            "grid": {k: list(np.shape(v)) for k, v in self.grid.items()},
            "attrs": self.attrs,
        }

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None

    def __enter__(self) -> "DataSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _time_text(a: LazyArray) -> str:
    if a.time_axis is None:
        return "none"
    r = a.time_range
    if isinstance(r, range):
        return f"{len(r)} times (stored indices {r.start}..{r[-1]} step {r.step})" if len(r) else "none"
    return f"index {r}"


def _problem_dim(problem: str) -> int:
    return {"burgers": 1, "darcy": 2, "navier_stokes": 3}.get(problem, -1)


# ----------------------------------------------------------------------------- detection


def _missing(p: Path) -> UserInputError:
    from mutransfer.data.hdf5_io import _hint

    return UserInputError(f"data file {p} not found; {_hint(p)}")


def _check_path(path) -> Path:
    p = Path(path)
    if not p.exists():
        raise _missing(p)
    if p.is_dir():
        raise UserInputError(f"data file {p} is a directory; pass the path of a data file")
    return p


def _read_head(p: Path, size: int = 1024) -> bytes:
    try:
        with open(p, "rb") as fh:
            return fh.read(size)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserInputError(f"data file {p} could not be read ({reason}); check its permissions") from None


def _is_torch_zip(p: Path) -> bool:
    try:
        with zipfile.ZipFile(p) as z:
            return any(n == "data.pkl" or n.endswith("/data.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _hdf5_kind(f: h5py.File, head: bytes) -> str:
    root_ds = {k for k, v in f.items() if isinstance(v, h5py.Dataset)}
    root_groups = {k for k, v in f.items() if isinstance(v, h5py.Group)}
    if head.startswith(b"MATLAB 7.3 MAT-file") or any("MATLAB_class" in f[k].attrs for k in root_ds):
        return "mat-v7.3"
    schema = f.attrs.get("schema")
    schema = schema.decode() if isinstance(schema, bytes) else schema
    if schema == "mutransfer-pde" or "input" in root_ds or "output" in root_ds:
        return "mutransfer"
    if {"t0_fields", "t1_fields", "t2_fields"} & root_groups and "dimensions" in root_groups:
        return "the-well"
    if "tensor" in root_ds or any(k.endswith("-coordinate") for k in root_ds):
        return "pdebench"
    if root_groups and not root_ds:
        first = f[sorted(root_groups)[0]]
        if isinstance(first.get("data"), h5py.Dataset):
            return "pdebench-groups"
    return "hdf5"


def detect_format(path) -> str:
    """The format of ``path`` (a key of FORMATS), from its content; one-line error otherwise."""
    p = _check_path(path)
    head = _read_head(p)
    if not head:
        raise UserInputError(f"data file {p} is empty (0 bytes); pass a data file ({_SUPPORTED})")
    if head.startswith(b"MATLAB 5.0 MAT-file"):
        return "mat-v5"
    if h5py.is_hdf5(p):
        try:
            with h5py.File(p, "r") as f:
                return _hdf5_kind(f, head)
        except OSError as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserInputError(f"data file {p} could not be opened as HDF5 ({msg})") from None
    if head.startswith(b"PK\x03\x04") and _is_torch_zip(p):
        return "torch"
    if head.startswith(_TORCH_LEGACY_MAGIC):
        return "torch"
    if head.startswith(b"MATLAB 7.3 MAT-file"):
        raise UserInputError(f"data file {p} has a MATLAB 7.3 header but no HDF5 content; the file is damaged")
    raise UserInputError(
        f"data file {p} is not a recognised data file (found {p.stat().st_size} bytes starting "
        f"{head[:16]!r}); supported: {_SUPPORTED}"
    )


# ----------------------------------------------------------------------------- helpers




def _unknown_key(path, key: str, found, flag: str) -> UserInputError:
    found = sorted(found)
    close = difflib.get_close_matches(key, found, n=1)
    suggestion = close[0] if close else (found[0] if found else "NAME")
    return UserInputError(
        f"{path}: no array {key!r} (found: {', '.join(found) or 'nothing'}); pass {flag} {suggestion}"
    )


@dataclass
class _Options:
    input_key: str | None = None
    output_key: str | None = None
    field: str | None = None
    input_time: int | None = None
    output_time: object = None

    @classmethod
    def make(cls, input_key=None, output_key=None, field=None, input_time=None, output_time=None) -> "_Options":
        if input_time is not None:
            t = parse_time_spec(input_time, name="input_time")
            if not isinstance(t, int):
                raise UserInputError(f"input_time {input_time!r}: the input takes one time index, e.g. 0")
            input_time = t
        return cls(input_key, output_key, field, input_time, parse_time_spec(output_time))


def _choose_keys(path, names: list[str], opts: _Options, default: str | None, role_names=("input", "output")):
    """(input_key, output_key, explicit_flags) from the options and the format's default."""
    names_set = set(names)
    ik = opts.input_key or opts.field
    ok = opts.output_key or opts.field
    for key, flag in ((opts.field, "--field"), (opts.input_key, "--input-key"), (opts.output_key, "--output-key")):
        if key is not None and key not in names_set:
            raise _unknown_key(path, key, names, flag)
    if ik is None or ok is None:
        pair = next((p for p in _PAIRS if p[0] in names_set and p[1] in names_set), None)
        if ik is None and ok is None:
            if default is not None and default in names_set:
                ik = ok = default
            elif pair is not None:
                ik, ok = pair
            elif len(names) == 1:
                ik = ok = names[0]
            else:
                raise UserInputError(
                    f"{path}: cannot tell which arrays are input and output (found: {', '.join(sorted(names)) or 'nothing'}); "
                    "pass --input-key NAME --output-key NAME (or --field NAME for a trajectory)"
                )
        elif ik is None:
            ik = default if default in names_set else next((p[0] for p in _PAIRS if p[1] == ok and p[0] in names_set), ok)
        else:
            ok = default if default in names_set else next((p[1] for p in _PAIRS if p[0] == ik and p[1] in names_set), ik)
    return ik, ok


def _apply_times(path, inp: LazyArray, out: LazyArray, opts: _Options, trajectory_defaults: bool):
    """Apply input/output time selections; returns the new (input, output)."""
    in_t, out_t = opts.input_time, opts.output_time
    if trajectory_defaults:
        if in_t is None and inp.time_axis is not None:
            in_t = 0
        if out_t is None and out.time_axis is not None:
            out_t = -1
    if in_t is not None:
        inp = inp.select_time(in_t, role="input")
    if out_t is not None:
        out = out.select_time(out_t, role="output")
    if inp.has_time:
        raise UserInputError(
            f"{path}: input {inp.name!r} (shape {inp.stored_shape}) still has a time axis; pick one time with --input-time 0"
        )
    return inp, out


def _validate(path, inp: LazyArray, out: LazyArray) -> None:
    if inp.n != out.n:
        raise UserInputError(
            f"{path}: input {inp.name!r} has {inp.n} samples but output {out.name!r} has {out.n}; "
            "pass arrays with the same number of samples (--input-key/--output-key)"
        )
    if inp.n < 1:
        raise UserInputError(f"{path}: input {inp.name!r} holds no samples")
    if not inp.space_axes:
        raise UserInputError(
            f"{path}: input {inp.name!r} has shape {inp.stored_shape}; expected (n, *grid) with at least one grid axis"
        )
    if inp.space_shape != out.space_shape:
        raise UserInputError(
            f"{path}: input {inp.name!r} has grid {inp.space_shape} but output {out.name!r} has grid "
            f"{out.space_shape}; input and output must share the spatial grid (check --input-key/--output-key)"
        )
    grid = out.grid_shape
    if not 1 <= len(grid) <= 3:
        hint = "; select one time with --output-time -1" if out.has_time else ""
        raise UserInputError(
            f"{path}: output {out.name!r} gives a {len(grid)}-dimensional grid {grid}; the FNO supports 1 to 3{hint}"
        )


def _trailing_time_axes(path, ik, ok, shapes: dict, opts: _Options) -> tuple:
    """Time axes (last axis or None) of the input and output arrays in the FNO convention."""
    ishape, oshape = shapes[ik], shapes[ok]
    if ik == ok:
        if len(ishape) < 3:
            raise UserInputError(
                f"{path}: array {ik!r} has shape {ishape}; a trajectory used as input and output needs "
                "(n, *grid, T); pass --input-key and --output-key"
            )
        return len(ishape) - 1, len(oshape) - 1
    it = len(ishape) - 1 if opts.input_time is not None else None
    if opts.output_time is not None:
        ot = len(oshape) - 1
    elif len(oshape) == len(ishape) + 1 and tuple(oshape[:-1]) == tuple(ishape):
        ot = len(oshape) - 1
    else:
        ot = None
    return it, ot


def _plain_array(source, name, time_axis, *, reversed_axes: bool = False) -> LazyArray:
    """Array (n, *space[, T]) in natural order, or stored with all axes reversed (MATLAB v7.3)."""
    ndim = len(source.shape)
    if reversed_axes:
        # canonical axis i lives at stored axis ndim-1-i
        sample = ndim - 1
        canon_time = time_axis
        space = [ndim - 1 - i for i in range(1, ndim) if i != canon_time]
        t = None if canon_time is None else ndim - 1 - canon_time
        return LazyArray(source, name, sample_axis=sample, space_axes=space, time_axis=t)
    space = [i for i in range(1, ndim) if i != time_axis]
    return LazyArray(source, name, sample_axis=0, space_axes=space, time_axis=time_axis)


# ----------------------------------------------------------------------------- openers


def _open_mutransfer(p: Path, opts: _Options) -> DataSource:
    from mutransfer.data.hdf5_io import open_dataset

    with open_dataset(p):  # validates (one-line errors for partial/malformed files)
        pass
    for key, flag, want in ((opts.input_key, "--input-key", "input"), (opts.output_key, "--output-key", "output")):
        if key is not None and key != want:
            raise UserInputError(f"{p}: mutransfer files hold 'input' and 'output'; drop {flag} {key}")
    if opts.field is not None:
        raise UserInputError(f"{p}: mutransfer files hold 'input' and 'output'; drop --field {opts.field}")
    f = h5py.File(p, "r")
    try:
        xi, yo = f["input"], f["output"]
        timed = len(yo.shape) == len(xi.shape) + 1
        inp = _plain_array(xi, "input", None)
        out = _plain_array(yo, "output", len(yo.shape) - 1 if timed else None)
        inp, out = _apply_times(p, inp, out, opts, trajectory_defaults=False)
        attrs = read_attrs(f)
        grid = {}
        if isinstance(f.get("grid"), h5py.Group):
            grid = {k: np.asarray(v[()], dtype=np.float64) for k, v in f["grid"].items() if isinstance(v, h5py.Dataset)}
        problem = attrs.get("problem")
        desc = f"{problem or 'unknown'} data, {xi.shape[0]} samples, input {tuple(xi.shape[1:])}, output {tuple(yo.shape[1:])}"
        return DataSource(
            str(p), "mutransfer", inp, out, "input", "output", problem=problem, description=desc, grid=grid,
            attrs=attrs, arrays={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in f.items()
                                 if isinstance(v, h5py.Dataset)}, _file=f,
        )
    except BaseException:
        f.close()
        raise


def _numeric_names(items: dict) -> list[str]:
    return [k for k, shape_dtype in items.items() if shape_dtype[1].kind in "fiub" and len(shape_dtype[0]) >= 1]


def _open_mat_v5(p: Path, opts: _Options) -> DataSource:
    import scipy.io

    try:
        info = scipy.io.whosmat(p)
    except Exception as exc:  # corrupt file
        raise UserInputError(f"data file {p} could not be read as a MATLAB v5 file ({str(exc).splitlines()[0]})") from None
    numeric_classes = {"double", "single", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "logical"}
    shapes = {name: tuple(shape) for name, shape, cls in info if cls in numeric_classes}
    names = list(shapes)
    ik, ok = _choose_keys(p, names, opts, None)
    try:
        loaded = scipy.io.loadmat(p, variable_names=sorted({ik, ok}))
    except Exception as exc:
        raise UserInputError(f"data file {p} could not be read as a MATLAB v5 file ({str(exc).splitlines()[0]})") from None
    arrays = {k: np.asarray(loaded[k]) for k in {ik, ok}}
    it, ot = _trailing_time_axes(p, ik, ok, {k: v.shape for k, v in arrays.items()}, opts)
    inp = _plain_array(arrays[ik], ik, it)
    out = _plain_array(arrays[ok], ok, ot)
    inp, out = _apply_times(p, inp, out, opts, trajectory_defaults=ik == ok)
    _validate(p, inp, out)
    grid = {}
    if "t" in shapes and "t" not in (ik, ok):
        t = np.asarray(scipy.io.loadmat(p, variable_names=["t"])["t"], dtype=np.float64).ravel()
        grid["t"] = t
    desc = f"MATLAB v5 file with arrays {', '.join(f'{k} {shapes[k]}' for k in names)}"
    return DataSource(
        str(p), "mat-v5", inp, out, ik, ok, description=desc, grid=grid,
        arrays={n: {"shape": list(s), "dtype": cls} for n, s, cls in info},
    )


def _open_mat_v73(p: Path, f: h5py.File, opts: _Options) -> DataSource:
    datasets = {
        k: v for k, v in f.items()
        if isinstance(v, h5py.Dataset) and v.dtype.kind in "fiub" and not k.startswith("#")
        and decode_attr(v.attrs.get("MATLAB_class", "double")) not in ("char", "cell", "struct")
    }
    # MATLAB stores column-major: the HDF5 shape is the MATLAB size reversed
    shapes = {k: tuple(reversed(v.shape)) for k, v in datasets.items()}
    names = [k for k, s in shapes.items() if len(s) >= 1]
    ik, ok = _choose_keys(p, names, opts, None)
    it, ot = _trailing_time_axes(p, ik, ok, shapes, opts)
    inp = _plain_array(datasets[ik], ik, it, reversed_axes=True)
    out = _plain_array(datasets[ok], ok, ot, reversed_axes=True)
    inp, out = _apply_times(p, inp, out, opts, trajectory_defaults=ik == ok)
    _validate(p, inp, out)
    grid = {}
    if "t" in datasets and "t" not in (ik, ok):
        grid["t"] = np.asarray(datasets["t"][()], dtype=np.float64).ravel()
    desc = f"MATLAB v7.3 file with arrays {', '.join(f'{k} {shapes[k]}' for k in names)} (read transposed)"
    return DataSource(
        str(p), "mat-v7.3", inp, out, ik, ok, description=desc, grid=grid,
        arrays={k: {"shape": list(shapes[k]), "dtype": str(v.dtype)} for k, v in datasets.items()}, _file=f,
    )


def _open_generic_hdf5(p: Path, f: h5py.File, opts: _Options) -> DataSource:
    datasets = {k: v for k, v in f.items() if isinstance(v, h5py.Dataset) and v.dtype.kind in "fiub" and v.ndim >= 1}
    names = list(datasets)
    ik, ok = _choose_keys(p, names, opts, None)
    shapes = {k: tuple(v.shape) for k, v in datasets.items()}
    it, ot = _trailing_time_axes(p, ik, ok, shapes, opts)
    inp = _plain_array(datasets[ik], ik, it)
    out = _plain_array(datasets[ok], ok, ot)
    inp, out = _apply_times(p, inp, out, opts, trajectory_defaults=ik == ok)
    _validate(p, inp, out)
    desc = f"HDF5 file with root arrays {', '.join(f'{k} {shapes[k]}' for k in names)}"
    return DataSource(
        str(p), "hdf5", inp, out, ik, ok, description=desc, attrs=read_attrs(f),
        arrays={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in datasets.items()}, _file=f,
    )


def _open_pdebench(p: Path, f: h5py.File, opts: _Options) -> DataSource:
    datasets = {k: v for k, v in f.items() if isinstance(v, h5py.Dataset)}
    coords = {k.split("-")[0]: np.asarray(v[()], dtype=np.float64).ravel()
              for k, v in datasets.items() if k.endswith("-coordinate")}
    fields = {k: v for k, v in datasets.items() if not k.endswith("-coordinate") and v.dtype.kind in "fiub" and v.ndim >= 2}
    n_space = sum(1 for c in _SPACE_NAMES if c in coords)
    if n_space == 0:
        ref = fields["tensor"] if "tensor" in fields else (max(fields.values(), key=lambda v: v.ndim) if fields else None)
        n_space = max(1, ref.ndim - 2) if ref is not None else 1
    default = "tensor" if "tensor" in fields else (next(iter(fields)) if len(fields) == 1 else None)
    ik, ok = _choose_keys(p, list(fields), opts, default)

    def lazy(name):
        ds = fields[name]
        if ds.ndim == n_space + 2:
            return LazyArray(ds, name, space_axes=range(2, ds.ndim), time_axis=1)
        if ds.ndim == n_space + 1:
            return LazyArray(ds, name, space_axes=range(1, ds.ndim))
        raise UserInputError(
            f"{p}: array {name!r} has shape {ds.shape}; PDEBench arrays with {n_space} space dims are "
            f"(N, t, {', '.join(_SPACE_NAMES[:n_space])}) or (N, {', '.join(_SPACE_NAMES[:n_space])})"
        )

    inp, out = _apply_times(p, lazy(ik), lazy(ok), opts, trajectory_defaults=True)
    _validate(p, inp, out)
    desc = f"PDEBench file with arrays {', '.join(f'{k} {tuple(v.shape)}' for k, v in fields.items())}"
    return DataSource(
        str(p), "pdebench", inp, out, ik, ok, description=desc, grid=coords, attrs=read_attrs(f),
        arrays={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in datasets.items()}, _file=f,
    )


def _open_pdebench_groups(p: Path, f: h5py.File, opts: _Options) -> DataSource:
    groups = sorted(k for k, v in f.items() if isinstance(v, h5py.Group))
    first = f[groups[0]]
    names = [k for k, v in first.items() if isinstance(v, h5py.Dataset) and v.dtype.kind in "fiub"]
    ik, ok = _choose_keys(p, names, opts, "data" if "data" in names else None)

    def lazy(name):
        dss = []
        for g in groups:
            ds = f[g].get(name)
            if not isinstance(ds, h5py.Dataset) or ds.shape != first[name].shape:
                raise UserInputError(
                    f"{p}: group {g!r} has no {name!r} of shape {first[name].shape} like group {groups[0]!r}; "
                    "every sample group needs the same arrays"
                )
            dss.append(ds)
        stack = _GroupStack(dss)
        nd = stack.ndim  # (n, t, *space, c)
        if nd < 4:
            raise UserInputError(f"{p}: {name!r} has per-sample shape {first[name].shape}; expected (t, x[, y, z], c)")
        return LazyArray(stack, name, space_axes=range(2, nd - 1), time_axis=1, channel_axes=(nd - 1,))

    inp, out = _apply_times(p, lazy(ik), lazy(ok), opts, trajectory_defaults=True)
    _validate(p, inp, out)
    grid = {}
    if isinstance(first.get("grid"), h5py.Group):
        grid = {k: np.asarray(v[()], dtype=np.float64).ravel()
                for k, v in first["grid"].items() if isinstance(v, h5py.Dataset)}
    desc = f"PDEBench file with {len(groups)} sample groups, {', '.join(f'{k} {first[k].shape}' for k in names)} each"
    return DataSource(
        str(p), "pdebench-groups", inp, out, ik, ok, description=desc, grid=grid, attrs=read_attrs(f),
        arrays={f"{groups[0]}/{k}": {"shape": list(first[k].shape), "dtype": str(first[k].dtype)} for k in names},
        _file=f,
    )


def _open_the_well(p: Path, f: h5py.File, opts: _Options) -> DataSource:
    attrs = read_attrs(f)
    dims = f["dimensions"]
    n_space = attrs.get("n_spatial_dims")
    spatial = [k for k in _SPACE_NAMES if isinstance(dims.get(k), h5py.Dataset)]
    n_space = int(n_space) if isinstance(n_space, (int, float)) else len(spatial)
    fields, order = {}, {}
    for rank, group in enumerate(("t0_fields", "t1_fields", "t2_fields")):
        if isinstance(f.get(group), h5py.Group):
            for k, v in f[group].items():
                if isinstance(v, h5py.Dataset):
                    fields[k], order[k] = v, rank
    if not fields:
        raise UserInputError(f"{p}: The Well file has no fields in t0_fields/t1_fields/t2_fields")
    default = next(iter(fields)) if len(fields) == 1 else None
    if default is None and opts.field is None and opts.input_key is None and opts.output_key is None:
        raise UserInputError(
            f"{p}: The Well file has fields {', '.join(sorted(fields))}; pass --field NAME "
            "(or --input-key/--output-key)"
        )
    ik, ok = _choose_keys(p, list(fields), opts, default)

    def lazy(name):
        ds, rank = fields[name], order[name]
        a = read_attrs(ds)
        if a.get("sample_varying") is False or a.get("sample_varying") == 0:
            raise UserInputError(f"{p}: field {name!r} is the same for every trajectory; pick a sample-varying field")
        time_varying = not (a.get("time_varying") is False or a.get("time_varying") == 0)
        expected = 1 + int(time_varying) + n_space + rank
        if ds.ndim != expected:
            raise UserInputError(
                f"{p}: field {name!r} has shape {ds.shape}; expected {expected} axes "
                f"(trajectory{', time' if time_varying else ''}, {n_space} space{f', {rank} component' if rank else ''})"
            )
        first_space = 2 if time_varying else 1
        space = range(first_space, first_space + n_space)
        channels = tuple(range(first_space + n_space, ds.ndim))
        return LazyArray(ds, name, space_axes=space, time_axis=1 if time_varying else None, channel_axes=channels)

    inp, out = _apply_times(p, lazy(ik), lazy(ok), opts, trajectory_defaults=True)
    _validate(p, inp, out)
    grid = {}
    for k in spatial:
        grid[k] = np.asarray(dims[k][()], dtype=np.float64).ravel()
    if isinstance(dims.get("time"), h5py.Dataset):
        grid["t"] = np.asarray(dims["time"][()], dtype=np.float64).ravel()
    name = attrs.get("dataset_name", "")
    desc = f"The Well file{f' {name!r}' if name else ''} with fields " + ", ".join(
        f"{k} {tuple(v.shape)}" for k, v in fields.items()
    )
    return DataSource(
        str(p), "the-well", inp, out, ik, ok, description=desc, grid=grid, attrs=attrs,
        arrays={f"t{order[k]}_fields/{k}": {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in fields.items()},
        _file=f,
    )


def _open_torch(p: Path, opts: _Options) -> DataSource:
    import torch

    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        found = next((ln for ln in lines if "Unsupported global" in ln), lines[0] if lines else type(exc).__name__)
        found = found.replace("WeightsUnpickler error: ", "").split(" was not an allowed global")[0]
        raise UserInputError(
            f"data file {p} could not be loaded safely with torch.load(weights_only=True) ({found[:160]}); "
            "save a dict of torch tensors, e.g. {'x': x, 'y': y}"
        ) from None
    if not isinstance(obj, dict):
        raise UserInputError(f"data file {p} holds a {type(obj).__name__}, not a dict of tensors; save {{'x': x, 'y': y}}")
    arrays = {str(k): v.detach().cpu().numpy() for k, v in obj.items() if isinstance(v, torch.Tensor) and not v.is_complex()}
    names = [k for k, v in arrays.items() if v.ndim >= 1]
    ik, ok = _choose_keys(p, names, opts, None)
    it, ot = _trailing_time_axes(p, ik, ok, {k: v.shape for k, v in arrays.items()}, opts)
    inp = _plain_array(arrays[ik], ik, it)
    out = _plain_array(arrays[ok], ok, ot)
    inp, out = _apply_times(p, inp, out, opts, trajectory_defaults=ik == ok)
    _validate(p, inp, out)
    desc = f"PyTorch dict with tensors {', '.join(f'{k} {tuple(arrays[k].shape)}' for k in names)}"
    return DataSource(
        str(p), "torch", inp, out, ik, ok, description=desc,
        arrays={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()},
    )


def open_data(
    path,
    *,
    input_key: str | None = None,
    output_key: str | None = None,
    field: str | None = None,
    input_time=None,
    output_time=None,
) -> DataSource:
    """Open ``path`` (any supported format, detected from its content) as a :class:`DataSource`.

    See the module docstring for the options. Raises UserInputError with one
    line naming what was found and the fix.
    """
    opts = _Options.make(input_key, output_key, field, input_time, output_time)
    fmt = detect_format(path)
    p = Path(path)
    if fmt == "mutransfer":
        return _open_mutransfer(p, opts)
    if fmt == "mat-v5":
        return _open_mat_v5(p, opts)
    if fmt == "torch":
        return _open_torch(p, opts)
    f = h5py.File(p, "r")
    try:
        opener = {
            "mat-v7.3": _open_mat_v73,
            "pdebench": _open_pdebench,
            "pdebench-groups": _open_pdebench_groups,
            "the-well": _open_the_well,
            "hdf5": _open_generic_hdf5,
        }[fmt]
        return opener(p, f, opts)
    except BaseException:
        f.close()
        raise


def describe(path, **options) -> dict:
    """A JSON-ready description of any supported file (project files: ``inspect_dataset`` plus the format)."""
    fmt = detect_format(path)
    if fmt == "mutransfer" and not any(v is not None for v in options.values()):
        from mutransfer.data.hdf5_io import inspect_dataset

        info = inspect_dataset(path)
        with open_data(path) as src:
            info = {"format": fmt, "format_name": FORMATS[fmt], **info, "model_grid_shape": src.grid_shape}
        return info
    with open_data(path, **options) as src:
        return src.summary()
