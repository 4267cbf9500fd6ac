"""Data larger than memory: train/test rows read on demand from HDF5 files.

``load_split(..., stream=True)`` (or automatically, when the split would not fit
in ``STREAM_MEMORY_FRACTION`` of the available memory) returns a
:class:`StreamingSplit` whose ``train_x`` ... ``test_y`` are :class:`LazySamples`:
indexing one reads only the requested rows, bit-identical to the tensors that
loading would give. :func:`iterate_batches` / :func:`iterate_chunks` feed the
trainer from either kind, in the same order.

A LazySamples pickles as its path and selection (a few hundred bytes) and opens
the file read-only lazily in each process (DataLoader and Ray workers).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from mutransfer.data._formats.registry import REGISTRY
from mutransfer.data._readers import open_data
from mutransfer.errors import UserInputError

__all__ = [
    "STREAM_MEMORY_FRACTION",
    "LazySamples",
    "StreamingSplit",
    "should_stream",
    "available_memory",
    "check_streamable",
    "iterate_batches",
    "iterate_chunks",
]

#: automatic streaming: stream when the split needs more than this fraction of the available memory
STREAM_MEMORY_FRACTION = 0.5
#: formats whose readers load the whole file (no lazy access): name -> file kind (from the format registry)
NOT_STREAMABLE = {name: f.read_whole for name, f in REGISTRY.items() if f.read_whole}
_BLOCK_BYTES = 64 * 2**20  # largest single read (bytes): bounds temporaries
_GAP_BYTES = 64 * 2**10  # rows closer than this (bytes) are read in one call, the gap discarded
_OPEN: dict = {}  # (path, options) -> (pid, file stamp, DataSource, {selection: LazyArray})


# ----------------------------------------------------------------------------- memory decision


def should_stream(nbytes: int, max_memory: int | None, available: int | None) -> bool:
    """Whether a split of ``nbytes`` bytes is streamed rather than loaded.

    ``max_memory`` (bytes): stream above it. None: stream above
    STREAM_MEMORY_FRACTION * ``available`` (bytes of memory available now);
    with both None (memory unknown) the split is loaded.
    """
    if max_memory is not None:
        return nbytes > max_memory
    return available is not None and nbytes > STREAM_MEMORY_FRACTION * available


def available_memory() -> int | None:
    """Bytes of memory available now (MemAvailable of /proc/meminfo), None when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_streamable(path, fmt: str) -> None:
    """One-line UserInputError when files of format ``fmt`` cannot be read lazily."""
    if fmt in NOT_STREAMABLE:
        raise UserInputError(
            f"data file {path} is a {NOT_STREAMABLE[fmt]} file, which is read whole and cannot be streamed; "
            "save its input/output arrays to HDF5 (e.g. h5py create_dataset) or load it (--no-stream)"
        )


# ----------------------------------------------------------------------------- per-process file handles


def _lazy_array(path: str, options: tuple, role: str, space_step: int, time_step: int):
    """(LazyArray of ``role`` with the strides applied, DataSource) from this process's open handle.

    The file is (re)opened read-only when this process has no handle yet (a
    forked or spawned worker) or the file changed on disk since it was opened.
    """

    try:
        st = os.stat(path)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = None  # gone: open_data reports it in one line
    key = (path, repr(options))
    hit = _OPEN.get(key)
    if hit is None or hit[0] != os.getpid() or hit[1] != stamp:
        if hit is not None and hit[0] == os.getpid():
            hit[2].close()
        src = open_data(path, **dict(options))
        check_streamable(path, src.format)
        hit = _OPEN[key] = (os.getpid(), stamp, src, {})
    src, arrays = hit[2], hit[3]
    sel = (role, space_step, time_step)
    if sel not in arrays:
        a = src.input if role == "input" else src.output
        a = a.stride_space(space_step) if space_step > 1 else a
        arrays[sel] = a.stride_time(time_step) if time_step > 1 and a.has_time else a
    return arrays[sel], src


def _compact(rows) -> range | np.ndarray:
    """Row indices as a range when they form one (small pickles), else an int64 array."""
    if isinstance(rows, range):
        return rows
    rows = np.asarray(rows, dtype=np.int64).ravel()
    if len(rows) == 0:
        return range(0)
    step = int(rows[1] - rows[0]) if len(rows) > 1 else 1
    if step != 0 and np.array_equal(np.diff(rows), np.full(len(rows) - 1, step)):
        return range(int(rows[0]), int(rows[-1]) + step, step)
    return rows


