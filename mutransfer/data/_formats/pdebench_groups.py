"""PDEBench HDF5, per-sample layout: root groups ("0000", "0001", ...) each holding `data` (t, x[, y], c)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from mutransfer.data._formats.base import DataFormat, DataSource, LazyArray, Probe
from mutransfer.data._formats.common import Options, apply_times, choose_keys, open_hdf5, validate
from mutransfer.data._hdf5_io import read_attrs
from mutransfer.errors import UserInputError

NAME = "pdebench-groups"
TITLE = "PDEBench HDF5 (per-sample groups)"


def detect(probe: Probe) -> bool:
    """HDF5 with only groups at the root, the first of which holds a `data` dataset."""
    groups = probe.root_groups
    if not groups or probe.root_datasets:
        return False
    return isinstance(probe.h5[sorted(groups)[0]].get("data"), h5py.Dataset)


class _GroupStack:
    """Per-sample datasets seen as one array (n, *item_shape)."""

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


def open_source(p: Path, opts: Options) -> DataSource:
    return open_hdf5(p, lambda f: _source(p, f, opts))


def _source(p: Path, f: h5py.File, opts: Options) -> DataSource:
    groups = sorted(k for k, v in f.items() if isinstance(v, h5py.Group))
    first = f[groups[0]]
    names = [k for k, v in first.items() if isinstance(v, h5py.Dataset) and v.dtype.kind in "fiub"]
    ik, ok = choose_keys(p, names, opts, "data" if "data" in names else None)

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

    inp, out = apply_times(p, lazy(ik), lazy(ok), opts, trajectory_defaults=True)
    validate(p, inp, out)
    grid = {}
    if isinstance(first.get("grid"), h5py.Group):
        grid = {
            k: np.asarray(v[()], dtype=np.float64).ravel()
            for k, v in first["grid"].items()
            if isinstance(v, h5py.Dataset)
        }
    desc = f"PDEBench file with {len(groups)} sample groups, {', '.join(f'{k} {first[k].shape}' for k in names)} each"
    return DataSource(
        str(p),
        NAME,
        inp,
        out,
        ik,
        ok,
        description=desc,
        grid=grid,
        attrs=read_attrs(f),
        arrays={f"{groups[0]}/{k}": {"shape": list(first[k].shape), "dtype": str(first[k].dtype)} for k in names},
        _file=f,
    )


FORMAT = DataFormat(NAME, TITLE, detect, open_source)
