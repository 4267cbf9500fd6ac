"""Checks of the sweep's and the landscape's own flags that need no study: the Ray address, output folders."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from mutransfer.errors import UserInputError

#: auto, or [ray://]HOST:PORT (a local run gives no address)
_ADDRESS = re.compile(r"^(auto|(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5})$")


def check_address_form(address: str | None, flag: str = "--address") -> None:
    """Refuse an address that is not one Ray accepts, before anything starts (whether it answers:
    :func:`mutransfer._sweep.endpoints.check_ray_address`)."""
    if address is None:
        return
    port = address.rsplit(":", 1)[-1]
    if not _ADDRESS.fullmatch(address) or (port.isdigit() and not 1 <= int(port) <= 65535):
        raise UserInputError(
            f"{flag} {address!r}: use auto, or HOST:PORT / ray://HOST:PORT of a running Ray cluster (no --address: a local run)"
        )


def check_folder(flag: str, path) -> None:
    """An output folder may be missing (it is made) but not be a file, and a file must be possible to make in it
    (:func:`check_writable`)."""
    if path is None:
        return
    if Path(path).exists() and not Path(path).is_dir():
        raise UserInputError(f"{flag} {path}: is a file, not a folder; give a folder (it is made if missing)")
    check_writable(Path(path), path, flag)


def check_storage(storage: object) -> None:
    """The Python API's ``storage`` (the folder of study folders): a path where a folder can be made, checked when a
    study is created or loaded, not at its first training."""
    if not isinstance(storage, str | os.PathLike):
        raise UserInputError(f"storage: a folder path (str or pathlib.Path), got {type(storage).__name__}")
    check_folder("storage", storage)


def check_writable(folder: Path, out: str | Path, flag: str) -> None:
    """A one-line UserInputError unless a file can be made in ``folder`` (or, where it does not exist yet, in the
    nearest folder above it that does): a read-only folder, ``/proc`` or ``/sys``, refused before the work rather
    than after it. It makes and removes an empty hidden file there."""
    try:
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mutransfer-probe-"):
            pass
    except OSError as exc:
        raise UserInputError(
            f"{flag} {out}: cannot write in {folder} ({exc.strerror or type(exc).__name__}); choose another {flag}"
        ) from None