def _bounds(rows) -> tuple[int, int]:
    """(smallest, largest) of non-empty row indices (a range or an array) without iterating a range."""
    if isinstance(rows, range):
        return (rows[0], rows[-1]) if rows.step > 0 else (rows[-1], rows[0])
    return int(rows.min()), int(rows.max())


def _as_index(key, n: int) -> np.ndarray:
    """A 1-D list / numpy array / LongTensor of positions in [-n, n) -> int64 array in [0, n)."""
    if isinstance(key, torch.Tensor):
        key = key.detach().cpu().numpy()
    idx = np.asarray(key)
    if idx.ndim != 1 or not (idx.dtype.kind in "iu" or idx.size == 0):
        raise IndexError(f"LazySamples index: use a slice, an int or 1-D integer indices, not {idx.dtype} {idx.shape}")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"LazySamples index out of range for {n} rows")
    return np.where(idx < 0, idx + n, idx)


# ----------------------------------------------------------------------------- lazy rows


class LazySamples:
    """Rows ``rows`` of the input or output array of a data file, read on demand.

    ``path``/``options`` (open_data keyword arguments), ``role`` ("input" or
    "output"), ``space_step`` and ``time_step`` are the selection load_split
    applies; ``rows`` are stored sample indices (default all). Values are
    float32 in the channel-last layout (n, *grid, [T], C), bit-identical to the
    loaded tensor; an input without a time axis beside an output with one is
    broadcast along time (an expanded view).
    """

    dtype = torch.float32

    def __init__(self, path, role: str, rows=None, *, options=None, space_step: int = 1, time_step: int = 1):
        if role not in ("input", "output"):
            raise ValueError(f"role {role!r}: use 'input' or 'output'")
        self.path = os.path.abspath(os.fspath(path))
        self.options = tuple(sorted((options or {}).items()))
        self.role, self.space_step, self.time_step = role, int(space_step), int(time_step)
        array, src = self._array()
        n = array.n
        self.rows = _compact(range(n) if rows is None else rows)
        if len(self.rows) and (_bounds(self.rows)[0] < 0 or _bounds(self.rows)[1] >= n):
            raise IndexError(f"LazySamples rows out of range for the {n} samples of {path}")
        self.row_shape = tuple(array.shape[1:])  # per row as stored: (*grid, [T], C)
        out = src.output.stride_time(time_step) if time_step > 1 and src.output.has_time else src.output
        broadcast = role == "input" and not array.has_time and out.has_time
        self.broadcast_times = out.grid_shape[-1] if broadcast else None

    def _array(self):
        return _lazy_array(self.path, self.options, self.role, self.space_step, self.time_step)

    def _with_rows(self, rows) -> LazySamples:
        new = object.__new__(LazySamples)
        new.__dict__.update(self.__dict__)
        new.rows = _compact(rows)
        return new

    # -- shape -----------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        """(n, *grid, [T], C): the shape of the loaded tensor."""
        row = self.row_shape
        if self.broadcast_times is not None:
            row = row[:-1] + (self.broadcast_times, row[-1])
        return (len(self.rows),) + row

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def nbytes_in_memory(self) -> int:
        """Bytes that loading these rows takes (float32; a broadcast input counted before broadcasting)."""
        return len(self.rows) * math.prod(self.row_shape) * 4

    def __repr__(self) -> str:
        return f"LazySamples({self.path!r}, {self.role!r}, shape={self.shape})"

    # -- selection ---------------------------------------------------------------
    def _file_rows(self, key) -> range | np.ndarray:
        """Stored row indices selected by ``key`` (slice, int, or 1-D indices), in key order."""
        if isinstance(key, slice):
            return self.rows[key]
        idx = _as_index(key, len(self.rows))
        if isinstance(self.rows, range):
            return self.rows.start + idx * self.rows.step
        return self.rows[idx]

    def subset(self, indices) -> LazySamples:
        """These samples restricted to ``indices`` (positions: range, slice, list, array, tensor); reads nothing."""
        return self._with_rows(self._file_rows(indices))

    def __getitem__(self, key) -> torch.Tensor:
        """Rows ``key`` as a float32 CPU tensor, equal to ``loaded_tensor[key]``."""
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return self[[int(key)]][0]
        rows = self._file_rows(key)
        array, _ = self._array()
        if tuple(array.shape[1:]) != self.row_shape or (len(rows) and _bounds(rows)[1] >= array.n):
            raise UserInputError(f"data file {self.path} changed on disk while in use; reload the data")
        t = torch.from_numpy(_read_rows(array, rows))
        if self.broadcast_times is not None:
            t = t.unsqueeze(-2).expand(*t.shape[:-1], self.broadcast_times, t.shape[-1])
        return t


