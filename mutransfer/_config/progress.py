"""Whether a progress bar shows: one rule for every bar the product draws (data generation, training, the sweep)."""

from __future__ import annotations

import os


def bar_disabled(progress: bool = True) -> bool:
    """True when the bar is hidden: asked off (``progress`` False: ``--no-progress``) or ``TQDM_DISABLE`` set (1, true,
    yes). tqdm reads that variable only for the arguments a bar is not given, and mutransfer gives ``disable``; it is
    read here each time (tqdm reads it once, at import)."""
    return not progress or os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes")
