"""The core of the format readers: lazily read arrays, the opened-file record, the format record.

:class:`LazyArray` sees a stored array in the canonical layout ``(n, *space, [T], C)``
and reads it by sample blocks; :class:`DataSource` is what every format's reader
returns; :class:`DataFormat` is one registry entry (``formats.registry``) and
:class:`Probe` is what format detectors look at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from mutransfer.data._problem_facts import problem_for_dim, problem_from_file_name
from mutransfer.errors import UserInputError

__all__ = ["LazyArray", "DataSource", "DataFormat", "Probe", "parse_time_spec"]


# ----------------------------------------------------------------------------- the registry record


@dataclass(frozen=True)
class DataFormat:
    """One data-file format: how to recognise it and how to open it.

    ``detect(probe)`` -> bool looks at a :class:`Probe` (never at the extension);
    detectors run in registry order, the first True wins. ``open(path, options)``
    -> :class:`DataSource` (``options``: ``formats.common.Options``).
    ``describe(path)`` -> dict, optional: the format's own ``data inspect``
    summary when no reader options are given. ``read_whole``: for formats whose
    reader loads the whole file (no streaming), the file kind named in the error.
    """

    name: str
    title: str
    detect: Callable[[Probe], bool]
    open: Callable[..., DataSource]
    describe: Callable[..., dict] | None = None
    read_whole: str | None = None


class Probe:
    """A file as format detectors see it: ``path``, its first bytes ``head``, and ``h5``.

    ``h5`` is the open read-only h5py.File for HDF5 files (opened on first use,
    None for other files); :meth:`close` closes it.
    """

    def __init__(self, path: Path, head: bytes):
        self.path = path
        self.head = head
        self._h5 = None
        self._h5_checked = False

    @property
    def h5(self) -> h5py.File | None:
        if not self._h5_checked:
            self._h5_checked = True
            if h5py.is_hdf5(self.path):
                try:
                    self._h5 = h5py.File(self.path, "r")
                except OSError as exc:
                    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise UserInputError(f"data file {self.path} could not be opened as HDF5 ({msg})") from None
        return self._h5

    @property
    def root_datasets(self) -> set[str]:
        """Names of the root datasets of an HDF5 file (empty for other files)."""
        f = self.h5
        return set() if f is None else {k for k, v in f.items() if isinstance(v, h5py.Dataset)}

    @property
    def root_groups(self) -> set[str]:
        """Names of the root groups of an HDF5 file (empty for other files)."""
        f = self.h5
        return set() if f is None else {k for k, v in f.items() if isinstance(v, h5py.Group)}

    def root_attr(self, name: str):
        """A root attribute of an HDF5 file as str/plain value (None when absent or not HDF5)."""
        f = self.h5
        value = None if f is None else f.attrs.get(name)
        return value.decode() if isinstance(value, bytes) else value

    def close(self) -> None:
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None


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

    def _copy(self) -> LazyArray:
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
    def select_time(self, index, *, role: str) -> LazyArray:
        """Keep one time (int) or a slice of times of the time axis."""
        flag = _flag(f"{role}_time")
        if self.time_axis is None:
            raise UserInputError(f"{role} {self.name!r} (shape {self.stored_shape}) has no time axis; drop {flag}")
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

    def stride_space(self, step: int) -> LazyArray:
        new = self._copy()
        for a in self.space_axes:
            new._sel[a] = self._sel[a][::step]
        return new

    def stride_time(self, step: int) -> LazyArray:
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
                index.append(
                    slice(sel.start, sel.stop, sel.step) if sel.stop >= 0 else slice(sel.start, None, sel.step)
                )
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
    #: the format's title (set by ``open_data`` from the registry)
    format_name: str = ""
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
        hinted = problem_from_file_name(Path(self.path).name, dims)
        if hinted is not None:
            return hinted
        if dims == 3 and not self.output.has_time:
            return None
        return problem_for_dim(dims)

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
            "format_name": self.format_name or self.format,
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

    def __enter__(self) -> DataSource:
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
