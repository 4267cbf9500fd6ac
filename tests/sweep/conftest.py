"""Fixtures of the sweep tests."""

from __future__ import annotations

import pytest

from tests.sweep_helpers import write_tiny_data


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """A tiny Burgers data file (48 samples at 128 points), one per test module."""
    return write_tiny_data(tmp_path_factory.mktemp("data") / "burgers_tiny.h5")
