"""The project's own HDF5 schema ("mutransfer-pde", ``mutransfer.data._hdf5_io``): `input`/`output` at the root."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from mutransfer.data._formats.base import DataFormat, DataSource, Probe
from mutransfer.data._formats.common import Options, apply_times, hdf5_datasets_info, open_hdf5, plain_array
from mutransfer.data._hdf5_io import SCHEMA, inspect_dataset, open_dataset, read_attrs
from mutransfer.errors import UserInputError

NAME = "mutransfer"
TITLE = "mutransfer HDF5 (schema mutransfer-pde)"


def detect(probe: Probe) -> bool:
    """HDF5 with attribute schema="mutransfer-pde", or a root `input` or `output` dataset."""
    if probe.h5 is None:
        return False
    return probe.root_attr("schema") == SCHEMA or bool({"input", "output"} & probe.root_datasets)


def open_source(p: Path, opts: Options) -> DataSource:
    with open_dataset(p):  # validates (one-line errors for partial/malformed files)
        pass
    for key, flag, want in ((opts.input_key, "--input-key", "input"), (opts.output_key, "--output-key", "output")):
        if key is not None and key != want:
            raise UserInputError(f"{p}: mutransfer files hold 'input' and 'output'; drop {flag} {key}")
    if opts.field is not None:
        raise UserInputError(f"{p}: mutransfer files hold 'input' and 'output'; drop --field {opts.field}")
    return open_hdf5(p, lambda f: _source(p, f, opts))


def _source(p: Path, f: h5py.File, opts: Options) -> DataSource:
    xi, yo = f["input"], f["output"]
    timed = len(yo.shape) == len(xi.shape) + 1
    inp = plain_array(xi, "input", None)
    out = plain_array(yo, "output", len(yo.shape) - 1 if timed else None)
    inp, out = apply_times(p, inp, out, opts, trajectory_defaults=False)
    attrs = read_attrs(f)
    grid = {}
    if isinstance(f.get("grid"), h5py.Group):
        grid = {k: np.asarray(v[()], dtype=np.float64) for k, v in f["grid"].items() if isinstance(v, h5py.Dataset)}
    problem = attrs.get("problem")
    desc = (
        f"{problem or 'unknown'} data, {xi.shape[0]} samples, input {tuple(xi.shape[1:])}, output {tuple(yo.shape[1:])}"
    )
    return DataSource(
        str(p),
        NAME,
        inp,
        out,
        "input",
        "output",
        problem=problem,
        description=desc,
        grid=grid,
        attrs=attrs,
        arrays=hdf5_datasets_info({k: v for k, v in f.items() if isinstance(v, h5py.Dataset)}),
        _file=f,
    )


def describe(path) -> dict:
    """``inspect_dataset`` (value ranges, attributes) plus the format and the model's grid."""
    info = inspect_dataset(path)
    with open_source(Path(path), Options.make()) as src:
        return {"format": NAME, "format_name": TITLE, **info, "model_grid_shape": src.grid_shape}


FORMAT = DataFormat(NAME, TITLE, detect, open_source, describe=describe)
