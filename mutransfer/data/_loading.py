"""Train/test splits from data files (any format of ``readers``), with downsampling by striding.

Two grid kinds:
* periodic (Burgers, Navier-Stokes): x_j = j/N, j < N. Resolution N -> M needs N % M == 0;
  keeps every (N/M)-th point starting at x = 0.
* node grid including the boundary (Darcy): x_i = i/(S-1). S -> R needs
  (S-1) % (R-1) == 0; keeps every ((S-1)/(R-1))-th node, both boundaries included.

A time axis (recorded times t_1..t_T, t = 0 being the input) is strided from
the end, so the final time is always kept: T -> T/s keeps t_s, t_2s, ..., t_T.

Splits larger than memory are streamed (``stream``/``max_memory`` of
``load_split``; see ``mutransfer.data._streaming``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from mutransfer.data._problem_facts import FACTS, get_facts, grid_problems, periodic_grids
from mutransfer.data._readers import open_data
from mutransfer.data._streaming import (
    NOT_STREAMABLE,
    STREAM_MEMORY_FRACTION,
    LazySamples,
    StreamingSplit,
    available_memory,
    check_streamable,
    should_stream,
)
from mutransfer.errors import UserInputError

__all__ = [
    "downsample",
    "valid_resolutions",
    "load_split",
    "SplitData",
    "StreamingSplit",
    "STREAM_MEMORY_FRACTION",
    "should_stream",
]

#: grid problem -> whether its grid is periodic (x_j = j/N) rather than a boundary-inclusive node grid
_BLOCK_BYTES = 64 * 2**20
_SCAN_BYTES = 4 * 2**20


def _positive_int(name: str, value, example: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserInputError(f"{name} {value!r}: must be a positive integer; try {example}")
    return int(value)


def valid_resolutions(from_resolution: int, *, periodic: bool) -> list[int]:
    """All resolutions (>= 2) that data at ``from_resolution`` can be strided down to, ascending."""
    base = from_resolution if periodic else from_resolution - 1
    divisors = [d for d in range(1, base + 1) if base % d == 0]
    res = divisors if periodic else [d + 1 for d in divisors]
    return [r for r in res if r >= 2]


def stride(from_resolution: int, to_resolution: int, periodic: bool) -> int:
    """The step that strides a grid of ``from_resolution`` points to ``to_resolution`` (one-line error if none)."""
    f = _positive_int("from_resolution", from_resolution, 1024)
    t = _positive_int("resolution", to_resolution, 64)
    if t == f:
        return 1
    valid = valid_resolutions(f, periodic=periodic)
    below = [r for r in valid if r < t][-1:]
    above = [r for r in valid if t < r <= f][:1]
    options = " or ".join(str(r) for r in above + below) or str(f)
    if t < 2:
        raise UserInputError(f"resolution {t}: must be at least 2; try {options}")
    if t > f:
        raise UserInputError(f"resolution {t}: cannot upsample data generated at resolution {f}; try {options}")
    if periodic and f % t:
        raise UserInputError(
            f"resolution {t}: periodic-grid data (Burgers, Navier-Stokes) needs generated_resolution ({f}) divisible by "
            f"resolution; try {options}"
        )
    if not periodic and (f - 1) % (t - 1):
        raise UserInputError(
            f"resolution {t}: node-grid (Darcy) data needs (generated_resolution-1) ({f - 1}) divisible by "
            f"(resolution-1); try {options}"
        )
    return f // t if periodic else (f - 1) // (t - 1)


def downsample(array, from_resolution: int, to_resolution: int, *, periodic: bool):
    """Stride ``array`` of shape (n, *grid) (every axis after the first has length
    ``from_resolution``) to (n, *[to_resolution] * len(grid)). Works on numpy
    arrays and torch tensors; returns a strided view when possible.
    """
    step = stride(from_resolution, to_resolution, periodic)
    shape = tuple(array.shape)
    if len(shape) < 2 or any(s != from_resolution for s in shape[1:]):
        raise UserInputError(
            f"array shape {shape}: expected (n, *grid) with every grid axis of length {from_resolution}"
        )
    if step == 1:
        return array
    # node grids: indices 0, step, ..., S-1 (both boundaries); periodic: 0, step, ..., N-step
    index = (slice(None),) + (slice(0, from_resolution, step),) * (len(shape) - 1)
    return array[index]


@dataclass
class SplitData:
    """Train/test tensors, float32, channel-last: (n, *grid_shape, 1).

    ``val_x``/``val_y``: a validation split carved from the training samples
    (:func:`mutransfer.data._validation.carve_validation`), evaluated beside the test split; None without one.
    """

    #: loaded in memory (``StreamingSplit`` reads rows on demand instead)
    streaming = False

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    grid_shape: tuple[int, ...]
    problem: str | None
    attrs: dict = field(default_factory=dict)
    #: coordinates per grid axis after downsampling, e.g. {"x": (N,)} float64 ("t" for a time axis)
    grid: dict = field(default_factory=dict)
    #: where the arrays came from: format, input/output keys and shapes, time selections
    source: dict = field(default_factory=dict)
    val_x: torch.Tensor | None = None
    val_y: torch.Tensor | None = None

    @property
    def resolution(self) -> int:
        return self.grid_shape[0]


def _to_tensor(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))


def _read_block_rows(array, start: int, stop: int, path, *, keep: bool = True) -> np.ndarray | None:
    """Rows [start, stop) of a readers.LazyArray, read in blocks of samples (bounded memory).

    Every block is checked for NaN/Inf (:func:`_check_finite`); ``keep=False`` only
    checks (a streamed split is scanned once at load time) and returns None.
    """
    per_sample = max(1, int(np.prod(array.shape[1:])) * 4)
    block = max(1, (_BLOCK_BYTES if keep else _SCAN_BYTES) // per_sample)  # a scan stays small: streaming caps memory
    out = np.empty((stop - start,) + tuple(array.shape[1:]), dtype=np.float32) if keep else None
    for b in range(start, stop, block):
        e = min(b + block, stop)
        rows = array.read(b, e)
        _check_finite(rows, b, array.name, path)
        if keep:
            out[b - start : e - start] = rows
    return out


def _check_finite(rows: np.ndarray, start: int, name: str, path) -> None:
    """Refuse non-finite values, one line naming the array, the first bad sample and the fix."""
    finite = np.isfinite(rows.reshape(len(rows), -1)).all(axis=1)
    if finite.all():
        return
    i = int(np.argmin(finite))
    kind = "NaN" if np.isnan(rows[i]).any() else "Inf"
    raise UserInputError(
        f"data file {path}: array {name!r} holds {kind} values in sample {start + i} (and {int((~finite).sum()) - 1} "
        f"more of samples {start}..{start + len(rows) - 1}); drop or repair the non-finite samples before training"
    )


def _coords(grid: dict, name: str, array, axis, sel) -> np.ndarray | None:
    coords = grid.get(name)
    if coords is None or axis is None:
        return None
    coords = np.asarray(coords, dtype=np.float64).ravel()
    if coords.shape[0] != array.source.shape[axis]:
        return None
    return coords[np.asarray(sel)] if isinstance(sel, range) else None


def _check_problem_dims(path, problem: str, grid_shape: tuple) -> None:
    dim = get_facts(problem).dim
    if len(grid_shape) == dim + 1 and grid_shape[0] <= 4 < min(grid_shape[1:]):
        # (n, C, *grid) with a few channels first: PyTorch's layout, not a grid axis
        moved = ", ".join(str(s) for s in (*grid_shape[1:], grid_shape[0]))
        raise UserInputError(
            f"data file {path} looks channel-first: its samples are {tuple(grid_shape)}, {grid_shape[0]} channel(s) "
            f"before a {dim}-D grid; mutransfer reads channel-last (n, *grid[, C]): save x.movedim(1, -1) "
            f"(samples {moved}), or x[:, 0] for one channel"
        )
    if len(grid_shape) != dim:
        fits = [name for name, f in FACTS.items() if f.dim == len(grid_shape) and f.kind == "grid"]
        fix = f"pass problem {' or '.join(fits)}" if fits else "select other arrays or times"
        raise UserInputError(
            f"data file {path} gives a {len(grid_shape)}-dimensional grid {tuple(grid_shape)} but problem "
            f"{problem!r} trains a {dim}-D grid operator; {fix} (--problem), or pick times with --output-time"
        )


def load_split(
    path,
    *,
    n_train: int,
    n_test: int,
    resolution: int | None = None,
    time_resolution: int | None = None,
    problem: str | None = None,
    input_key: str | None = None,
    output_key: str | None = None,
    field: str | None = None,
    input_time=None,
    output_time=None,
    stream: bool | None = None,
    max_memory: int | None = None,
) -> SplitData | StreamingSplit:
    """Load the first ``n_train`` samples as train and the last ``n_test`` as test.

    ``path`` may be any format of ``mutransfer.data._readers`` (the project's
    HDF5, .mat v5/v7.3, PDEBench, The Well, .pt), detected from its content;
    ``input_key``, ``output_key``, ``field``, ``input_time``, ``output_time``
    choose the arrays and times (see readers). ``problem`` names the registry
    problem the data is for: its grid kind decides how files without a
    ``problem`` attribute are downsampled, and the grid's rank must match its
    FNO dimension. resolution: target spatial grid size (None: as stored),
    reached by striding (see ``downsample``). time_resolution: number of
    output times kept, by striding back from the final time (None: all).

    Returns SplitData with float32 tensors of shape (n, *grid, C) (C = 1 for
    scalar fields). When the output has a time axis and the input has none
    (Navier-Stokes: w0 -> w(x, y, t)), the input is broadcast along the time
    axis (an expanded view, no copy), so both are (n, X, Y, T, C).

    stream: True returns a ``StreamingSplit`` (LazySamples read on demand from
    HDF5-based files; .mat v5 and .pt cannot be streamed), False loads; None
    (default) streams when the split's float32 bytes (n_train + n_test samples
    of input and output, the input before broadcasting) exceed ``max_memory``
    bytes, or STREAM_MEMORY_FRACTION of the memory available now when
    ``max_memory`` is None (formats that cannot be streamed are then loaded).
    """
    n_train = _positive_int("n_train", n_train, 800)
    n_test = _positive_int("n_test", n_test, 200)
    if stream is not None and not isinstance(stream, bool):
        raise UserInputError(f"stream {stream!r}: use True (stream), False (load) or None (automatic)")
    if max_memory is not None:
        max_memory = _positive_int("max_memory", max_memory, 8 * 2**30)
    reader_options = dict(
        input_key=input_key, output_key=output_key, field=field, input_time=input_time, output_time=output_time
    )
    space_step = time_step = 1
    with open_data(path, **reader_options) as src:
        attrs = dict(src.attrs)
        file_problem = src.problem
        inp, out = src.input, src.output
        n_total = src.n_samples
        if n_train + n_test > n_total:
            raise UserInputError(
                f"n_train {n_train} + n_test {n_test} = {n_train + n_test} exceeds the {n_total} samples "
                f"in data file {path}; lower n_train or n_test, or generate more samples"
            )
        if problem is not None:  # the rank first: striding and time selections keep it
            _check_problem_dims(path, problem, out.grid_shape)
        space = out.space_shape
        native = space[0]
        grid_problem = file_problem if file_problem in periodic_grids() else problem
        if resolution is not None:
            res = _positive_int("resolution", resolution, native)
            if any(n != res for n in space):
                if len(set(space)) != 1:
                    raise UserInputError(
                        f"resolution {res}: data file {path} has a non-square grid {space}, which is only "
                        "loaded as stored; drop the resolution"
                    )
                periodic = periodic_grids().get(grid_problem)
                if periodic is None:
                    raise UserInputError(
                        f"data file {path} has problem {file_problem or grid_problem!r}, so its grid type is unknown and it cannot "
                        f"be downsampled; use one of {', '.join(grid_problems())} data (or name the problem) or "
                        f"resolution {native}"
                    )
                space_step = stride(native, res, periodic)
                inp, out = inp.stride_space(space_step), out.stride_space(space_step)
        if time_resolution is not None:
            tr = _positive_int("time_resolution", time_resolution, 16)
            if not out.has_time:
                raise UserInputError(f"time_resolution {tr}: the output of data file {path} has no time axis; drop it")
            n_times = out.grid_shape[-1]
            if tr != n_times:
                options = [d for d in range(1, n_times + 1) if n_times % d == 0]
                if tr > n_times or n_times % tr:
                    below = [d for d in options if d < tr][-1:]
                    above = [d for d in options if d > tr][:1]
                    raise UserInputError(
                        f"time_resolution {tr}: the {n_times} output times can only be strided to a divisor of "
                        f"{n_times}; try {' or '.join(map(str, above + below))}"
                    )
                time_step = n_times // tr
                out = out.stride_time(time_step)
        nbytes = (n_train + n_test) * 4 * (int(np.prod(inp.shape[1:])) + int(np.prod(out.shape[1:])))
        if stream is None:
            available = available_memory() if max_memory is None else None
            stream = should_stream(nbytes, max_memory, available) and src.format not in NOT_STREAMABLE
        if stream:
            check_streamable(path, src.format)
            for array in (inp, out):  # NaN/Inf refused now, not in the middle of training
                _read_block_rows(array, 0, n_train, path, keep=False)
                _read_block_rows(array, n_total - n_test, n_total, path, keep=False)
            train, test = range(n_train), range(n_total - n_test, n_total)
            lazy = {
                (role, name): LazySamples(
                    path, role, rows, options=reader_options, space_step=space_step, time_step=time_step
                )
                for role in ("input", "output")
                for name, rows in (("train", train), ("test", test))
            }
        else:
            train_x = _read_block_rows(inp, 0, n_train, path)
            train_y = _read_block_rows(out, 0, n_train, path)
            test_x = _read_block_rows(inp, n_total - n_test, n_total, path)
            test_y = _read_block_rows(out, n_total - n_test, n_total, path)
        grid = {}
        for i, name in enumerate(("x", "y", "z")[: len(out.space_axes)]):
            c = _coords(src.grid, name, out, out.space_axes[i], out.space_ranges[i])
            if c is not None:
                grid[name] = c
        if out.has_time:
            c = _coords(src.grid, "t", out, out.time_axis, out.time_range)
            if c is not None:
                grid["t"] = c
        source = {
            "format": src.format,
            "input_key": src.input_key,
            "output_key": src.output_key,
            "input_shape": list(inp.shape),
            "output_shape": list(out.shape),
            "input_time": None if inp.time_axis is None else _plain_index(inp.time_range),
            "output_time": None if out.time_axis is None else _plain_index(out.time_range),
        }
    problem_name = file_problem or problem or src.problem_guess
    if stream:
        return StreamingSplit(
            train_x=lazy["input", "train"],
            train_y=lazy["output", "train"],
            test_x=lazy["input", "test"],
            test_y=lazy["output", "test"],
            grid_shape=tuple(out.grid_shape),
            problem=problem_name,
            attrs=attrs,
            grid=grid,
            source=source,
        )
    tensors = [_to_tensor(a) for a in (train_x, train_y, test_x, test_y)]
    if out.has_time and not inp.has_time:
        n_times = out.grid_shape[-1]
        for i in (0, 2):
            x = tensors[i]
            tensors[i] = x.unsqueeze(-2).expand(*x.shape[:-1], n_times, x.shape[-1])
    return SplitData(
        train_x=tensors[0],
        train_y=tensors[1],
        test_x=tensors[2],
        test_y=tensors[3],
        grid_shape=tuple(out.grid_shape),
        problem=problem_name,
        attrs=attrs,
        grid=grid,
        source=source,
    )


def _plain_index(sel):
    if isinstance(sel, range):
        return {"start": sel.start, "stop": sel.stop, "step": sel.step}
    return int(sel)
