"""darcy_mesh point sets: sampling, the mutransfer-points HDF5 schema, packed splits, errors and the CLI."""

import datetime as dt
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

import mutransfer
import mutransfer._problems as problems
from mutransfer._training.losses import relative_l2
from mutransfer.cli.main import main
from mutransfer.data import describe, generate_darcy, load_split, read_dataset, write_dataset
from mutransfer.data._pointclouds import (
    generate_darcy_mesh,
    inspect_point_dataset,
    is_point_file,
    load_point_split,
    point_file_header,
    read_point_dataset,
    sample_point_sets,
    write_point_dataset,
)
from mutransfer.errors import UserInputError
from operators.adapters import unpack_points

S = 17
PMIN, PMAX = 20, 80


@pytest.fixture(scope="module")
def grid():
    return generate_darcy(8, S, seed=3, progress=False)


@pytest.fixture(scope="module")
def points(grid):
    return sample_point_sets(grid, points_min=PMIN, points_max=PMAX, seed=5)


@pytest.fixture(scope="module")
def point_file(tmp_path_factory, points):
    path = tmp_path_factory.mktemp("points") / "darcy_mesh.h5"
    write_point_dataset(path, points)
    return path


def _one_line(excinfo, *needles):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def _node_indices(coords, s):
    """(P, 2) coordinates in [0, 1] -> integer node indices (ix, iy); asserts they are nodes."""
    scaled = coords.astype(np.float64) * (s - 1)
    idx = np.rint(scaled).astype(int)
    np.testing.assert_allclose(scaled, idx, atol=1e-4)
    return idx[:, 0], idx[:, 1]


# ----------------------------------------------------------------------------- sampling


def test_shapes_and_dtypes(points):
    n = 8
    assert points["coords"].shape == (n, PMAX, 2) and points["coords"].dtype == np.float32
    assert points["input"].shape == (n, PMAX, 1) and points["input"].dtype == np.float32
    assert points["output"].shape == (n, PMAX, 1) and points["output"].dtype == np.float32
    assert points["mask"].shape == (n, PMAX) and points["mask"].dtype == bool
    c = points["coords"][points["mask"]]
    assert c.min() >= 0.0 and c.max() <= 1.0


def test_values_are_exact_grid_values_at_distinct_nodes(grid, points):
    for i in range(points["mask"].shape[0]):
        real = points["mask"][i]
        ix, iy = _node_indices(points["coords"][i][real], S)
        flat = ix * S + iy
        assert len(np.unique(flat)) == len(flat), "a node was sampled twice"
        np.testing.assert_array_equal(points["input"][i][real][:, 0], grid["input"][i, ix, iy].astype(np.float32))
        np.testing.assert_array_equal(points["output"][i][real][:, 0], grid["output"][i, ix, iy].astype(np.float32))
        # the coordinates are the grid's own coordinates of those nodes
        np.testing.assert_array_equal(points["coords"][i][real][:, 0], grid["grid"]["x"][ix].astype(np.float32))
        np.testing.assert_array_equal(points["coords"][i][real][:, 1], grid["grid"]["y"][iy].astype(np.float32))


def test_counts_in_range_vary_and_sets_differ(points):
    counts = points["mask"].sum(axis=1)
    assert counts.min() >= PMIN and counts.max() <= PMAX
    assert len(set(counts.tolist())) > 1, counts
    sets = [
        frozenset(map(tuple, np.rint(points["coords"][i][points["mask"][i]] * (S - 1)).astype(int).tolist()))
        for i in range(len(counts))
    ]
    assert len(set(sets)) == len(sets)


def test_padded_rows_are_zero(points):
    pad = ~points["mask"]
    assert pad.any()
    for key in ("coords", "input", "output"):
        assert not points[key][pad].any(), key


def test_deterministic_for_a_seed_and_different_across_seeds(grid, points):
    again = sample_point_sets(grid, points_min=PMIN, points_max=PMAX, seed=5)
    for key in ("coords", "input", "output", "mask"):
        np.testing.assert_array_equal(again[key], points[key])
    other = sample_point_sets(grid, points_min=PMIN, points_max=PMAX, seed=6)
    assert not np.array_equal(other["mask"], points["mask"]) or not np.array_equal(other["coords"], points["coords"])


def test_full_grid_when_points_cover_every_node(grid):
    data = sample_point_sets(grid, points_min=S * S, points_max=S * S, seed=0)
    assert data["mask"].all()
    ix, iy = _node_indices(data["coords"][0], S)
    assert sorted((ix * S + iy).tolist()) == list(range(S * S))


