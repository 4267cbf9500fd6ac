"""The project's point-set schema ("mutransfer-points", ``mutransfer.data._point_schema``).

Point sets are not grids: ``open_data`` refuses them with a one-line error naming
the point-set problem; they are read by ``mutransfer.data._pointclouds``
(``load_point_split``, ``inspect_point_dataset``).
"""

from __future__ import annotations

from pathlib import Path

import h5py

from mutransfer.data._formats.base import DataFormat, DataSource, Probe
from mutransfer.data._formats.common import Options
from mutransfer.data._hdf5_io import points_refused
from mutransfer.data._schema_common import POINT_SCHEMA, decode_attr

NAME = POINT_SCHEMA
TITLE = "mutransfer point sets (schema mutransfer-points)"


def detect(probe: Probe) -> bool:
    """HDF5 with attribute schema="mutransfer-points"."""
    return probe.h5 is not None and probe.root_attr("schema") == POINT_SCHEMA


def open_source(p: Path, opts: Options) -> DataSource:
    with h5py.File(p, "r") as f:
        problem = decode_attr(f.attrs.get("problem"))
    raise points_refused(p, problem)


FORMAT = DataFormat(NAME, TITLE, detect, open_source)
