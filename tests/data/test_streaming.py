"""Lazy HDF5 streaming: LazySamples equal the loaded tensors, batches, the automatic choice, memory caps."""

import os
import pickle
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
import scipy.io
import torch

from mutransfer.data import _streaming as streaming
from mutransfer.data._hdf5_io import write_dataset
from mutransfer.data._loading import SplitData, load_split
from mutransfer.data._readers import LazyArray
from mutransfer.data._streaming import (
    STREAM_MEMORY_FRACTION,
    LazySamples,
    StreamingSplit,
    iterate_batches,
    iterate_chunks,
    should_stream,
)
from mutransfer.errors import UserInputError

KEYS = ("train_x", "train_y", "test_x", "test_y")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _one_line(excinfo, *needles):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, msg


def _f32(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def _case(tmp_path, name):
    """(path, load_split kwargs, expected train/test tensors computed with numpy from the written arrays)."""
    rng = np.random.default_rng(1)
    if name == "burgers":  # 1D periodic, 32 -> 8: every 4th point
        x, y = rng.standard_normal((20, 32)), rng.standard_normal((20, 32))
        grid = {"x": np.arange(32) / 32}
        kwargs = dict(n_train=13, n_test=5, resolution=8)
        sel_x = sel_y = (slice(None), slice(None, None, 4))
    elif name == "darcy":  # node grid incl. boundary, 13 -> 7: nodes 0, 2, ..., 12
        x, y = rng.standard_normal((15, 13, 13)), rng.standard_normal((15, 13, 13))
        grid = {"x": np.linspace(0, 1, 13), "y": np.linspace(0, 1, 13)}
        kwargs = dict(n_train=9, n_test=4, resolution=7)
        sel_x = sel_y = (slice(None), slice(None, None, 2), slice(None, None, 2))
    else:  # Navier-Stokes: w0 (n, 8, 8) -> w (n, 8, 8, 6); 8 -> 4 in space, 6 -> 3 times (t_2, t_4, t_6)
        x, y = rng.standard_normal((12, 8, 8)), rng.standard_normal((12, 8, 8, 6))
        grid = {"x": np.arange(8) / 8, "y": np.arange(8) / 8, "t": np.arange(1, 7) / 6}
        kwargs = dict(n_train=7, n_test=4, resolution=4, time_resolution=3, problem="navier_stokes")
        sel_x = (slice(None), slice(None, None, 2), slice(None, None, 2))
        sel_y = sel_x + (slice(1, None, 2),)
    path = write_dataset(tmp_path / f"{name}.h5", {"input": x, "output": y, "grid": grid, "attrs": {"problem": name}})
    n, ntr, nte = len(x), kwargs["n_train"], kwargs["n_test"]
    ex, ey = _f32(x[sel_x])[..., None], _f32(y[sel_y])[..., None]
    if name == "navier_stokes":
        ex = ex.unsqueeze(-2).expand(*ex.shape[:-1], 3, 1)
    return path, kwargs, {"train_x": ex[:ntr], "train_y": ey[:ntr], "test_x": ex[n - nte :], "test_y": ey[n - nte :]}


@pytest.mark.parametrize("read", ["default", "one_row_reads", "merged_reads"])
@pytest.mark.parametrize("name", ["burgers", "darcy", "navier_stokes"])
def test_lazy_samples_equal_loaded_tensors(tmp_path, monkeypatch, name, read):
    path, kwargs, expected = _case(tmp_path, name)
    if read == "one_row_reads":  # no gap merging, every read a single row
        monkeypatch.setattr(streaming, "_GAP_BYTES", 0)
        monkeypatch.setattr(streaming, "_BLOCK_BYTES", 1)
    elif read == "merged_reads":  # one covering read, gaps discarded
        monkeypatch.setattr(streaming, "_GAP_BYTES", 2**30)
    loaded = load_split(path, stream=False, **kwargs)
    lazy = load_split(path, stream=True, **kwargs)
    assert isinstance(lazy, StreamingSplit) and lazy.streaming and not loaded.streaming
    assert (lazy.grid_shape, lazy.problem, lazy.resolution) == (loaded.grid_shape, loaded.problem, loaded.resolution)
    assert lazy.source == loaded.source and lazy.attrs == loaded.attrs
    assert lazy.grid.keys() == loaded.grid.keys()
    assert all(np.array_equal(lazy.grid[k], loaded.grid[k]) for k in lazy.grid)
    for key in KEYS:
        t, x, want = getattr(loaded, key), getattr(lazy, key), expected[key]
        assert torch.equal(t, want), key  # the loaded path itself matches numpy
        assert isinstance(x, LazySamples) and x.dtype == torch.float32
        assert x.shape == tuple(t.shape) and len(x) == len(t)
        floats = {"burgers": (8, 8), "darcy": (49, 49), "navier_stokes": (16, 48)}[name]  # per row: input, output
        assert x.nbytes_in_memory == len(x) * floats[key.endswith("y")] * 4  # the NS input before broadcasting
        n = len(t)
        for k in (slice(None), slice(1, None, 3), slice(None, None, 2), slice(2, 2), slice(-3, None)):
            assert torch.equal(x[k], want[k]), (key, k)
        assert torch.equal(x[::-2], want.flip(0)[::2])
        perm = [n - 1, 0, 2, 2, 1, n - 1, 0]
        for idx in (torch.tensor(perm), perm, np.array(perm), torch.tensor([], dtype=torch.long), [-1, 0]):
            got = x[idx]
            assert got.dtype == torch.float32 and got.device.type == "cpu"
            assert torch.equal(got, want[torch.as_tensor(idx, dtype=torch.long)]), (key, idx)
        assert torch.equal(x[1], want[1]) and torch.equal(x[-1], want[-1])
        sub = x.subset(range(1, n, 2)).subset(torch.tensor([1, 0, 0]))
        assert sub.shape == (3,) + x.shape[1:] and torch.equal(sub[:], want[1::2][[1, 0, 0]])
        if key.endswith("x") and name == "navier_stokes":
            assert x[:2].stride()[-2] == 0  # broadcast like load_split: an expanded view
        with pytest.raises(IndexError):
            x[[n]]


def test_subset_reads_nothing_and_shards(tmp_path, monkeypatch):
    path, kwargs, expected = _case(tmp_path, "burgers")
    x = load_split(path, stream=True, **kwargs).train_x
    monkeypatch.setattr(LazyArray, "read", lambda *a: pytest.fail("subset read the file"))
    shards = [x.subset(range(rank, len(x), 3)) for rank in range(3)]
    assert [len(s) for s in shards] == [5, 4, 4]
    monkeypatch.undo()
    for rank, s in enumerate(shards):
        assert torch.equal(s[:], expected["train_x"][rank::3])


def test_iterate_batches_and_chunks_match_in_memory(tmp_path):
    path, kwargs, expected = _case(tmp_path, "navier_stokes")
    loaded = load_split(path, stream=False, **kwargs)
    lazy = load_split(path, stream=True, **kwargs)
    order = torch.randperm(7, generator=torch.Generator().manual_seed(3))
    ex, ey = expected["train_x"], expected["train_y"]
    want = [(ex[order[b * 3 : b * 3 + 3]], ey[order[b * 3 : b * 3 + 3]]) for b in (1, 2)]  # start_batch 1; last short
    in_memory = list(iterate_batches(loaded.train_x, loaded.train_y, order, 3, 1))
    for workers in (0, 2):
        streamed = list(iterate_batches(lazy.train_x, lazy.train_y, order, 3, 1, num_workers=workers))
        for got in (in_memory, streamed):
            assert len(got) == 2 and [len(xb) for xb, _ in got] == [3, 1]
            for (xb, yb), (wx, wy) in zip(got, want):
                assert torch.equal(xb, wx) and torch.equal(yb, wy)
    assert list(iterate_batches(lazy.train_x, lazy.train_y, order, 3, 3)) == []
    for bs in (3, 4):
        chunks = [list(iterate_chunks(s.test_x, s.test_y, bs)) for s in (loaded, lazy)]
        for got in chunks:
            assert [len(xb) for xb, _ in got] == [bs, 4 - bs] if bs < 4 else [4]
            assert torch.equal(torch.cat([xb for xb, _ in got]), expected["test_x"])
            assert torch.equal(torch.cat([yb for _, yb in got]), expected["test_y"])


@pytest.mark.parametrize(
    "nbytes, max_memory, available, want",
    [
        (101, 100, None, True),
        (100, 100, None, False),
        (100, 200, 1, False),
        (501, None, 1000, True),
        (500, None, 1000, False),
        (10**15, None, None, False),
    ],
)
def test_should_stream(nbytes, max_memory, available, want):
    assert STREAM_MEMORY_FRACTION == 0.5
    assert should_stream(nbytes, max_memory, available) is want


def test_automatic_choice(tmp_path, monkeypatch):
    path, kwargs, _ = _case(tmp_path, "navier_stokes")
    # 11 samples, input 4x4 (before broadcasting) + output 4x4x3, float32
    nbytes = 11 * 4 * (16 + 48)
    assert type(load_split(path, max_memory=nbytes, **kwargs)) is SplitData
    assert type(load_split(path, max_memory=nbytes - 1, **kwargs)) is StreamingSplit
    assert type(load_split(path, max_memory=1, stream=False, **kwargs)) is SplitData
    assert type(load_split(path, max_memory=10**12, stream=True, **kwargs)) is StreamingSplit
    monkeypatch.setattr("mutransfer.data._loading.available_memory", lambda: 2 * nbytes)
    assert type(load_split(path, **kwargs)) is SplitData
    monkeypatch.setattr("mutransfer.data._loading.available_memory", lambda: 2 * nbytes - 2)
    assert type(load_split(path, **kwargs)) is StreamingSplit
    # validation comes first, with the same errors either way
    for stream in (True, False, None):
        with pytest.raises(UserInputError, match="exceeds the 12 samples"):
            load_split(path, n_train=12, n_test=1, stream=stream, max_memory=1)
        with pytest.raises(UserInputError, match="time_resolution 5"):
            load_split(path, n_train=2, n_test=1, time_resolution=5, stream=stream, max_memory=1)
    with pytest.raises(UserInputError) as excinfo:
        load_split(path, n_train=2, n_test=1, stream="yes")
    _one_line(excinfo, "stream 'yes'")
    with pytest.raises(UserInputError) as excinfo:
        load_split(path, n_train=2, n_test=1, max_memory=0)
    _one_line(excinfo, "max_memory 0")


def test_formats_that_cannot_stream(tmp_path):
    a, u = np.random.default_rng(0).standard_normal((2, 6, 16))
    pt, mat = tmp_path / "d.pt", tmp_path / "d.mat"
    torch.save({"x": torch.from_numpy(a), "y": torch.from_numpy(u)}, pt)
    scipy.io.savemat(mat, {"a": a, "u": u})
    for path in (pt, mat):
        with pytest.raises(UserInputError) as excinfo:
            load_split(path, n_train=4, n_test=2, stream=True)
        _one_line(excinfo, str(path), "cannot be streamed", "--no-stream")
        # automatic: these readers hold the whole file anyway, so the split is loaded
        split = load_split(path, n_train=4, n_test=2, max_memory=1)
        assert type(split) is SplitData and torch.equal(split.test_y[..., 0], _f32(u[4:]))


def test_other_hdf5_formats_stream(tmp_path):
    """MATLAB v7.3 (stored transposed: samples on the last axis) and PDEBench (a broadcast space-time slice)."""
    rng = np.random.default_rng(2)
    a, u = rng.standard_normal((9, 9, 9)), rng.standard_normal((9, 9, 9))
    mat = tmp_path / "m.mat"
    with h5py.File(mat, "w") as f:
        for name, value in (("coeff", a), ("sol", u)):
            f.create_dataset(name, data=value.T).attrs["MATLAB_class"] = np.bytes_("double")
    tensor = rng.standard_normal((9, 7, 17))  # (N, t, x)
    pde = tmp_path / "p.h5"
    with h5py.File(pde, "w") as f:
        f["tensor"], f["x-coordinate"], f["t-coordinate"] = tensor, np.linspace(0, 1, 17), np.arange(7.0)
    w0 = _f32(tensor[:, 0, ::2])[:, :, None, None].expand(9, 9, 3, 1)
    cases = [  # node grids 9 -> 5 and 17 -> 9 (stride 2); PDEBench times 1..6 -> 2, 4, 6
        (mat, {}, _f32(a[:, ::2, ::2])[..., None], _f32(u[:, ::2, ::2])[..., None]),
        (pde, dict(output_time="1:", time_resolution=3), w0, _f32(np.moveaxis(tensor[:, 2::2, ::2], 1, -1))[..., None]),
    ]
    for path, kwargs, ex, ey in cases:
        kwargs = dict(kwargs, n_train=5, n_test=3, problem="darcy", resolution=5 if path == mat else 9)
        loaded, lazy = load_split(path, stream=False, **kwargs), load_split(path, stream=True, **kwargs)
        assert torch.equal(loaded.train_x, ex[:5]) and torch.equal(loaded.test_y, ey[6:])
        assert torch.equal(lazy.train_y[[4, 0, 4]], ey[[4, 0, 4]]) and torch.equal(lazy.test_x[::2], ex[6::2])
        for key in KEYS:
            assert torch.equal(getattr(lazy, key)[:], getattr(loaded, key)), (path, key)


def test_pickles_small_and_reads_in_a_fresh_process(tmp_path):
    small, kwargs, expected = _case(tmp_path, "burgers")
    rng = np.random.default_rng(4)
    arrays = {"input": rng.standard_normal((4000, 256)), "output": rng.standard_normal((4000, 256))}
    big = write_dataset(
        tmp_path / "big.h5", {**arrays, "grid": {"x": np.arange(256) / 256}, "attrs": {"problem": "burgers"}}
    )
    big_x = load_split(big, n_train=3900, n_test=100, stream=True).train_x.subset(range(1, 3900, 2))
    x = load_split(small, stream=True, **kwargs).train_x.subset([5, 1, 3])
    assert big_x.nbytes_in_memory == 1950 * 256 * 4
    assert len(pickle.dumps(big_x)) < 10_000 and len(pickle.dumps(x)) < 10_000
    x[:]  # the parent's handle is open: it must not travel
    blob = tmp_path / "x.pkl"
    blob.write_bytes(pickle.dumps(x))
    out = tmp_path / "out.pt"
    code = "import pickle, sys, torch; x = pickle.load(open(sys.argv[1], 'rb')); torch.save(x[[2, 0, 0]], sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, str(blob), str(out)], check=True, env=ENV, cwd=tmp_path, timeout=120)
    assert torch.equal(torch.load(out), expected["train_x"][[3, 5, 5]])


def test_each_process_opens_its_own_read_only_handle(tmp_path, monkeypatch):
    path, kwargs, expected = _case(tmp_path, "darcy")
    x = load_split(path, stream=True, **kwargs).test_y
    x[:1]
    key = next(k for k in streaming._OPEN if k[0] == str(path))
    first = streaming._OPEN[key][2]
    assert first._file.mode == "r"
    monkeypatch.setattr(streaming.os, "getpid", lambda: -1)  # as seen from a forked worker
    assert torch.equal(x[[3, 1]], expected["test_y"][[3, 1]])
    assert streaming._OPEN[key][0] == -1 and streaming._OPEN[key][2] is not first
    monkeypatch.undo()
    # a file replaced on disk by one of another shape is reopened and reported, not misread
    write_dataset(
        path,
        {
            "input": np.zeros((15, 9, 9)),
            "output": np.zeros((15, 9, 9)),
            "grid": {"x": np.linspace(0, 1, 9), "y": np.linspace(0, 1, 9)},
            "attrs": {"problem": "darcy"},
        },
    )
    with pytest.raises(UserInputError) as excinfo:
        x[:1]
    _one_line(excinfo, "changed on disk")


# A child process under a hard cap on its data memory: RLIMIT_DATA = its VmData after the imports
# (heap and private writable mappings: numpy/torch buffers) + HEADROOM. argv: path n_train n_test mode out
CAPPED = textwrap.dedent(
    """
    import resource, sys
    import numpy as np, torch
    from mutransfer.data._loading import load_split
    from mutransfer.data._streaming import iterate_batches

    HEADROOM = 64 * 2**20
    path, n_train, n_test, mode, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    torch.set_num_threads(1)
    order = torch.randperm(n_train, generator=torch.Generator().manual_seed(0))

    def status(field):
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(field + ":"))

    cap = status("VmData") + HEADROOM
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    if mode == "load":
        try:
            load_split(path, n_train=n_train, n_test=n_test, stream=False)
        except MemoryError:
            sys.exit(3)
        sys.exit(0)
    split = load_split(path, n_train=n_train, n_test=n_test, stream=None, max_memory=HEADROOM)
    assert split.streaming, type(split)
    sums, bs, peak = np.zeros(n_train, dtype=np.int64), 100, 0
    for b, (xb, yb) in enumerate(iterate_batches(split.train_x, split.train_y, order, bs)):
        # exact, order-free checksum per row: the float32 bit patterns summed as int64 (numpy: no big temporaries)
        bits = [t.numpy().view(np.int32).reshape(len(t), -1).sum(1, dtype=np.int64) for t in (xb, yb)]
        np.add.at(sums, order[b * bs : (b + 1) * bs].numpy(), bits[0] + 3 * bits[1])
        peak = max(peak, status("VmData"))
    np.save(out, sums)
    print(f"cap {cap >> 20} MiB, peak VmData {peak >> 20} MiB")
    """
)


def _write_large(path, n: int, size: int) -> int:
    """A project-schema Burgers-like file (n, size) input and output, written in chunks; returns its bytes."""
    rng = np.random.default_rng(7)
    with h5py.File(path, "w") as f:
        for key in ("input", "output"):
            ds = f.create_dataset(key, shape=(n, size), dtype=np.float32)
            for s in range(0, n, 500):
                ds[s : s + 500] = rng.random((min(500, n - s), size), dtype=np.float32)
        f.create_dataset("grid/x", data=np.arange(size) / size)
        f.attrs.update(schema="mutransfer-pde", schema_version=1, problem="burgers", n_samples=n, resolution=size)
    return os.path.getsize(path)


@pytest.mark.slow  # a training in a process of its own (the default suite stays under 5 min)
def test_streaming_under_a_memory_cap_smaller_than_the_data(tmp_path):
    path, out = tmp_path / "large.h5", tmp_path / "sums.npy"
    n, n_train, n_test = 4000, 3600, 400
    assert _write_large(path, n, 8192) > 250 * 2**20  # 4000 x 8192 x 4 B x 2 arrays = 250 MiB
    expected = np.zeros(n_train, dtype=np.int64)  # per training row: bits(x) + 3 bits(y), read with h5py
    with h5py.File(path, "r") as f:
        for s in range(0, n_train, 400):
            bits = [f[k][s : s + 400].view(np.int32).sum(1, dtype=np.int64) for k in ("input", "output")]
            expected[s : s + 400] = bits[0] + 3 * bits[1]

    def child(mode):
        args = [sys.executable, "-c", CAPPED, str(path), str(n_train), str(n_test), mode, str(out)]
        return subprocess.run(args, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300)

    streamed = child("stream")
    assert streamed.returncode == 0, streamed.stderr[-3000:]
    np.testing.assert_array_equal(np.load(out), expected)
    loaded = child("load")  # the same cap stops the loaded path: the check can fail
    assert loaded.returncode == 3, (loaded.returncode, loaded.stderr[-3000:])
