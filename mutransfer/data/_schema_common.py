"""What the project's two HDF5 schemas share: their names, attribute encoding and timestamps.

``hdf5_io`` (grids, "mutransfer-pde") and ``point_schema`` (point sets,
"mutransfer-points") both build on this module, so neither imports the other.
"""

from __future__ import annotations

import datetime as _dt
import os

import h5py
import numpy as np

from mutransfer._version import __version__
from mutransfer.errors import UserInputError

__all__ = ["GRID_SCHEMA", "POINT_SCHEMA", "decode_attr", "read_attrs", "attr_value", "utc_now", "schema_of"]

#: the ``schema`` attribute of grid files (``mutransfer.data._hdf5_io``)
GRID_SCHEMA = "mutransfer-pde"
#: the ``schema`` attribute of point-set files (``mutransfer.data._point_schema``)
POINT_SCHEMA = "mutransfer-points"


def decode_attr(value):
    """An HDF5 attribute value as a plain Python value (bytes → str, numpy scalars → Python, small arrays → lists)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "S":
            return [x.decode("utf-8", "replace") for x in value.ravel().tolist()]
        return value.tolist() if value.size <= 16 else f"array{value.shape}"
    return value


def read_attrs(obj) -> dict:
    """All attributes of an HDF5 file, group or dataset, decoded with :func:`decode_attr`."""
    return {str(k): decode_attr(v) for k, v in obj.attrs.items()}


def schema_of(f) -> object:
    """The decoded ``schema`` attribute of an open HDF5 file (None when absent)."""
    return decode_attr(f.attrs.get("schema"))


def attr_value(name: str, value):
    """``value`` as a flat scalar attribute (str, int, float, bool); one-line error otherwise."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    raise UserInputError(
        f"attribute {name!r}: {type(value).__name__} is not a flat scalar; use str, int, float or bool"
    )


def utc_now() -> str:
    """The current time as ISO 8601 UTC, e.g. "2025-01-31T12:00:00Z" (the ``created`` attribute)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def finish_attrs(attrs: dict) -> dict:
    """The attributes every written file carries (seed, mutransfer_version, created) filled in, values made HDF5-safe."""

    attrs.setdefault("seed", -1)
    attrs.setdefault("mutransfer_version", __version__)
    attrs.setdefault("created", utc_now())
    return {str(k): attr_value(str(k), v) for k, v in attrs.items()}


#: a dataset declaring more than this many bytes must have every value written (see :func:`check_stored`)
SPARSE_CHECKED_BYTES = 64 * 2**20


def check_stored(path: str | os.PathLike[str], name: str, dataset: h5py.Dataset) -> None:
    """A one-line UserInputError if the HDF5 ``dataset`` declares over :data:`SPARSE_CHECKED_BYTES` but some of its
    values were never written: HDF5 reads unwritten chunks back as its fill value, so a 7 KB file can declare
    gigabytes of zeros and each reading of it takes minutes (or its loading, the memory). Told by the chunks the file
    has allocated against the chunks the shape needs (compression does not matter), or, for a contiguous dataset, by
    no storage at all. A dataset whose values live outside the file (HDF5 virtual datasets, external storage: any
    file the data file names, ``/dev/zero`` or ``/etc/shadow`` as well) is refused whatever its size: the data file
    alone would decide what is read."""
    if dataset.is_virtual or dataset.external:
        raise UserInputError(
            f"data file {path}: dataset {name!r} reads its values from other files (HDF5 "
            f"{'virtual dataset' if dataset.is_virtual else 'external storage'}), which are not read; copy the values "
            "into the file (e.g. h5repack), or generate a file with `mutransfer data generate`"
        )
    declared = int(np.prod(dataset.shape, dtype=np.float64)) * dataset.dtype.itemsize
    if declared <= SPARSE_CHECKED_BYTES:
        return
    if dataset.chunks is None:
        written, needed = (1 if dataset.id.get_storage_size() > 0 else 0), 1
    else:
        needed = int(np.prod([-(-n // c) for n, c in zip(dataset.shape, dataset.chunks, strict=True)]))
        written = int(dataset.id.get_num_chunks())
    if written >= needed:
        return
    raise UserInputError(
        f"data file {path}: dataset {name!r} declares {declared / 2**30:.1f} GiB of values but "
        f"{'none' if written == 0 else f'only {written} of {needed} chunks'} were written (HDF5 reads the rest as "
        "zeros): not data a solver wrote; write the values, or generate a file with `mutransfer data generate`"
    )
