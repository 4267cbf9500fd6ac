"""Where the tests find the repository: its root (studies/, docs/, docker/, pyproject.toml).

The tests live in folders that mirror the packages (tests/sweep/, tests/data/, ...), so a test
never counts ``parents[N]`` of its own file: ``from tests.repo_paths import ROOT``.
"""

from __future__ import annotations

from pathlib import Path

#: the repository root
ROOT = Path(__file__).resolve().parents[1]
