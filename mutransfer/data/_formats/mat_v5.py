"""MATLAB v5 .mat files (scipy.io.loadmat): named arrays in natural order, loaded whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mutransfer.data._formats.base import DataFormat, DataSource, Probe
from mutransfer.data._formats.common import Options, apply_times, choose_keys, plain_array, trailing_time_axes, validate
from mutransfer.errors import UserInputError

NAME = "mat-v5"
TITLE = "MATLAB v5 .mat"
HEADER = b"MATLAB 5.0 MAT-file"
_NUMERIC_CLASSES = {
    "double",
    "single",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "logical",
}


def detect(probe: Probe) -> bool:
    """The 128-byte header starts "MATLAB 5.0 MAT-file"."""
    return probe.head.startswith(HEADER)


def _unreadable(p: Path, exc: Exception) -> UserInputError:
    return UserInputError(f"data file {p} could not be read as a MATLAB v5 file ({str(exc).splitlines()[0]})")


def open_source(p: Path, opts: Options) -> DataSource:
    import scipy.io  # noqa: PLC0415 -- deferred: scipy, only for MATLAB v5 files; other formats must not pay for it

    try:
        info = scipy.io.whosmat(p)
    except Exception as exc:  # corrupt file
        raise _unreadable(p, exc) from None
    shapes = {name: tuple(shape) for name, shape, cls in info if cls in _NUMERIC_CLASSES}
    names = list(shapes)
    ik, ok = choose_keys(p, names, opts, None)
    try:
        loaded = scipy.io.loadmat(p, variable_names=sorted({ik, ok}))
    except Exception as exc:
        raise _unreadable(p, exc) from None
    arrays = {k: np.asarray(loaded[k]) for k in {ik, ok}}
    it, ot = trailing_time_axes(p, ik, ok, {k: v.shape for k, v in arrays.items()}, opts)
    inp = plain_array(arrays[ik], ik, it)
    out = plain_array(arrays[ok], ok, ot)
    inp, out = apply_times(p, inp, out, opts, trajectory_defaults=ik == ok)
    validate(p, inp, out)
    grid = {}
    if "t" in shapes and "t" not in (ik, ok):
        t = np.asarray(scipy.io.loadmat(p, variable_names=["t"])["t"], dtype=np.float64).ravel()
        grid["t"] = t
    desc = f"MATLAB v5 file with arrays {', '.join(f'{k} {shapes[k]}' for k in names)}"
    return DataSource(
        str(p),
        NAME,
        inp,
        out,
        ik,
        ok,
        description=desc,
        grid=grid,
        arrays={n: {"shape": list(s), "dtype": cls} for n, s, cls in info},
    )


FORMAT = DataFormat(NAME, TITLE, detect, open_source, read_whole="MATLAB v5 .mat")
