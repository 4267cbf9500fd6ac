"""Any other HDF5 file: its numeric root datasets, used as named arrays (n, ...)."""

from __future__ import annotations

from pathlib import Path

import h5py

from mutransfer.data._formats.base import DataFormat, DataSource, Probe
from mutransfer.data._formats.common import (
    Options,
    apply_times,
    choose_keys,
    hdf5_datasets_info,
    open_hdf5,
    plain_array,
    trailing_time_axes,
    validate,
)
from mutransfer.data._hdf5_io import read_attrs

NAME = "hdf5"
TITLE = "HDF5 (root datasets)"


def detect(probe: Probe) -> bool:
    """Every HDF5 file (registered after the specific HDF5 layouts)."""
    return probe.h5 is not None


def open_source(p: Path, opts: Options) -> DataSource:
    return open_hdf5(p, lambda f: _source(p, f, opts))


def _source(p: Path, f: h5py.File, opts: Options) -> DataSource:
    datasets = {k: v for k, v in f.items() if isinstance(v, h5py.Dataset) and v.dtype.kind in "fiub" and v.ndim >= 1}
    names = list(datasets)
    ik, ok = choose_keys(p, names, opts, None)
    shapes = {k: tuple(v.shape) for k, v in datasets.items()}
    it, ot = trailing_time_axes(p, ik, ok, shapes, opts)
    inp = plain_array(datasets[ik], ik, it)
    out = plain_array(datasets[ok], ok, ot)
    inp, out = apply_times(p, inp, out, opts, trajectory_defaults=ik == ok)
    validate(p, inp, out)
    desc = f"HDF5 file with root arrays {', '.join(f'{k} {shapes[k]}' for k in names)}"
    return DataSource(
        str(p),
        NAME,
        inp,
        out,
        ik,
        ok,
        description=desc,
        attrs=read_attrs(f),
        arrays=hdf5_datasets_info(datasets),
        _file=f,
    )


FORMAT = DataFormat(NAME, TITLE, detect, open_source)
