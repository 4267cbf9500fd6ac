"""Checks of the sweep's and the landscape's own flags that need no study: the Ray address, output folders."""

from __future__ import annotations

import re
from pathlib import Path

from mutransfer.errors import UserInputError

#: auto, or [ray://]HOST:PORT (a local run gives no address)
_ADDRESS = re.compile(r"^(auto|(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5})$")


def check_address_form(address: str | None, flag: str = "--address") -> None:
    """Refuse an address that is not one Ray accepts, before anything starts (whether it answers:
    :func:`mutransfer.sweep.endpoints.check_ray_address`)."""
    if address is None:
        return
    port = address.rsplit(":", 1)[-1]
    if not _ADDRESS.fullmatch(address) or (port.isdigit() and not 1 <= int(port) <= 65535):
        raise UserInputError(
            f"{flag} {address!r}: use auto, or HOST:PORT / ray://HOST:PORT of a running Ray cluster (no --address: a local run)"
        )


def check_folder(flag: str, path) -> None:
    """An output folder may be missing (it is made) but not be a file."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise UserInputError(f"{flag} {path}: is a file, not a folder; give a folder (it is made if missing)")