def test_generate_darcy_mesh_attrs_and_determinism():
    data = generate_darcy_mesh(3, 13, seed=4, progress=False, points_min=10, points_max=30)
    assert data["coords"].shape == (3, 30, 2)
    attrs = data["attrs"]
    assert attrs["problem"] == "darcy_mesh" and attrs["seed"] == 4
    assert attrs["points_min"] == 10 and attrs["points_max"] == 30 and attrs["grid_resolution"] == 13
    assert attrs["darcy.a_plus"] == 12.0 and attrs["grf.kind"] == "neumann-cosine"
    assert all(isinstance(v, (bool, int, float, str)) for v in attrs.values())
    again = generate_darcy_mesh(3, 13, seed=4, progress=False, points_min=10, points_max=30)
    np.testing.assert_array_equal(again["output"], data["output"])
    np.testing.assert_array_equal(again["coords"], data["coords"])
    other = generate_darcy_mesh(3, 13, seed=5, progress=False, points_min=10, points_max=30)
    assert not np.array_equal(other["input"], data["input"])
    # the values match a Darcy solve with the same seed
    grid = generate_darcy(3, 13, seed=4, progress=False)
    ix, iy = _node_indices(data["coords"][1][data["mask"][1]], 13)
    np.testing.assert_array_equal(
        data["output"][1][data["mask"][1]][:, 0], grid["output"][1, ix, iy].astype(np.float32)
    )


def test_defaults_fit_resolution_61():
    data = generate_darcy_mesh(1, 61, seed=0, progress=False)
    assert data["coords"].shape == (1, 600, 2)
    assert 300 <= data["mask"].sum() <= 600
    assert data["attrs"]["points_min"] == 300 and data["attrs"]["points_max"] == 600


@pytest.mark.parametrize(
    "kwargs, needles",
    [
        (dict(points_min=50, points_max=40), ("points_min 50", "points_max 40")),
        (dict(points_min=10, points_max=S * S + 1), ("points_max", f"{S * S} nodes", f"<= {S * S}")),
        (dict(points_min=0, points_max=40), ("points_min 0", "positive integer")),
        (dict(points_min=10, points_max=-3), ("points_max -3",)),
        (dict(points_min=10.5, points_max=40), ("points_min 10.5",)),
        (dict(points_min=True, points_max=40), ("points_min True",)),
        (dict(points_min=10, points_max=40, seed=-1), ("seed -1",)),
    ],
)
def test_sampling_errors_name_the_field(grid, kwargs, needles):
    kwargs = {"seed": 0, **kwargs}
    with pytest.raises(UserInputError) as excinfo:
        sample_point_sets(grid, **kwargs)
    _one_line(excinfo, *needles)


def test_bad_grid_data(grid):
    with pytest.raises(UserInputError) as excinfo:
        sample_point_sets({"input": grid["input"]}, points_min=1, points_max=2, seed=0)
    _one_line(excinfo, "grid_data", "output")
    with pytest.raises(UserInputError) as excinfo:
        sample_point_sets(
            {"input": grid["input"], "output": grid["output"][:, :-1]}, points_min=1, points_max=2, seed=0
        )
    _one_line(excinfo, "grid_data", "shapes")


def test_generate_darcy_mesh_checks_points_before_solving():
    with pytest.raises(UserInputError) as excinfo:
        generate_darcy_mesh(1000, 17, seed=0, progress=False)  # default points_max 600 > 289 nodes
    _one_line(excinfo, "points_max 600", "289 nodes", "resolution >= 25")


# ----------------------------------------------------------------------------- HDF5 schema


def test_round_trip(tmp_path, points):
    path = tmp_path / "p.h5"
    assert write_point_dataset(path, points) == path
    back = read_point_dataset(path)
    for key in ("coords", "input", "output", "mask"):
        np.testing.assert_array_equal(back[key], points[key])
    assert back["mask"].dtype == bool
    np.testing.assert_array_equal(back["n_points"], points["mask"].sum(1))
    attrs = back["attrs"]
    assert attrs["schema"] == "mutransfer-points" and attrs["schema_version"] == 1
    assert attrs["problem"] == "darcy_mesh" and attrs["n_samples"] == 8
    assert attrs["max_points"] == PMAX and attrs["coord_dim"] == 2 and attrs["seed"] == 5
    assert attrs["mutransfer_version"] == mutransfer.__version__
    assert dt.datetime.fromisoformat(attrs["created"].replace("Z", "+00:00")).utcoffset() == dt.timedelta(0)
    for k, v in points["attrs"].items():
        assert attrs[k] == v and type(attrs[k]) is type(v), k
    with h5py.File(path, "r") as f:
        assert f["coords"].dtype == np.float32 and f["mask"].dtype == np.uint8
        assert f["n_points"].shape == (8,) and f["n_points"].dtype.kind == "i"
    # writing what was read gives the same arrays again
    write_point_dataset(tmp_path / "again.h5", back)
    again = read_point_dataset(tmp_path / "again.h5")
    for key in ("coords", "input", "output", "mask", "n_points"):
        np.testing.assert_array_equal(again[key], back[key])
    assert again["attrs"]["created"] == attrs["created"]


