"""The Well HDF5: fields in `t0_fields`/`t1_fields`/`t2_fields` (trajectory, time, x, y[, z][, D[, D]])."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from mutransfer.data._formats.base import DataFormat, DataSource, LazyArray, Probe
from mutransfer.data._formats.common import SPACE_NAMES, Options, apply_times, choose_keys, open_hdf5, validate
from mutransfer.data._hdf5_io import read_attrs
from mutransfer.errors import UserInputError

NAME = "the-well"
TITLE = "The Well HDF5"
_FIELD_GROUPS = ("t0_fields", "t1_fields", "t2_fields")


def detect(probe: Probe) -> bool:
    """HDF5 with a `t0_fields`/`t1_fields`/`t2_fields` group and a `dimensions` group."""
    groups = probe.root_groups
    return bool(set(_FIELD_GROUPS) & groups) and "dimensions" in groups


def open_source(p: Path, opts: Options) -> DataSource:
    return open_hdf5(p, lambda f: _source(p, f, opts))


def _source(p: Path, f: h5py.File, opts: Options) -> DataSource:
    attrs = read_attrs(f)
    dims = f["dimensions"]
    n_space = attrs.get("n_spatial_dims")
    spatial = [k for k in SPACE_NAMES if isinstance(dims.get(k), h5py.Dataset)]
    n_space = int(n_space) if isinstance(n_space, (int, float)) else len(spatial)
    fields, order = {}, {}
    for rank, group in enumerate(_FIELD_GROUPS):
        if isinstance(f.get(group), h5py.Group):
            for k, v in f[group].items():
                if isinstance(v, h5py.Dataset):
                    fields[k], order[k] = v, rank
    if not fields:
        raise UserInputError(f"{p}: The Well file has no fields in t0_fields/t1_fields/t2_fields")
    default = next(iter(fields)) if len(fields) == 1 else None
    if default is None and opts.field is None and opts.input_key is None and opts.output_key is None:
        raise UserInputError(
            f"{p}: The Well file has fields {', '.join(sorted(fields))}; pass --field NAME "
            "(or --input-key/--output-key)"
        )
    ik, ok = choose_keys(p, list(fields), opts, default)

    def lazy(name):
        ds, rank = fields[name], order[name]
        a = read_attrs(ds)
        if a.get("sample_varying") is False or a.get("sample_varying") == 0:
            raise UserInputError(f"{p}: field {name!r} is the same for every trajectory; pick a sample-varying field")
        time_varying = not (a.get("time_varying") is False or a.get("time_varying") == 0)
        expected = 1 + int(time_varying) + n_space + rank
        if ds.ndim != expected:
            raise UserInputError(
                f"{p}: field {name!r} has shape {ds.shape}; expected {expected} axes "
                f"(trajectory{', time' if time_varying else ''}, {n_space} space{f', {rank} component' if rank else ''})"
            )
        first_space = 2 if time_varying else 1
        space = range(first_space, first_space + n_space)
        channels = tuple(range(first_space + n_space, ds.ndim))
        return LazyArray(ds, name, space_axes=space, time_axis=1 if time_varying else None, channel_axes=channels)

    inp, out = apply_times(p, lazy(ik), lazy(ok), opts, trajectory_defaults=True)
    validate(p, inp, out)
    grid = {}
    for k in spatial:
        grid[k] = np.asarray(dims[k][()], dtype=np.float64).ravel()
    if isinstance(dims.get("time"), h5py.Dataset):
        grid["t"] = np.asarray(dims["time"][()], dtype=np.float64).ravel()
    name = attrs.get("dataset_name", "")
    desc = f"The Well file{f' {name!r}' if name else ''} with fields " + ", ".join(
        f"{k} {tuple(v.shape)}" for k, v in fields.items()
    )
    return DataSource(
        str(p),
        NAME,
        inp,
        out,
        ik,
        ok,
        description=desc,
        grid=grid,
        attrs=attrs,
        arrays={f"t{order[k]}_fields/{k}": {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in fields.items()},
        _file=f,
    )


FORMAT = DataFormat(NAME, TITLE, detect, open_source)
