"""Train/test splits from schema files, with downsampling by striding.

Two grid kinds:
* periodic (Burgers): x_j = j/N, j < N. Resolution N -> M needs N % M == 0;
  keeps every (N/M)-th point starting at x = 0.
* node grid including the boundary (Darcy): x_i = i/(S-1). S -> R needs
  (S-1) % (R-1) == 0; keeps every ((S-1)/(R-1))-th node, both boundaries included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from mutransfer.errors import UserInputError
from mutransfer.data.hdf5_io import PROBLEMS, _read_attrs, open_dataset

__all__ = ["downsample", "valid_resolutions", "load_split", "SplitData", "PERIODIC"]

#: problem -> whether its grid is periodic (x_j = j/N) rather than a boundary-inclusive node grid
PERIODIC = {"burgers": True, "darcy": False}
_BLOCK_BYTES = 64 * 2**20


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


def _stride(from_resolution: int, to_resolution: int, periodic: bool) -> int:
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
        raise UserInputError(
            f"resolution {t}: cannot upsample data generated at resolution {f}; try {options}"
        )
    if periodic and f % t:
        raise UserInputError(
            f"resolution {t}: periodic (Burgers) data needs generated_resolution ({f}) divisible by "
            f"resolution; try {options}"
        )
    if not periodic and (f - 1) % (t - 1):
        raise UserInputError(
            f"resolution {t}: Darcy data needs (generated_resolution-1) ({f - 1}) divisible by "
            f"(resolution-1); try {options}"
        )
    return f // t if periodic else (f - 1) // (t - 1)


def downsample(array, from_resolution: int, to_resolution: int, *, periodic: bool):
    """Stride ``array`` of shape (n, *grid) (every axis after the first has length
    ``from_resolution``) to (n, *[to_resolution] * len(grid)). Works on numpy
    arrays and torch tensors; returns a strided view when possible.
    """
    step = _stride(from_resolution, to_resolution, periodic)
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
    """Train/test tensors, float32, channel-last: (n, *grid_shape, 1)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    grid_shape: tuple[int, ...]
    problem: str | None
    attrs: dict = field(default_factory=dict)
    #: coordinates per grid axis after downsampling, e.g. {"x": (N,)} float64
    grid: dict = field(default_factory=dict)

    @property
    def resolution(self) -> int:
        return self.grid_shape[0]


def _read_rows(ds, start: int, stop: int, native: int, resolution: int, periodic) -> np.ndarray:
    """Rows [start, stop) of ``ds`` downsampled, read in blocks (bounded memory)."""
    per_sample = max(1, int(np.prod(ds.shape[1:])) * ds.dtype.itemsize)
    block = max(1, _BLOCK_BYTES // per_sample)
    out = None
    for b in range(start, stop, block):
        chunk = np.asarray(ds[b : min(b + block, stop)])
        if resolution != native:
            chunk = downsample(chunk, native, resolution, periodic=periodic)
        if out is None:
            out = np.empty((stop - start,) + chunk.shape[1:], dtype=np.float32)
        out[b - start : b - start + chunk.shape[0]] = chunk
    return out


def _to_tensor(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).unsqueeze(-1)


def load_split(path, *, n_train: int, n_test: int, resolution: int | None = None) -> SplitData:
    """Load the first ``n_train`` samples as train and the last ``n_test`` as test.

    resolution: target grid size (None: as stored), reached by striding (see
    ``downsample``). Returns SplitData with float32 tensors of shape
    (n, *grid, 1).
    """
    n_train = _positive_int("n_train", n_train, 800)
    n_test = _positive_int("n_test", n_test, 200)
    with open_dataset(path) as f:
        attrs = _read_attrs(f)
        problem = attrs.get("problem")
        xi, yo = f["input"], f["output"]
        n_total = xi.shape[0]
        native = xi.shape[1]
        if n_train + n_test > n_total:
            raise UserInputError(
                f"n_train {n_train} + n_test {n_test} = {n_train + n_test} exceeds the {n_total} samples "
                f"in data file {path}; lower n_train or n_test, or generate more samples"
            )
        res = native if resolution is None else _positive_int("resolution", resolution, native)
        periodic = PERIODIC.get(problem)
        if res != native and periodic is None:
            raise UserInputError(
                f"data file {path} has problem {problem!r}, so its grid type is unknown and it cannot be "
                f"downsampled; use one of {', '.join(PROBLEMS)} data or resolution {native}"
            )
        if res != native:
            _stride(native, res, periodic)  # validate before reading anything
        train_x = _read_rows(xi, 0, n_train, native, res, periodic)
        train_y = _read_rows(yo, 0, n_train, native, res, periodic)
        test_x = _read_rows(xi, n_total - n_test, n_total, native, res, periodic)
        test_y = _read_rows(yo, n_total - n_test, n_total, native, res, periodic)
        grid = {}
        if "grid" in f:
            for name, ds in f["grid"].items():
                coords = np.asarray(ds[()], dtype=np.float64)
                if coords.shape == (native,) and res != native:
                    coords = downsample(coords[None], native, res, periodic=periodic)[0]
                grid[name] = coords
    return SplitData(
        train_x=_to_tensor(train_x),
        train_y=_to_tensor(train_y),
        test_x=_to_tensor(test_x),
        test_y=_to_tensor(test_y),
        grid_shape=tuple(train_x.shape[1:]),
        problem=problem,
        attrs=attrs,
        grid=grid,
    )
