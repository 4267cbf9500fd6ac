"""A PyTorch-layout file (n, C, H, W) is named as channel-first with the fix, not sent to a 3-D problem (issue "The
first hour", item 6)."""

from __future__ import annotations

import pytest
import torch

from mutransfer.cli.main import main


@pytest.mark.parametrize(
    "leading, fragments",
    [
        (1, ["looks channel-first", "1 channel(s) before a 2-D grid", "x.movedim(1, -1)", "x[:, 0]"]),
        (3, ["looks channel-first", "3 channel(s)"]),
        (8, ["gives a 3-dimensional grid (8, 16, 16)", "pass problem navier_stokes"]),  # time-like: the old advice
    ],
)
def test_a_leading_axis_is_read_as_channels_or_as_a_grid_axis(tmp_path, capsys, leading, fragments):
    path = tmp_path / "data.pt"
    torch.save({"x": torch.rand(10, leading, 16, 16), "y": torch.rand(10, leading, 16, 16)}, path)
    assert main(["train", "--problem", "darcy", "--data", str(path), "--epochs", "1", "--no-progress"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert all(f in line for f in fragments), line
