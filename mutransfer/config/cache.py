"""Where mutransfer keeps what it can make again (generated datasets)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """``$MUTRANSFER_CACHE``, else ``~/.cache/mutransfer``: a folder of this user's, made on first use by who writes
    in it."""
    return Path(os.environ.get("MUTRANSFER_CACHE") or Path.home() / ".cache" / "mutransfer")
