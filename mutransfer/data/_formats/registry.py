"""The data-format registry: every format ``open_data`` reads, in detection order.

Each entry is a :class:`~mutransfer.data._formats.base.DataFormat` declared by its
own module (``FORMAT = DataFormat(name, title, detect, open, ...)``). Detectors
run in the order below and the first that says yes names the format, so the
specific layouts come before the catch-all generic HDF5 reader.

To add a format: write ``formats/<name>.py`` with ``detect(probe)``,
``open_source(path, options)`` and ``FORMAT``, then add one line to ``REGISTRY``.
"""

from __future__ import annotations

from pathlib import Path

from mutransfer.data._formats import (
    generic_hdf5,
    mat_v5,
    mat_v73,
    mutransfer_pde,
    pdebench,
    pdebench_groups,
    points,
    the_well,
    torch_pt,
)
from mutransfer.data._formats.base import DataFormat, Probe
from mutransfer.data._hdf5_io import generate_hint, kind_of_bytes
from mutransfer.errors import UserInputError

__all__ = ["REGISTRY", "FORMATS", "SUPPORTED", "get_format", "find_format"]

#: name -> format, in detection order
REGISTRY: dict[str, DataFormat] = {
    f.name: f
    for f in (
        mat_v5.FORMAT,
        mat_v73.FORMAT,
        points.FORMAT,
        mutransfer_pde.FORMAT,
        the_well.FORMAT,
        pdebench.FORMAT,
        pdebench_groups.FORMAT,
        generic_hdf5.FORMAT,  # any HDF5 file: keep after the HDF5 layouts
        torch_pt.FORMAT,
    )
}
#: name -> one-line title
FORMATS = {name: f.title for name, f in REGISTRY.items()}
#: what the errors list as readable
SUPPORTED = "HDF5 (mutransfer, PDEBench, The Well), MATLAB .mat v5/v7.3, PyTorch .pt"


def get_format(name: str) -> DataFormat:
    return REGISTRY[name]


def _check_path(path) -> Path:
    p = Path(path)
    if not p.exists():
        raise UserInputError(f"data file {p} not found; {generate_hint(p)}")
    if p.is_dir():
        raise UserInputError(f"data file {p} is a directory; pass the path of a data file")
    if not p.is_file():  # reading a FIFO would wait for a writer, a device would not end
        raise UserInputError(f"data file {p} is not a regular file (a FIFO, a device or a socket); pass a data file")
    return p


def _read_head(p: Path, size: int = 1024) -> bytes:
    try:
        with open(p, "rb") as fh:
            return fh.read(size)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserInputError(f"data file {p} could not be read ({reason}); check its permissions") from None


def find_format(path) -> DataFormat:
    """The format of ``path``, from its content (never the extension alone); one-line error otherwise."""
    p = _check_path(path)
    head = _read_head(p)
    if not head:
        raise UserInputError(f"data file {p} is empty (0 bytes); pass a data file ({SUPPORTED})")
    probe = Probe(p, head)
    try:
        found = next((f for f in REGISTRY.values() if f.detect(probe)), None)
    finally:
        probe.close()
    if found is None:
        raise UserInputError(
            f"data file {p} is not a recognised data file (found {p.stat().st_size} bytes of "
            f"{kind_of_bytes(head)}); supported: {SUPPORTED}"
        )
    return found