def test_write_is_atomic_and_leaves_no_temp_file(tmp_path, points):
    path = tmp_path / "p.h5"
    write_point_dataset(path, points)
    bad = dict(points, mask=points["mask"][:, :-1])
    with pytest.raises(UserInputError):
        write_point_dataset(path, bad)
    assert read_point_dataset(path)["coords"].shape == points["coords"].shape
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.h5"]


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda d: d.update(mask=d["mask"][:, :-1]), "mask shape"),
        (lambda d: d.update(input=d["input"][:, :, 0]), "input shape"),
        (lambda d: d.update(output=d["output"][:-1]), "output shape"),
        (lambda d: d.pop("coords"), "'coords'"),
        (lambda d: d.update(attrs={}), "problem"),
    ],
)
def test_write_errors(tmp_path, points, change, needle):
    data = dict(points)
    change(data)
    with pytest.raises(UserInputError) as excinfo:
        write_point_dataset(tmp_path / "x.h5", data)
    _one_line(excinfo, needle)
    assert not (tmp_path / "x.h5").exists()


def test_is_point_file(tmp_path, point_file, grid):
    assert is_point_file(point_file)
    assert is_point_file(str(point_file))
    grid_path = write_dataset(tmp_path / "grid.h5", grid)
    assert not is_point_file(grid_path)
    assert not is_point_file(tmp_path / "missing.h5")
    assert not is_point_file(tmp_path)  # a directory
    (tmp_path / "text.h5").write_text("not hdf5")
    assert not is_point_file(tmp_path / "text.h5")
    (tmp_path / "empty.h5").write_bytes(b"")
    assert not is_point_file(tmp_path / "empty.h5")


def test_header(point_file):
    h = point_file_header(point_file)
    assert h["n_samples"] == 8 and h["problem"] == "darcy_mesh" and h["coord_dim"] == 2
    assert h["max_points"] == PMAX and h["in_channels"] == 1 and h["out_channels"] == 1
    assert h["attrs"]["points_min"] == PMIN


def test_inspect(point_file, points):
    info = inspect_point_dataset(point_file)
    counts = points["mask"].sum(1)
    assert info["points"] == {"min": int(counts.min()), "mean": float(counts.mean()), "max": int(counts.max())}
    assert info["datasets"]["coords"]["shape"] == (8, PMAX, 2)
    real = points["output"][points["mask"]]
    assert info["datasets"]["output"]["min"] == pytest.approx(float(real.min()))
    assert info["datasets"]["output"]["max"] == pytest.approx(float(real.max()))


def _damaged(src, dst, edit):
    import shutil

    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        edit(f)
    return dst


@pytest.mark.parametrize(
    "reader",
    [read_point_dataset, point_file_header, inspect_point_dataset, lambda p: load_point_split(p, n_train=1, n_test=1)],
)
def test_file_errors(tmp_path, point_file, grid, reader):
    missing = tmp_path / "missing.h5"
    with pytest.raises(UserInputError) as excinfo:
        reader(missing)
    _one_line(excinfo, str(missing), "not found", "mutransfer data generate darcy_mesh --out")

    text = tmp_path / "text.h5"
    text.write_text("hello")
    with pytest.raises(UserInputError) as excinfo:
        reader(text)
    _one_line(excinfo, str(text), "not an HDF5 file", "mutransfer data generate darcy_mesh")

    grid_path = write_dataset(tmp_path / "grid.h5", grid)
    with pytest.raises(UserInputError) as excinfo:
        reader(grid_path)
    _one_line(excinfo, str(grid_path), "grid data (darcy)", "use it with problem darcy", "darcy_mesh")

    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.attrs["schema"] = "something-else"
    with pytest.raises(UserInputError) as excinfo:
        reader(other)
    _one_line(excinfo, str(other), "something-else", "mutransfer-points")

    no_mask = _damaged(point_file, tmp_path / "no_mask.h5", lambda f: f.__delitem__("mask"))
    with pytest.raises(UserInputError) as excinfo:
        reader(no_mask)
    _one_line(excinfo, str(no_mask), "no 'mask' dataset", "mutransfer data generate darcy_mesh")

    def shrink_output(f):
        out = f["output"][:, :-1]
        del f["output"]
        f["output"] = out

    bad_shape = _damaged(point_file, tmp_path / "bad_shape.h5", shrink_output)
    with pytest.raises(UserInputError) as excinfo:
        reader(bad_shape)
    _one_line(excinfo, str(bad_shape), "output shape", "does not match coords")

    newer = _damaged(point_file, tmp_path / "newer.h5", lambda f: f.attrs.__setitem__("schema_version", 2))
    with pytest.raises(UserInputError) as excinfo:
        reader(newer)
    _one_line(excinfo, str(newer), "schema_version 2", "upgrade mutransfer")


