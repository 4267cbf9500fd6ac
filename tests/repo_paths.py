"""Where the tests find the repository: its root (studies/, docs/, docker/, pyproject.toml).

The tests live in folders that mirror the packages (tests/sweep/, tests/data/, ...), so a test
never counts ``parents[N]`` of its own file: ``from tests.repo_paths import ROOT``.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the repository root
ROOT = Path(__file__).resolve().parents[1]


def smoke_env(tmp_path: Path) -> dict[str, str]:
    """The environment in which a page's commands run as a user's would, shortened: ``MUTRANSFER_SMOKE=1`` (one
    epoch, two trials: mutransfer._config.smoke), a cache in ``tmp_path``, no telemetry."""
    return dict(
        os.environ,
        MUTRANSFER_SMOKE="1",
        MUTRANSFER_CACHE=str(tmp_path / "cache"),
        MLFLOW_DISABLE_TELEMETRY="true",
        RAY_USAGE_STATS_ENABLED="0",
    )
