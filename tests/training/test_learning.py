"""End-to-end learning: a small muP FNO fits a small Darcy set (the trainer's numbers can be trusted)."""

import pytest
import torch

from mutransfer._training import TrainConfig, train
from mutransfer.data._darcy import generate_darcy
from mutransfer.data._hdf5_io import write_dataset
from mutransfer.data._loading import load_split
from operators import FNO


@pytest.mark.slow  # a whole training end to end (the default suite stays under 5 min)
def test_small_fno_fits_small_darcy_set_under_ten_percent(tmp_path):
    """200 train / 50 test samples solved at 29x29, trained at 15x15: < 10% relative L2 (about 20 s on one core)."""
    path = tmp_path / "darcy.h5"
    write_dataset(path, generate_darcy(250, 29, seed=0, progress=False))
    data = load_split(path, n_train=200, n_test=50, resolution=15)
    torch.manual_seed(0)
    model = FNO(2, 1, 1, modes=6, width=24, layers=4, parametrization="mup", padding=3)
    result = train(model, data, TrainConfig(lr=5e-3, epochs=40, batch_size=10, schedule="cosine", progress=False))
    assert result.status == "completed"
    assert result.test_error < 0.10
    # it learned: the first evaluation was clearly worse than the last
    assert result.history[0].test_error > 1.5 * result.test_error
