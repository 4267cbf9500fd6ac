"""HDF5 schema round trip, atomic writes, error messages, downsampling and splits."""

import datetime as dt
import os

import h5py
import numpy as np
import pytest
import torch

import mutransfer
from mutransfer.data import (
    downsample,
    generate_burgers,
    generate_darcy,
    inspect_dataset,
    load_split,
    read_dataset,
    valid_resolutions,
    write_dataset,
)
from mutransfer.errors import UserInputError


@pytest.fixture(scope="module")
def burgers():
    return generate_burgers(5, 32, seed=1, progress=False)


@pytest.fixture(scope="module")
def darcy():
    return generate_darcy(4, 13, seed=2, progress=False)


def _indexed_darcy(n, s):
    """Darcy-shaped data whose values encode (sample, i, j)."""
    i = np.arange(n)[:, None, None] * 10000.0
    x = np.arange(s)[None, :, None] * 100.0
    y = np.arange(s)[None, None, :] * 1.0
    arr = i + x + y
    grid = np.linspace(0, 1, s)
    return {
        "input": arr,
        "output": -arr,
        "grid": {"x": grid, "y": grid},
        "attrs": {"problem": "darcy", "seed": 0},
    }


def _one_line_error(excinfo, *needles):
    msg = str(excinfo.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg
    return msg


@pytest.mark.parametrize("name", ["burgers", "darcy"])
def test_round_trip(tmp_path, request, name):
    data = request.getfixturevalue(name)
    path = tmp_path / f"{name}.h5"
    assert write_dataset(path, data) == path
    back = read_dataset(path)
    for key in ("input", "output"):
        assert back[key].dtype == np.float32
        np.testing.assert_array_equal(back[key], data[key].astype(np.float32))
    assert set(back["grid"]) == set(data["grid"])
    for k, v in data["grid"].items():
        assert back["grid"][k].dtype == np.float64
        np.testing.assert_array_equal(back["grid"][k], v)
    for k, v in data["attrs"].items():
        assert back["attrs"][k] == v and type(back["attrs"][k]) is type(v), k
    attrs = back["attrs"]
    assert attrs["schema"] == "mutransfer-pde" and attrs["schema_version"] == 1
    assert attrs["mutransfer_version"] == mutransfer.__version__
    assert attrs["n_samples"] == data["input"].shape[0] and attrs["resolution"] == data["input"].shape[1]
    created = dt.datetime.fromisoformat(attrs["created"].replace("Z", "+00:00"))
    assert created.utcoffset() == dt.timedelta(0)
    # writing what was read gives the same file contents again
    write_dataset(tmp_path / "again.h5", back)
    again = read_dataset(tmp_path / "again.h5")
    assert again["attrs"] == back["attrs"]
    np.testing.assert_array_equal(again["output"], back["output"])


def test_atomic_write_leaves_no_temp_files(tmp_path, burgers, darcy, monkeypatch):
    path = tmp_path / "d.h5"
    write_dataset(path, burgers)
    assert os.listdir(tmp_path) == ["d.h5"]

    # a write that fails half way keeps the old file intact and leaves nothing behind
    real = h5py.Group.create_dataset

    def failing(self, name, *args, **kwargs):
        if name == "output":
            raise KeyboardInterrupt
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing)
    with pytest.raises(KeyboardInterrupt):
        write_dataset(path, darcy)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["d.h5"]
    assert read_dataset(path)["attrs"]["problem"] == "burgers"


def test_inspect_reports_shapes_and_stats(tmp_path, darcy):
    path = tmp_path / "d.h5"
    write_dataset(path, darcy)
    info = inspect_dataset(path)
    assert info["problem"] == "darcy" and info["n_samples"] == 4 and info["grid_shape"] == (13, 13)
    assert info["grid"] == {"x": (13,), "y": (13,)}
    for key in ("input", "output"):
        d = info["datasets"][key]
        arr = darcy[key].astype(np.float32)
        assert d["shape"] == (4, 13, 13) and d["dtype"] == "float32"
        assert d["min"] == pytest.approx(arr.min()) and d["max"] == pytest.approx(arr.max())
        assert d["mean"] == pytest.approx(arr.astype(np.float64).mean(), rel=1e-6)
    assert info["datasets"]["input"]["min"] == 3.0 and info["datasets"]["input"]["max"] == 12.0
    assert info["attrs"]["seed"] == 2


def test_missing_file_error(tmp_path):
    path = tmp_path / "nope.h5"
    for fn in (read_dataset, inspect_dataset, lambda p: load_split(p, n_train=1, n_test=1)):
        with pytest.raises(UserInputError) as excinfo:
            fn(path)
        _one_line_error(excinfo, str(path), "not found", "mutransfer data generate {burgers|darcy|navier_stokes}")


def test_not_hdf5_error(tmp_path):
    path = tmp_path / "notes.h5"
    path.write_text("hello\nworld\n")
    with pytest.raises(UserInputError) as excinfo:
        read_dataset(path)
    _one_line_error(excinfo, str(path), "not an HDF5 file", "12 bytes of text")
    assert "hello" not in str(excinfo.value)  # the file's contents are not shown
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    with pytest.raises(UserInputError) as excinfo:
        inspect_dataset(empty)
    _one_line_error(excinfo, str(empty), "empty file")


def test_missing_dataset_error(tmp_path):
    path = tmp_path / "partial.h5"
    with h5py.File(path, "w") as f:
        f["input"] = np.zeros((2, 8), dtype=np.float32)
        f["a"] = np.zeros(3)
        f.attrs["problem"] = "burgers"
    with pytest.raises(UserInputError) as excinfo:
        read_dataset(path)
    _one_line_error(excinfo, str(path), "no 'output' dataset", "found: a, input", f"generate burgers --out {path}")