def _read_rows(array, rows) -> np.ndarray:
    """Stored rows ``rows`` (any order, repeats allowed) of a LazyArray: float32 (len(rows), *row).

    Reads the sorted unique rows in contiguous runs (rows less than _GAP_BYTES
    apart share a read, the gap discarded; no read exceeds _BLOCK_BYTES), then
    reorders.
    """
    row_shape = tuple(array.shape[1:])
    if isinstance(rows, range) and rows.step == 1:
        unique, inverse = np.arange(rows.start, rows.stop, dtype=np.int64), None
    else:
        unique, inverse = np.unique(np.asarray(rows, dtype=np.int64), return_inverse=True)
        if len(unique) == len(rows) and np.array_equal(unique, rows):
            inverse = None  # already sorted and unique
    row_bytes = max(1, math.prod(row_shape) * 4)
    block = max(1, _BLOCK_BYTES // row_bytes)
    runs = np.split(unique, np.nonzero(np.diff(unique) > _GAP_BYTES // row_bytes + 1)[0] + 1) if len(unique) else []
    parts = [run[b : b + block] for run in runs for b in range(0, len(run), block)]
    if len(parts) == 1 and parts[0][-1] - parts[0][0] + 1 == len(unique):
        out = array.read(int(unique[0]), int(unique[-1]) + 1)  # one exact read: no copy
    else:
        out, pos = np.empty((len(unique),) + row_shape, dtype=np.float32), 0
        for part in parts:
            start, stop = int(part[0]), int(part[-1]) + 1
            data = array.read(start, stop)
            out[pos : pos + len(part)] = data if stop - start == len(part) else data[part - start]
            pos += len(part)
    return out if inverse is None else out[inverse.ravel()]


@dataclass
class StreamingSplit:
    """Like ``SplitData``, with LazySamples in place of the train/test tensors (``streaming = True``)."""

    train_x: LazySamples
    train_y: LazySamples
    test_x: LazySamples
    test_y: LazySamples
    grid_shape: tuple[int, ...]
    problem: str | None
    attrs: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)
    val_x: LazySamples | None = None
    val_y: LazySamples | None = None
    streaming = True

    @property
    def resolution(self) -> int:
        return self.grid_shape[0]


# ----------------------------------------------------------------------------- batches


class _Batches(torch.utils.data.Dataset):
    """Item i: the whole batch ``start_batch + i`` of ``order`` as (x[idx], y[idx])."""

    def __init__(self, x, y, order: torch.Tensor, batch_size: int, start_batch: int):
        self.x, self.y, self.order = x, y, order
        self.batch_size, self.start_batch = batch_size, start_batch

    def __len__(self) -> int:
        return max(0, math.ceil(len(self.order) / self.batch_size) - self.start_batch)

    def __getitem__(self, i: int):
        b = self.start_batch + i
        idx = self.order[b * self.batch_size : (b + 1) * self.batch_size]
        return self.x[idx], self.y[idx]


def iterate_batches(
    x, y, order, batch_size: int, start_batch: int = 0, *, num_workers: int = 0, pin_memory: bool = False
):
    """Yield (xb, yb) CPU tensors for rows ``order[b*batch_size:(b+1)*batch_size]``, b = start_batch, ...

    ``x``, ``y``: tensors (n, ...) or LazySamples; ``order``: 1-D LongTensor of
    row positions (a permutation); the last batch may be short. Tensors are
    indexed directly; LazySamples are read by a DataLoader with
    ``num_workers`` worker processes (prefetching; each opens the file
    itself), pinned when ``pin_memory``. Same batches either way.
    """
    order = torch.as_tensor(order, dtype=torch.long).cpu()
    batches = _Batches(x, y, order, int(batch_size), int(start_batch))
    if not isinstance(x, LazySamples) and not isinstance(y, LazySamples):
        for i in range(len(batches)):
            yield batches[i]
        return
    loader = torch.utils.data.DataLoader(
        batches,
        batch_size=None,
        shuffle=False,
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=2 if num_workers else None,
    )
    for xb, yb in loader:  # noqa: UP028 - each batch re-packed as an (x, y) tuple
        yield xb, yb


def iterate_chunks(x, y, batch_size: int):
    """Yield (x[s:s+batch_size], y[s:s+batch_size]) for s = 0, batch_size, ... (evaluation order)."""
    for s in range(0, len(x), int(batch_size)):
        yield x[s : s + batch_size], y[s : s + batch_size]
