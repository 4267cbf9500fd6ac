"""PDEBench HDF5, single-array layout: root `tensor` (N, t, x[, y, z]) and `x-coordinate`/`t-coordinate`."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from mutransfer.data._formats.base import DataFormat, DataSource, LazyArray, Probe
from mutransfer.data._formats.common import (
    SPACE_NAMES,
    Options,
    apply_times,
    choose_keys,
    hdf5_datasets_info,
    open_hdf5,
    validate,
)
from mutransfer.data._hdf5_io import read_attrs
from mutransfer.errors import UserInputError

NAME = "pdebench"
TITLE = "PDEBench HDF5 (single arrays)"


def detect(probe: Probe) -> bool:
    """HDF5 with a root `tensor` and/or `*-coordinate` datasets."""
    root = probe.root_datasets
    return "tensor" in root or any(k.endswith("-coordinate") for k in root)


def open_source(p: Path, opts: Options) -> DataSource:
    return open_hdf5(p, lambda f: _source(p, f, opts))


def _source(p: Path, f: h5py.File, opts: Options) -> DataSource:
    datasets = {k: v for k, v in f.items() if isinstance(v, h5py.Dataset)}
    coords = {
        k.split("-")[0]: np.asarray(v[()], dtype=np.float64).ravel()
        for k, v in datasets.items()
        if k.endswith("-coordinate")
    }
    fields = {
        k: v for k, v in datasets.items() if not k.endswith("-coordinate") and v.dtype.kind in "fiub" and v.ndim >= 2
    }
    n_space = sum(1 for c in SPACE_NAMES if c in coords)
    if n_space == 0:
        ref = (
            fields["tensor"] if "tensor" in fields else (max(fields.values(), key=lambda v: v.ndim) if fields else None)
        )
        n_space = max(1, ref.ndim - 2) if ref is not None else 1
    default = "tensor" if "tensor" in fields else (next(iter(fields)) if len(fields) == 1 else None)
    ik, ok = choose_keys(p, list(fields), opts, default)

    def lazy(name):
        ds = fields[name]
        if ds.ndim == n_space + 2:
            return LazyArray(ds, name, space_axes=range(2, ds.ndim), time_axis=1)
        if ds.ndim == n_space + 1:
            return LazyArray(ds, name, space_axes=range(1, ds.ndim))
        raise UserInputError(
            f"{p}: array {name!r} has shape {ds.shape}; PDEBench arrays with {n_space} space dims are "
            f"(N, t, {', '.join(SPACE_NAMES[:n_space])}) or (N, {', '.join(SPACE_NAMES[:n_space])})"
        )

    inp, out = apply_times(p, lazy(ik), lazy(ok), opts, trajectory_defaults=True)
    validate(p, inp, out)
    desc = f"PDEBench file with arrays {', '.join(f'{k} {tuple(v.shape)}' for k, v in fields.items())}"
    return DataSource(
        str(p),
        NAME,
        inp,
        out,
        ik,
        ok,
        description=desc,
        grid=coords,
        attrs=read_attrs(f),
        arrays=hdf5_datasets_info(datasets),
        _file=f,
    )


FORMAT = DataFormat(NAME, TITLE, detect, open_source)