def test_inconsistent_counts_are_reported(tmp_path, point_file):
    def edit(f):
        f["n_points"][0] = f["n_points"][0] + 1

    bad = _damaged(point_file, tmp_path / "bad_counts.h5", edit)
    with pytest.raises(UserInputError) as excinfo:
        read_point_dataset(bad)
    _one_line(excinfo, str(bad), "n_points[0]", "damaged")


def test_grid_readers_refuse_point_files(point_file):
    for call in (
        lambda: read_dataset(point_file),
        lambda: load_split(point_file, n_train=2, n_test=2),
        lambda: describe(point_file),
    ):
        with pytest.raises(UserInputError) as excinfo:
            call()
        _one_line(excinfo, str(point_file), "point sets", "use problem darcy_mesh")


# ----------------------------------------------------------------------------- packed splits


def test_load_point_split(point_file, points):
    split = load_point_split(point_file, n_train=5, n_test=2)
    counts = points["mask"].sum(1)
    used = np.r_[0:5, 6:8]
    p = int(counts[used].max())  # real points come first, so P trims to the largest count
    assert split.train_x.shape == (5, p, 2 + 1 + 1) and split.test_x.shape == (2, p, 4)
    assert split.train_y.shape == (5, p, 1) and split.test_y.shape == (2, p, 1)
    assert split.train_x.dtype == torch.float32 and split.train_y.dtype == torch.float32
    assert split.grid_shape == (p,) and split.problem == "darcy_mesh"
    assert split.source == {
        "format": "mutransfer-points",
        "coord_dim": 2,
        "in_channels": 1,
        "out_channels": 1,
        "max_points": p,
    }
    assert split.attrs["points_max"] == PMAX
    for x, y, rows in ((split.train_x, split.train_y, range(0, 5)), (split.test_x, split.test_y, range(6, 8))):
        coords, features, mask = unpack_points(x, 2)
        rows = list(rows)
        np.testing.assert_array_equal(mask.numpy(), points["mask"][rows, :p])
        np.testing.assert_array_equal(coords.numpy(), points["coords"][rows, :p])
        np.testing.assert_array_equal(features.numpy(), points["input"][rows, :p])
        np.testing.assert_array_equal(y.numpy(), points["output"][rows, :p])
        assert set(x[..., -1].unique().tolist()) <= {0.0, 1.0}
        assert not y[~mask].any() and not x[~mask].any()


def test_load_point_split_sample_errors(point_file):
    with pytest.raises(UserInputError) as excinfo:
        load_point_split(point_file, n_train=6, n_test=3)
    _one_line(excinfo, "n_train 6 + n_test 3", "8 samples", str(point_file))
    with pytest.raises(UserInputError) as excinfo:
        load_point_split(point_file, n_train=0, n_test=3)
    _one_line(excinfo, "n_train 0")


def test_relative_l2_on_packed_tensors_is_per_sample_relative_l2_on_real_points(point_file):
    split = load_point_split(point_file, n_train=6, n_test=2)
    x, y = split.train_x, split.train_y
    _, _, mask = unpack_points(x, 2)
    gen = torch.Generator().manual_seed(0)
    pred = y + 0.05 * torch.randn(y.shape, generator=gen)
    pred[~mask] = 1e3  # anything at padding ...
    pred = torch.where(mask.unsqueeze(-1), pred, torch.zeros(()))  # ... zeroed, as the operators return it
    expected = []
    for i in range(x.shape[0]):
        real = mask[i]
        diff = torch.linalg.vector_norm(pred[i][real] - y[i][real])
        expected.append(diff / torch.linalg.vector_norm(y[i][real]))
    expected = torch.stack(expected).mean()
    got = relative_l2(pred, y)
    assert got.item() == pytest.approx(expected.item(), rel=1e-6)
    assert got.item() > 0.01  # the noise was seen


# ----------------------------------------------------------------------------- registry


