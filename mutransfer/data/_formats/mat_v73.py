"""MATLAB v7.3 .mat files: HDF5 with arrays stored column-major (read back transposed)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from mutransfer.data._formats.base import DataFormat, DataSource, Probe
from mutransfer.data._formats.common import (
    Options,
    apply_times,
    choose_keys,
    open_hdf5,
    plain_array,
    trailing_time_axes,
    validate,
)
from mutransfer.data._hdf5_io import decode_attr
from mutransfer.errors import UserInputError

NAME = "mat-v7.3"
TITLE = "MATLAB v7.3 .mat (HDF5, arrays stored transposed)"
HEADER = b"MATLAB 7.3 MAT-file"


def detect(probe: Probe) -> bool:
    """HDF5 with the 512-byte "MATLAB 7.3 MAT-file" user block or `MATLAB_class` attributes."""
    f = probe.h5
    if f is None:
        if probe.head.startswith(HEADER):
            raise UserInputError(
                f"data file {probe.path} has a MATLAB 7.3 header but no HDF5 content; the file is damaged"
            )
        return False
    return probe.head.startswith(HEADER) or any("MATLAB_class" in f[k].attrs for k in probe.root_datasets)


def open_source(p: Path, opts: Options) -> DataSource:
    return open_hdf5(p, lambda f: _source(p, f, opts))


def _source(p: Path, f: h5py.File, opts: Options) -> DataSource:
    datasets = {
        k: v
        for k, v in f.items()
        if isinstance(v, h5py.Dataset)
        and v.dtype.kind in "fiub"
        and not k.startswith("#")
        and decode_attr(v.attrs.get("MATLAB_class", "double")) not in ("char", "cell", "struct")
    }
    # MATLAB stores column-major: the HDF5 shape is the MATLAB size reversed
    shapes = {k: tuple(reversed(v.shape)) for k, v in datasets.items()}
    names = [k for k, s in shapes.items() if len(s) >= 1]
    ik, ok = choose_keys(p, names, opts, None)
    it, ot = trailing_time_axes(p, ik, ok, shapes, opts)
    inp = plain_array(datasets[ik], ik, it, reversed_axes=True)
    out = plain_array(datasets[ok], ok, ot, reversed_axes=True)
    inp, out = apply_times(p, inp, out, opts, trajectory_defaults=ik == ok)
    validate(p, inp, out)
    grid = {}
    if "t" in datasets and "t" not in (ik, ok):
        grid["t"] = np.asarray(datasets["t"][()], dtype=np.float64).ravel()
    desc = f"MATLAB v7.3 file with arrays {', '.join(f'{k} {shapes[k]}' for k in names)} (read transposed)"
    return DataSource(
        str(p),
        NAME,
        inp,
        out,
        ik,
        ok,
        description=desc,
        grid=grid,
        arrays={k: {"shape": list(shapes[k]), "dtype": str(v.dtype)} for k, v in datasets.items()},
        _file=f,
    )


FORMAT = DataFormat(NAME, TITLE, detect, open_source)