def test_write_validation(tmp_path, burgers):
    bad = dict(burgers, attrs=dict(burgers["attrs"], problem="heat"))
    with pytest.raises(UserInputError, match="problem"):
        write_dataset(tmp_path / "x.h5", bad)
    bad = dict(burgers, output=burgers["output"][:, :16])
    with pytest.raises(UserInputError, match="shapes"):
        write_dataset(tmp_path / "x.h5", bad)
    bad = dict(burgers, attrs=dict(burgers["attrs"], extra=[1, 2]))
    with pytest.raises(UserInputError, match="extra"):
        write_dataset(tmp_path / "x.h5", bad)
    assert os.listdir(tmp_path) == []


def test_downsample_node_grid_keeps_both_boundaries():
    data = _indexed_darcy(2, 13)["input"]
    out = downsample(data, 13, 7, periodic=False)
    idx = np.arange(0, 13, 2)
    assert out.shape == (2, 7, 7)
    np.testing.assert_array_equal(out, data[:, idx][:, :, idx])
    assert out[0, -1, -1] == 1200 + 12  # the corner node (x = y = 1)
    np.testing.assert_array_equal(downsample(data, 13, 13, periodic=False), data)
    # coordinates stay consistent: x_i = i/(S-1)
    coords = downsample(np.linspace(0, 1, 13)[None], 13, 7, periodic=False)[0]
    np.testing.assert_allclose(coords, np.linspace(0, 1, 7))
    # torch tensors work too
    t = downsample(torch.as_tensor(data), 13, 4, periodic=False)
    np.testing.assert_array_equal(t.numpy(), data[:, ::4, ::4])


def test_downsample_periodic_grid():
    data = np.arange(3 * 16, dtype=float).reshape(3, 16)
    out = downsample(data, 16, 4, periodic=True)
    np.testing.assert_array_equal(out, data[:, [0, 4, 8, 12]])
    np.testing.assert_allclose(downsample((np.arange(16) / 16)[None], 16, 4, periodic=True)[0], np.arange(4) / 4)


def test_downsample_invalid_resolutions():
    assert valid_resolutions(13, periodic=False) == [2, 3, 4, 5, 7, 13]
    assert valid_resolutions(16, periodic=True) == [2, 4, 8, 16]
    with pytest.raises(UserInputError) as excinfo:
        downsample(np.zeros((1, 421, 421)), 421, 100, periodic=False)
    msg = _one_line_error(excinfo, "resolution 100", "divisible")
    assert msg.endswith("try 106 or 85")
    with pytest.raises(UserInputError) as excinfo:
        downsample(np.zeros((1, 16)), 16, 6, periodic=True)
    _one_line_error(excinfo, "resolution 6", "try 8 or 4")
    with pytest.raises(UserInputError, match="upsample"):
        downsample(np.zeros((1, 16)), 16, 32, periodic=True)
    with pytest.raises(UserInputError, match="at least 2"):
        downsample(np.zeros((1, 16)), 16, 1, periodic=True)
    with pytest.raises(UserInputError, match="array shape"):
        downsample(np.zeros((1, 12)), 16, 8, periodic=True)


def test_load_split_sizes_order_and_downsampling(tmp_path):
    path = tmp_path / "d.h5"
    write_dataset(path, _indexed_darcy(10, 13))
    split = load_split(path, n_train=6, n_test=3)
    assert split.problem == "darcy" and split.grid_shape == (13, 13) and split.resolution == 13
    assert split.train_x.shape == (6, 13, 13, 1) and split.test_y.shape == (3, 13, 13, 1)
    for t in (split.train_x, split.train_y, split.test_x, split.test_y):
        assert t.dtype == torch.float32
    train_ids = (split.train_x[:, 0, 0, 0] / 10000).round().int().tolist()
    test_ids = (split.test_x[:, 0, 0, 0] / 10000).round().int().tolist()
    assert train_ids == [0, 1, 2, 3, 4, 5] and test_ids == [7, 8, 9]
    assert torch.equal(split.train_y, -split.train_x)

    small = load_split(path, n_train=2, n_test=2, resolution=7)
    assert small.train_x.shape == (2, 7, 7, 1) and small.grid_shape == (7, 7)
    expected = downsample(_indexed_darcy(10, 13)["input"], 13, 7, periodic=False)
    np.testing.assert_array_equal(small.test_x[..., 0].numpy(), expected[8:])
    np.testing.assert_allclose(small.grid["x"], np.linspace(0, 1, 7))


def test_load_split_burgers_and_errors(tmp_path, burgers):
    path = tmp_path / "b.h5"
    write_dataset(path, burgers)
    split = load_split(path, n_train=3, n_test=2, resolution=8)
    assert split.train_x.shape == (3, 8, 1)
    expected = burgers["output"][3:, ::4].astype(np.float32)
    np.testing.assert_array_equal(split.test_y[..., 0].numpy(), expected)
    np.testing.assert_allclose(split.grid["x"], np.arange(8) / 8)
    with pytest.raises(UserInputError) as excinfo:
        load_split(path, n_train=4, n_test=2)
    _one_line_error(excinfo, "exceeds the 5 samples", str(path))
    for kwargs in ({"n_train": 0, "n_test": 1}, {"n_train": 1, "n_test": -2}, {"n_train": True, "n_test": 1}):
        with pytest.raises(UserInputError, match="must be a positive integer"):
            load_split(path, **kwargs)
    with pytest.raises(UserInputError, match="resolution 12"):
        load_split(path, n_train=1, n_test=1, resolution=12)