def test_registry_entry():
    p = problems.get_problem("darcy_mesh")
    assert p.kind == "points" and p.dim == 2 and not p.periodic and p.padding == 0
    assert p.generated_resolution == 61 and p.n_train == 400 and p.n_test == 100
    assert p.generator_options == ("points_min", "points_max")
    assert all(q.kind == "grid" for name, q in problems.PROBLEMS.items() if name != "darcy_mesh")


def test_default_dataset_writes_point_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path))
    base = problems.PROBLEMS["darcy_mesh"]

    def small(n, resolution, *, seed, progress=True):
        return generate_darcy_mesh(n, resolution, seed=seed, progress=progress, points_min=5, points_max=15)

    p = problems.Problem(**{**base.__dict__, "generator": small, "n_train": 3, "n_test": 1, "generated_resolution": 9})
    path = problems.default_dataset(p, progress=False)
    assert is_point_file(path) and point_file_header(path)["n_samples"] == 4
    assert problems.default_dataset(p, progress=False) == path  # cached


# ----------------------------------------------------------------------------- CLI


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TQDM_DISABLE="1"),
    )


@pytest.mark.slow  # commands in processes of their own (the default suite stays under 5 min)
def test_cli_generate_and_inspect(tmp_path):
    out = tmp_path / "mesh.h5"
    proc = _cli(
        "data",
        "generate",
        "darcy_mesh",
        "--n",
        4,
        "--resolution",
        13,
        "--points-min",
        10,
        "--points-max",
        40,
        "--seed",
        2,
        "--out",
        out,
        "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote 4 darcy_mesh samples" in proc.stdout
    data = read_point_dataset(out)
    assert data["coords"].shape == (4, 40, 2) and data["attrs"]["seed"] == 2
    assert data["attrs"]["points_min"] == 10 and data["attrs"]["grid_resolution"] == 13
    proc = _cli("data", "inspect", out, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    counts = data["mask"].sum(1)
    assert info["format"] == "mutransfer-points" and info["problem"] == "darcy_mesh"
    assert info["datasets"]["coords"]["shape"] == [4, 40, 2]
    assert info["points"] == {"min": int(counts.min()), "mean": float(counts.mean()), "max": int(counts.max())}
    assert info["attrs"]["points_max"] == 40


def test_cli_inspect_text(point_file, capsys):
    assert main(["data", "inspect", str(point_file)]) == 0
    out = capsys.readouterr().out
    assert "format: mutransfer-points" in out and "problem: darcy_mesh" in out
    assert "points:" in out and "min:" in out and "(8, 80, 2)" in out and "points_min: 20" in out


def test_cli_bad_flag_is_one_line_exit_2(tmp_path):
    proc = _cli(
        "data", "generate", "darcy_mesh", "--n", 2, "--resolution", 13, "--points-min", 0, "--out", tmp_path / "x.h5"
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--points-min" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize(
    "args, needles",
    [
        (["darcy_mesh", "--points-min", "50", "--points-max", "40"], ("points_min 50", "points_max 40")),
        (["darcy_mesh", "--points-min", "10", "--points-max", "200"], ("points_max 200", "169 nodes")),
        (["darcy_mesh", "--points-max", "100"], ("points_min 300 exceeds points_max 100", "default", "points_min")),
        (["darcy_mesh"], ("points_max 600", "resolution >= 25")),
        (["darcy", "--points-max", "20"], ("--points-max applies to darcy_mesh only",)),
    ],
)
def test_cli_generate_errors(tmp_path, capsys, args, needles):
    out = tmp_path / "x.h5"
    code = main(["data", "generate", *args, "--n", "2", "--resolution", "13", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()


def test_cli_inspect_rejects_reader_flags_for_point_files(point_file, capsys):
    assert main(["data", "inspect", str(point_file), "--input-key", "a"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--input-key" in err and "drop it" in err


def test_a_sample_with_no_real_point_is_refused_when_read(tmp_path, points):
    """A population's models check no input values (operators.value_checks): an empty sample is refused here, in one
    line naming it, and the file without it reads."""
    path = tmp_path / "empty.h5"
    write_point_dataset(path, points)
    with h5py.File(path, "r+") as f:  # sample 3 loses its points, its count kept consistent
        mask = f["mask"][()]
        mask[3] = 0
        f["mask"][...] = mask
        counts = f["n_points"][()]
        counts[3] = 0
        f["n_points"][...] = counts
    with pytest.raises(UserInputError) as excinfo:
        read_point_dataset(path)
    _one_line(excinfo, "sample 3 has no real point", "remove the empty samples")
    fresh = write_point_dataset(tmp_path / "fresh.h5", points)
    assert read_point_dataset(fresh)["n_points"].min() > 0
