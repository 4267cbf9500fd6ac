"""Readers for the classic data formats: detection by content, round trips, one-line errors."""

import json

import h5py
import numpy as np
import pytest
import scipy.io
import torch

from mutransfer.cli.main import main
from mutransfer.data._darcy import generate_darcy
from mutransfer.data._hdf5_io import write_dataset
from mutransfer.data._loading import load_split
from mutransfer.data._readers import describe, detect_format, open_data, parse_time_spec
from mutransfer.errors import UserInputError

RNG = np.random.default_rng(0)


def _one_line(excinfo, *needles):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def _indexed(n, *shape):
    """Arrays whose values encode (sample, index...) so any transposition shows."""
    grids = np.meshgrid(*[np.arange(s) for s in (n, *shape)], indexing="ij")
    weights = [10.0 ** (2 * (len(shape) - i)) for i in range(len(shape) + 1)]
    return sum(w * g for w, g in zip(weights, grids)).astype(np.float64)


def _write_mat73(path, arrays: dict, *, header=True):
    """A MATLAB v7.3-style file: HDF5 with the 512-byte MATLAB user block and column-major (reversed) arrays."""
    with h5py.File(path, "w", userblock_size=512 if header else 0) as f:
        for name, value in arrays.items():
            ds = f.create_dataset(name, data=np.asarray(value).T)  # MATLAB writes the reversed shape
            ds.attrs["MATLAB_class"] = np.bytes_("double")
    if header:
        text = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
        with open(path, "r+b") as fh:
            fh.write(text.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02" + b"IM")


# ----------------------------------------------------------------------------- MATLAB v5


def test_mat_v5_darcy_round_trip(tmp_path):
    darcy = generate_darcy(5, 13, seed=1, progress=False)
    path = tmp_path / "piececonst_r13_N5.mat"
    scipy.io.savemat(path, {"coeff": darcy["input"], "sol": darcy["output"]})
    assert detect_format(path) == "mat-v5"
    with open_data(path) as src:
        assert (src.input_key, src.output_key) == ("coeff", "sol")
        assert src.n_samples == 5 and src.grid_shape == (13, 13) and src.problem_guess == "darcy"
        x, y = src.load()
    np.testing.assert_array_equal(x[..., 0], darcy["input"].astype(np.float32))
    split = load_split(path, n_train=3, n_test=2, resolution=7, problem="darcy")
    assert split.train_x.shape == (3, 7, 7, 1) and split.source["format"] == "mat-v5"
    np.testing.assert_array_equal(split.test_y[..., 0].numpy(), darcy["output"][3:, ::2, ::2].astype(np.float32))
    # the file's problem is unknown, so striding needs the problem's grid kind
    with pytest.raises(UserInputError, match="grid type is unknown"):
        load_split(path, n_train=3, n_test=2, resolution=7)


def test_mat_v5_errors(tmp_path):
    path = tmp_path / "x.mat"
    scipy.io.savemat(path, {"coeff": np.zeros((4, 9, 9)), "sol": np.zeros((4, 9, 9))})
    with pytest.raises(UserInputError) as excinfo:
        open_data(path, input_key="coef")
    _one_line(excinfo, "x.mat: no array 'coef' (found: coeff, sol); pass --input-key coeff")
    with pytest.raises(UserInputError) as excinfo:
        open_data(path, output_key="u")
    _one_line(excinfo, "no array 'u'", "--output-key")
    bad = tmp_path / "bad.mat"
    scipy.io.savemat(bad, {"a": np.zeros((4, 8, 8)), "u": np.zeros((3, 8, 8))})
    with pytest.raises(UserInputError) as excinfo:
        open_data(bad)
    _one_line(excinfo, "input 'a' has 4 samples but output 'u' has 3")
    grid = tmp_path / "grid.mat"
    scipy.io.savemat(grid, {"a": np.zeros((4, 8, 8)), "u": np.zeros((4, 16, 16))})
    with pytest.raises(UserInputError) as excinfo:
        open_data(grid)
    _one_line(excinfo, "input 'a' has grid (8, 8) but output 'u' has grid (16, 16)")
    three = tmp_path / "three.mat"
    scipy.io.savemat(three, {"p": np.zeros((4, 8)), "q": np.zeros((4, 8)), "r": np.zeros((4, 8))})
    with pytest.raises(UserInputError) as excinfo:
        open_data(three)
    _one_line(excinfo, "cannot tell which arrays", "found: p, q, r", "--input-key")


def test_mat_v5_navier_stokes_and_trajectories(tmp_path):
    """FNO NS files: a (N, S, S) and u (N, S, S, T) -> space-time; u alone -> trajectory."""
    a = RNG.standard_normal((4, 8, 8))
    u = RNG.standard_normal((4, 8, 8, 6))
    path = tmp_path / "NavierStokes_V1e-3_N4_T6.mat"
    scipy.io.savemat(path, {"a": a, "u": u, "t": np.arange(1, 7)[None]})
    split = load_split(path, n_train=2, n_test=2, problem="navier_stokes", time_resolution=3)
    assert split.train_x.shape == (2, 8, 8, 3, 1) and split.train_y.shape == (2, 8, 8, 3, 1)
    np.testing.assert_allclose(split.train_y[..., 0].numpy(), u[:2, :, :, 1::2], rtol=1e-6)
    np.testing.assert_allclose(split.train_x[:, :, :, 2, 0].numpy(), a[:2], rtol=1e-6)
    np.testing.assert_allclose(split.grid["t"], [2, 4, 6])
    assert describe(path)["problem_guess"] == "navier_stokes"
    # V1e-5 style: only u; the time axis is the last one (FNO convention)
    traj = tmp_path / "ns_u_only.mat"
    scipy.io.savemat(traj, {"u": u})
    with open_data(traj, field="u") as src:  # defaults: input t = 0, output t = -1
        x, y = src.load()
        assert src.grid_shape == (8, 8)
    np.testing.assert_allclose(x[..., 0], u[..., 0], rtol=1e-6)
    np.testing.assert_allclose(y[..., 0], u[..., -1], rtol=1e-6)
    with open_data(traj, input_key="u", output_key="u", input_time=0, output_time="1:") as src:
        assert src.grid_shape == (8, 8, 5) and src.output.read(0, 1).shape == (1, 8, 8, 5, 1)
    with pytest.raises(UserInputError) as excinfo:
        open_data(traj, field="u", output_time=9)
    _one_line(excinfo, "--output-time 9", "has 6 times")
    # --input-time on a .mat array takes its last axis as time: a (4, 8, 8) then has a 1D grid
    with pytest.raises(UserInputError) as excinfo:
        open_data(path, input_time=0)
    _one_line(excinfo, "input 'a' has grid (8,) but output 'u' has grid (8, 8)")


# ----------------------------------------------------------------------------- MATLAB v7.3


@pytest.mark.parametrize("header", [True, False])
def test_mat_v73_transposed_round_trip(tmp_path, header):
    coeff = _indexed(3, 5, 7)  # non-square on purpose: a missed transposition cannot hide
    sol = -coeff
    path = tmp_path / "darcy_v73.mat"
    _write_mat73(path, {"coeff": coeff, "sol": sol}, header=header)
    with h5py.File(path, "r") as f:
        assert f["coeff"].shape == (7, 5, 3)  # as MATLAB stores it
    assert detect_format(path) == "mat-v7.3"
    with open_data(path) as src:
        assert src.grid_shape == (5, 7) and src.input.shape == (3, 5, 7, 1)
        x, y = src.load(1, 3)
    np.testing.assert_array_equal(x[..., 0], coeff[1:3].astype(np.float32))
    np.testing.assert_array_equal(y[..., 0], sol[1:3].astype(np.float32))
    info = describe(path)
    assert info["format"] == "mat-v7.3" and info["arrays"]["coeff"]["shape"] == [3, 5, 7]


def test_mat_v73_navier_stokes(tmp_path):
    a = _indexed(4, 6, 6)
    u = _indexed(4, 6, 6, 3)
    path = tmp_path / "NavierStokes_V1e-5_N4_T3.mat"
    _write_mat73(path, {"a": a, "u": u})
    split = load_split(path, n_train=3, n_test=1, problem="navier_stokes", resolution=3)
    assert split.train_y.shape == (3, 3, 3, 3, 1)
    np.testing.assert_array_equal(split.test_y[..., 0].numpy(), u[3:, ::2, ::2].astype(np.float32))
    with pytest.raises(UserInputError) as excinfo:
        open_data(path, input_key="b")
    _one_line(excinfo, "no array 'b' (found: a, u); pass --input-key a")


# ----------------------------------------------------------------------------- PDEBench


def test_pdebench_single_array_1d(tmp_path):
    tensor = _indexed(5, 4, 16)  # (N, t, x)
    path = tmp_path / "1D_Burgers_Sols_Nu0.1.hdf5"
    with h5py.File(path, "w") as f:
        f["tensor"] = tensor
        f["x-coordinate"] = (np.arange(16) + 0.5) / 16
        f["t-coordinate"] = np.linspace(0, 2, 5)
    assert detect_format(path) == "pdebench"
    with open_data(path) as src:
        assert src.grid_shape == (16,) and src.problem_guess == "burgers"
        x, y = src.load()
    np.testing.assert_array_equal(x[..., 0], tensor[:, 0].astype(np.float32))
    np.testing.assert_array_equal(y[..., 0], tensor[:, -1].astype(np.float32))
    split = load_split(path, n_train=3, n_test=2, problem="burgers", resolution=8, input_time=1, output_time=2)
    np.testing.assert_array_equal(split.train_x[..., 0].numpy(), tensor[:3, 1, ::2].astype(np.float32))
    np.testing.assert_array_equal(split.test_y[..., 0].numpy(), tensor[3:, 2, ::2].astype(np.float32))
    np.testing.assert_allclose(split.grid["x"], ((np.arange(16) + 0.5) / 16)[::2])
    with pytest.raises(UserInputError) as excinfo:
        open_data(path, output_time=7)
    _one_line(excinfo, "--output-time 7", "'tensor' has 4 times")


def test_pdebench_darcy_and_space_time(tmp_path):
    nu = _indexed(4, 8, 8)
    tensor = _indexed(4, 5, 8, 8)  # (N, t, x, y)
    path = tmp_path / "2D_DarcyFlow_beta1.0_Train.hdf5"
    with h5py.File(path, "w") as f:
        f["nu"] = nu
        f["tensor"] = tensor
        f["x-coordinate"] = np.arange(8) / 8
        f["y-coordinate"] = np.arange(8) / 8
    with open_data(path, input_key="nu") as src:
        assert src.input_key == "nu" and src.output_key == "tensor" and src.grid_shape == (8, 8)
        x, y = src.load()
    np.testing.assert_array_equal(x[..., 0], nu.astype(np.float32))
    np.testing.assert_array_equal(y[..., 0], tensor[:, -1].astype(np.float32))
    with open_data(path, output_time="1:") as src:  # a space-time output, input = tensor at t = 0
        assert src.grid_shape == (8, 8, 4) and src.problem_guess == "navier_stokes"
        y = src.output.read(0, 2)
    np.testing.assert_array_equal(y[..., 0], np.moveaxis(tensor[:2, 1:], 1, -1).astype(np.float32))
    with pytest.raises(UserInputError) as excinfo:
        open_data(path, input_key="nu", input_time=0)
    _one_line(excinfo, "input 'nu'", "has no time axis; drop --input-time")
    with pytest.raises(UserInputError) as excinfo:
        open_data(path, field="density")
    _one_line(excinfo, "no array 'density' (found: nu, tensor); pass --field")


def test_pdebench_per_sample_groups(tmp_path):
    path = tmp_path / "2D_diff-react_NA_NA.h5"
    data = {}
    with h5py.File(path, "w") as f:
        for i in range(4):
            d = RNG.standard_normal((6, 8, 8, 2))  # (t, x, y, c)
            data[i] = d
            g = f.create_group(f"{i:04d}")
            g["data"] = d
            g["grid/x"] = np.linspace(-1, 1, 8)
            g["grid/y"] = np.linspace(-1, 1, 8)
            g["grid/t"] = np.linspace(0, 5, 6)
    assert detect_format(path) == "pdebench-groups"
    split = load_split(path, n_train=3, n_test=1, problem="darcy")
    assert split.train_x.shape == (3, 8, 8, 2) and split.train_y.shape == (3, 8, 8, 2)
    np.testing.assert_allclose(split.train_x.numpy(), np.stack([data[i][0] for i in range(3)]), rtol=1e-6)
    np.testing.assert_allclose(split.test_y[0].numpy(), data[3][-1], rtol=1e-6)
    np.testing.assert_allclose(split.grid["x"], np.linspace(-1, 1, 8))
    with open_data(path, output_time="all") as src:
        assert src.output.shape == (4, 8, 8, 6, 2)
        np.testing.assert_allclose(src.grid["t"], np.linspace(0, 5, 6))


# ----------------------------------------------------------------------------- The Well


def _write_well(path, n_traj=3, n_time=5, nx=8, ny=6):
    fields = {
        "density": RNG.standard_normal((n_traj, n_time, nx, ny)),
        "pressure": RNG.standard_normal((n_traj, n_time, nx, ny)),
        "velocity": RNG.standard_normal((n_traj, n_time, nx, ny, 2)),
    }
    with h5py.File(path, "w") as f:
        f.attrs["dataset_name"] = "toy_flow"
        f.attrs["n_spatial_dims"] = 2
        f.attrs["grid_type"] = "cartesian"
        dims = f.create_group("dimensions")
        dims["x"] = np.linspace(0, 1, nx)
        dims["y"] = np.linspace(0, 1, ny)
        dims["time"] = np.linspace(0, 1, n_time)
        bc = f.create_group("boundary_conditions")
        bc.create_group("x_periodic").attrs["bc_type"] = "PERIODIC"
        for group, names in (("t0_fields", ("density", "pressure")), ("t1_fields", ("velocity",)), ("t2_fields", ())):
            g = f.create_group(group)
            g.attrs["field_names"] = list(names)
            for name in names:
                ds = g.create_dataset(name, data=fields[name])
                ds.attrs["time_varying"] = True
                ds.attrs["sample_varying"] = True
    return fields


def test_the_well_layout(tmp_path):
    path = tmp_path / "toy_flow.hdf5"
    fields = _write_well(path)
    assert detect_format(path) == "the-well"
    with pytest.raises(UserInputError) as excinfo:
        open_data(path)
    _one_line(excinfo, "has fields density, pressure, velocity; pass --field NAME")
    with open_data(path, field="density") as src:
        assert src.grid_shape == (8, 6) and src.description.startswith("The Well file 'toy_flow'")
        x, y = src.load()
    np.testing.assert_allclose(x[..., 0], fields["density"][:, 0], rtol=1e-6)
    np.testing.assert_allclose(y[..., 0], fields["density"][:, -1], rtol=1e-6)
    # a vector field becomes channels; input and output fields may differ
    split = load_split(
        path,
        n_train=2,
        n_test=1,
        input_key="velocity",
        output_key="pressure",
        input_time=1,
        output_time=3,
        problem="darcy",
    )
    assert split.train_x.shape == (2, 8, 6, 2) and split.train_y.shape == (2, 8, 6, 1)
    np.testing.assert_allclose(split.train_x.numpy(), fields["velocity"][:2, 1], rtol=1e-6)
    np.testing.assert_allclose(split.test_y[..., 0].numpy(), fields["pressure"][2:, 3], rtol=1e-6)
    np.testing.assert_allclose(split.grid["y"], np.linspace(0, 1, 6))
    # space-time output with the Well's time coordinates
    split = load_split(path, n_train=2, n_test=1, field="density", output_time="1:", problem="navier_stokes")
    assert split.train_x.shape == (2, 8, 6, 4, 1)
    np.testing.assert_allclose(split.grid["t"], np.linspace(0, 1, 5)[1:])


# ----------------------------------------------------------------------------- torch .pt


@pytest.mark.parametrize("zipfile_format", [True, False])
def test_torch_pt_round_trip(tmp_path, zipfile_format):
    x = torch.rand(6, 16, 16)
    y = torch.rand(6, 16, 16)
    path = tmp_path / "darcy_train_16.pt"
    torch.save({"x": x, "y": y}, path, _use_new_zipfile_serialization=zipfile_format)
    assert detect_format(path) == "torch"
    split = load_split(path, n_train=4, n_test=2)
    assert split.problem == "darcy" and split.source["input_key"] == "x"
    torch.testing.assert_close(split.train_x[..., 0], x[:4])
    torch.testing.assert_close(split.test_y[..., 0], y[4:])


def test_torch_pt_errors(tmp_path):
    unsafe = tmp_path / "unsafe.pt"
    torch.save({"x": np.zeros((2, 4))}, unsafe)
    with pytest.raises(UserInputError) as excinfo:
        open_data(unsafe)
    _one_line(excinfo, "weights_only=True", "Unsupported global")
    listed = tmp_path / "list.pt"
    torch.save([torch.zeros(2, 4)], listed)
    with pytest.raises(UserInputError) as excinfo:
        open_data(listed)
    _one_line(excinfo, "holds a list, not a dict")
    keys = tmp_path / "keys.pt"
    torch.save({"inputs": torch.zeros(2, 4), "targets": torch.zeros(2, 4)}, keys)
    with pytest.raises(UserInputError) as excinfo:
        open_data(keys, input_key="x")
    _one_line(excinfo, "no array 'x' (found: inputs, targets); pass --input-key")
    with open_data(keys, input_key="inputs", output_key="targets") as src:
        assert src.grid_shape == (4,)


# ----------------------------------------------------------------------------- detection, generic


def test_detection_is_by_content_not_extension(tmp_path):
    darcy = generate_darcy(4, 9, seed=0, progress=False)
    disguised = tmp_path / "looks_like.mat"
    write_dataset(disguised, darcy)
    assert detect_format(disguised) == "mutransfer"
    assert load_split(disguised, n_train=2, n_test=2).problem == "darcy"
    pt_named_h5 = tmp_path / "weights.h5"
    torch.save({"x": torch.zeros(2, 4), "y": torch.zeros(2, 4)}, pt_named_h5)
    assert detect_format(pt_named_h5) == "torch"
    mat_named_pt = tmp_path / "data.pt"
    with open(mat_named_pt, "wb") as fh:
        scipy.io.savemat(fh, {"a": np.zeros((2, 4)), "u": np.zeros((2, 4))})
    assert detect_format(mat_named_pt) == "mat-v5"
    junk = tmp_path / "junk.mat"
    junk.write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(UserInputError) as excinfo:
        detect_format(junk)
    _one_line(excinfo, "junk.mat is not a recognised data file", "supported:")
    with pytest.raises(UserInputError) as excinfo:
        open_data(tmp_path / "missing.mat")
    _one_line(excinfo, "missing.mat not found")


def test_generic_hdf5_and_project_files(tmp_path):
    path = tmp_path / "pairs.h5"
    with h5py.File(path, "w") as f:
        f["a"] = _indexed(4, 6)
        f["u"] = -_indexed(4, 6)
    assert detect_format(path) == "hdf5"
    with open_data(path) as src:
        assert (src.input_key, src.output_key) == ("a", "u")
    darcy = write_dataset(tmp_path / "d.h5", generate_darcy(3, 9, seed=0, progress=False))
    with pytest.raises(UserInputError) as excinfo:
        open_data(darcy, input_key="coeff")
    _one_line(excinfo, "hold 'input' and 'output'; drop --input-key coeff")


def test_parse_time_spec():
    assert parse_time_spec("-1") == -1 and parse_time_spec(3) == 3 and parse_time_spec(None) is None
    assert parse_time_spec("all") == slice(None) and parse_time_spec("1:") == slice(1, None)
    assert parse_time_spec("0:10:2") == slice(0, 10, 2)
    for bad in ("x", "1:2:0", "1:2:3:4"):
        with pytest.raises(UserInputError, match="output_time"):
            parse_time_spec(bad)


# ----------------------------------------------------------------------------- CLI


def test_cli_inspect_and_train_on_a_mat_file(tmp_path, capsys):
    darcy = generate_darcy(10, 9, seed=2, progress=False)
    path = tmp_path / "x.mat"
    scipy.io.savemat(path, {"coeff": darcy["input"], "sol": darcy["output"]})
    assert main(["data", "inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "mat-v5" and info["n_samples"] == 10 and info["input"]["key"] == "coeff"
    assert main(["data", "inspect", str(path)]) == 0
    assert "format: mat-v5" in capsys.readouterr().out

    assert main(["train", "--problem", "darcy", "--data", str(path), "--input-key", "coef"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no array 'coef' (found: coeff, sol); pass --input-key coeff" in err[0]

    args = [
        "train",
        "--problem",
        "darcy",
        "--data",
        str(path),
        "--modes",
        "2",
        "--width",
        "4",
        "--layers",
        "1",
        "--iterations",
        "2",
        "--batch-size",
        "4",
        "--resolution",
        "5",
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["grid"] == [5, 5] and summary["n_train"] == 8 and summary["n_test"] == 2
    assert summary["source"]["format"] == "mat-v5" and summary["result"]["status"] == "completed"

    # a 2D file cannot feed the FNO-3D problem
    assert main(["train", "--problem", "navier_stokes", "--data", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "2-dimensional grid (9, 9)" in err and "a 3-D grid operator" in err and "darcy" in err
