"""Readers for the classic operator-learning data formats, selected by file content.

``open_data(path, **options)`` detects the format from the file's bytes and
structure (never from the extension alone) and returns a :class:`DataSource`:
lazily readable input and output arrays in one canonical layout, plus the grid
coordinates, a problem guess and a one-line description. ``load_split`` in
``mutransfer.data._loading`` builds train/test tensors from it, so every command
that loads data accepts every format.

| format            | detected by                                               | arrays |
|-------------------|-----------------------------------------------------------|--------|
| `mutransfer`      | HDF5 with attribute schema="mutransfer-pde" or root `input`/`output` | `input` (n, *grid), `output` (n, *grid[, T]) |
| `mutransfer-points` | HDF5 with attribute schema="mutransfer-points"          | none: point sets are refused here (read them with ``mutransfer.data._pointclouds``) |
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

The formats themselves live in ``mutransfer.data._formats`` (one module each,
listed in ``formats.registry.REGISTRY``); this module is the public entry point.
"""

from __future__ import annotations

from pathlib import Path

from mutransfer.data._formats.base import DataFormat, DataSource, LazyArray, parse_time_spec
from mutransfer.data._formats.common import Options
from mutransfer.data._formats.registry import FORMATS, REGISTRY, find_format

__all__ = [
    "FORMATS",
    "REGISTRY",
    "DataFormat",
    "LazyArray",
    "DataSource",
    "detect_format",
    "open_data",
    "describe",
    "parse_time_spec",
]


def detect_format(path) -> str:
    """The format of ``path`` (a key of FORMATS), from its content; one-line error otherwise."""
    return find_format(path).name


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
    opts = Options.make(input_key, output_key, field, input_time, output_time)
    fmt = find_format(path)
    src = fmt.open(Path(path), opts)
    src.format_name = fmt.title
    return src


def describe(path, **options) -> dict:
    """A JSON-ready description of any supported file (a format's own summary when it has one and no options are given)."""
    fmt = find_format(path)
    if fmt.describe is not None and not any(v is not None for v in options.values()):
        return fmt.describe(path)
    with open_data(path, **options) as src:
        return src.summary()
