"""Bad data and oversized models are refused at load time / before allocation, and their fixed versions pass.

One test per kind of bad data (NaN in inputs, Inf in outputs, empty, input/output shape
mismatch, wrong dimension for the problem), each with the same file repaired; the size
checks (K against the grid, the planner against the memory) before anything is built;
and the peak memory of `mutransfer train --modes 100000` (FNO) and `--operator galerkin --width 1000000`
while they are refused.
"""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from mutransfer.data._loading import load_split
from mutransfer.errors import UserInputError
from tests.fuzz_harness import run_cli, write_grid_file
from tests.fuzz_inputs import corrupt
from tests.repo_paths import ROOT


def _load(path):
    return load_split(path, n_train=8, n_test=4, problem="burgers", stream=False)


def _repair_non_finite(path):
    with h5py.File(path, "r+") as f:
        for name in ("input", "output"):
            f[name][...] = np.nan_to_num(f[name][...], nan=0.0, posinf=0.0, neginf=0.0)


@pytest.mark.parametrize(
    "kind, message",
    [
        ("nan-input", r"array 'input' holds NaN values in sample 5"),
        ("inf-output", r"array 'output' holds Inf values in sample 5"),
    ],
)
def test_non_finite_values_are_refused_at_load_and_the_repaired_file_loads(tmp_path, kind, message):
    path = write_grid_file(tmp_path / "d.h5", n=12, resolution=64)
    corrupt(path, kind, 0.45)  # sample 5 of 12
    with pytest.raises(UserInputError, match=message):
        _load(path)
    _repair_non_finite(path)
    assert _load(path).train_x.shape == (8, 64, 1)


def test_non_finite_values_are_refused_when_streamed_too(tmp_path):
    path = write_grid_file(tmp_path / "d.h5", n=12, resolution=64)
    corrupt(path, "nan-output", 0.99)  # the last sample: in the test split
    with pytest.raises(UserInputError, match=r"'output' holds NaN values in sample 11"):
        load_split(path, n_train=8, n_test=4, problem="burgers", stream=True)
    _repair_non_finite(path)
    assert load_split(path, n_train=8, n_test=4, problem="burgers", stream=True).streaming


@pytest.mark.parametrize(
    "kind, message",
    [
        ("empty", r"input shape \(0, 64\) and output shape \(0, 64\) must be equal \(n, \*grid\) with n >= 1"),
        ("fewer-outputs", r"input shape \(12, 64\) and output shape \(5, 64\) must be equal"),
        ("output-grid-mismatch", r"input shape \(12, 64\) and output shape \(12, 31\) must be equal"),
        ("wrong-ndim", r"2-dimensional grid .* problem 'burgers' trains a 1-D grid operator"),
    ],
)
def test_structural_problems_are_refused_and_a_well_formed_file_loads(tmp_path, kind, message):
    path = write_grid_file(tmp_path / "d.h5", n=12, resolution=64)
    assert _load(path).train_y.shape == (8, 64, 1)  # the file before it is broken
    corrupt(path, kind, 0.5)
    with pytest.raises(UserInputError, match=message):
        _load(path)


def test_bad_data_is_one_line_from_the_real_command_and_nothing_is_written(tmp_path):
    path = write_grid_file(tmp_path / "d.h5", n=12, resolution=64)
    corrupt(path, "nan-input", 0.0)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUTRANSFER_CACHE=str(work / "cache"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mutransfer",
            "train",
            "--problem",
            "burgers",
            "--data",
            str(path),
            "--epochs",
            "1",
            "--no-progress",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "holds NaN values in sample 0" in proc.stderr
    assert list(work.iterdir()) == []


# ----------------------------------------------------------------------------- sizes before allocation


def test_k_against_the_grid_before_building():
    from mutransfer._training.memory import check_before_building

    fno = dict(dim=1, modes=129, width=8, layers=2, in_channels=1, out_channels=1, projection_channels=16, padding=0)
    assert check_before_building(fno, (256,), 4, "cpu", limit=2**30).modes == 129  # K = N/2 + 1: the largest
    with pytest.raises(UserInputError, match=r"modes 130 too large for grid size 256 .* use K <= 129"):
        check_before_building(dict(fno, modes=130), (256,), 4, "cpu", limit=2**30)
    assert check_before_building(dict(fno, padding=256), (256,), 4, "cpu", limit=2**30).padding == 256
    with pytest.raises(UserInputError, match=r"padding 257 is more than the grid \(256,\); use padding <= 256"):
        check_before_building(dict(fno, padding=257), (256,), 4, "cpu", limit=2**30)


def test_memory_estimate_against_the_limit_before_building():
    from mutransfer._training.memory import check_before_building

    fno = dict(dim=2, modes=16, width=64, layers=4, in_channels=1, out_channels=1, projection_channels=128, padding=0)
    plan = check_before_building(fno, (64, 64), 8, "cpu", limit=2**32)
    with pytest.raises(UserInputError, match=r"needs .* but the memory limit set \(--device-memory\) is"):
        check_before_building(fno, (64, 64), 8, "cpu", limit=plan.total_bytes - 1)


@pytest.mark.parametrize(
    "argv, refused",
    [
        (["transfer", "--dim", "4", "--proxy-K", "4", "--target-K", "8", "--lr", "1e-3"], "use --dim 1, 2 or 3"),
        (["transfer", "--dim", "3", "--proxy-K", "4", "--target-K", "8", "--lr", "1e-3"], None),
        (["plan", "--dim", "4", "--modes", "8", "--width", "8", "--layers", "2"], "use --dim 1, 2 or 3"),
        (["plan", "--dim", "1", "--modes", "130", "--width", "8", "--layers", "2", "--grid", "256"], "use K <= 129"),
        (["plan", "--dim", "1", "--modes", "129", "--width", "8", "--layers", "2", "--grid", "256"], None),
        (["data", "generate", "burgers", "--n", "2", "--resolution", str(10**12), "--out", "x.h5"], "available RAM"),
        (["studies", "--tracking-uri", "bogus-scheme://x"], "tracking URI 'bogus-scheme://x'"),
        (["plan", "--dim", "1", "--modes", "8", "--width", "8", "--layers", "2", "--device-memory=--"], "not '--'"),
        (["studies", "--zz\r\x1c"], "unrecognized arguments: --zz"),
        (["sweep", "--address", "not an address"], "--address 'not an address': use auto"),
        (["evaluate", "quick", "--data", "x.h5", "--resolution=--"], "expected a value, not '--'"),  # nargs="+"
        (["transfer", "--dim=--"], "expected a value, not '--'"),
        (["sweep", "--runs-dir", "{file}"], "is a file, not a folder"),
        (["train", "--checkpoint-dir", "{file}"], "is a file; give a folder"),
    ],
)
def test_out_of_domain_values_are_refused(tmp_path, argv, refused):
    (tmp_path / "file").write_text("a file\n")
    outcome = run_cli([a.format(file=tmp_path / "file") for a in argv])
    if refused is None:
        assert outcome.kind == "accepted", outcome.describe()
    else:
        assert outcome.kind == "refused" and refused in outcome.stderr, outcome.describe()


_PEAK = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(proc.stderr)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _peak_rss(argv, cwd, env) -> tuple[int, int, str]:
    """(exit code, peak RSS in bytes, stderr) of ``python -m mutransfer argv``, the only child of a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", "mutransfer", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    code, kib = proc.stdout.split()
    return int(code), int(kib) * 1024, proc.stderr


@pytest.mark.slow  # three commands in processes of their own, one trains (the default suite stays under 5 min)
def test_train_with_modes_100000_is_refused_before_allocating(tmp_path):
    """`train --modes 100000` on a 256-point file: one line, exit 2, and a peak RSS of an import, not of a model.

    The bound (1.5 GiB) is a correctness property: a K = 100000 FNO of width 32 holds
    4 x 32 x 32 x 100000 complex weights per layer (3.3 GB at 4 layers) before Adam.
    """
    data = write_grid_file(tmp_path / "b256.h5", n=20, resolution=256)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUTRANSFER_CACHE=str(tmp_path / "cache"))
    argv = ["train", "--problem", "burgers", "--data", str(data), "--epochs", "1", "--no-progress"]
    code, peak, err = _peak_rss(argv + ["--modes", "100000"], tmp_path, env)
    assert code == 2 and err.count("\n") == 1 and "modes 100000 too large for grid size 256" in err, err
    assert peak < 1.5 * 2**30, f"peak RSS {peak / 2**20:.0f} MiB while refusing"
    code, _, err = _peak_rss(argv + ["--modes", "8"], tmp_path, env)  # the same command at a K that fits: trains
    assert code == 0, err


@pytest.mark.slow  # three commands in processes of their own, one trains (the default suite stays under 5 min)
def test_train_galerkin_with_a_huge_width_is_refused_before_allocating(tmp_path):
    """`train --operator galerkin --width 1000000`: one line, exit 2, the peak RSS of an import, not of a model.

    A width-10^6 Galerkin Transformer of 4 layers holds about 4 x 8 x 10^12 weights;
    operators.planning_attention plans it from the flags before anything is built.
    The same command at width 16 trains.
    """
    data = write_grid_file(tmp_path / "b64.h5", n=20, resolution=64)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUTRANSFER_CACHE=str(tmp_path / "cache"))
    argv = [
        "train",
        "--problem",
        "burgers",
        "--data",
        str(data),
        "--operator",
        "galerkin",
        "--layers",
        "1",
        "--epochs",
        "1",
        "--no-progress",
    ]
    code, peak, err = _peak_rss(argv + ["--width", "1000000"], tmp_path, env)
    assert code == 2 and err.count("\n") == 1 and "Galerkin Transformer width 1000000" in err, err
    assert "but available RAM of this machine is" in err and "use a smaller width" in err, err
    assert peak < 1.5 * 2**30, f"peak RSS {peak / 2**20:.0f} MiB while refusing"
    code, _, err = _peak_rss(argv + ["--width", "16"], tmp_path, env)
    assert code == 0, err


def test_non_finite_values_in_point_sets_are_refused_and_the_repaired_file_loads(tmp_path):
    from mutransfer.cli.main import main
    from mutransfer.data._pointclouds import load_point_split

    path = tmp_path / "mesh.h5"
    assert (
        main(
            [
                "data",
                "generate",
                "darcy_mesh",
                "--n",
                "6",
                "--resolution",
                "16",
                "--points-min",
                "20",
                "--points-max",
                "30",
                "--out",
                str(path),
                "--no-progress",
            ]
        )
        == 0
    )
    with h5py.File(path, "r+") as f:
        good = f["output"][4, 0].copy()
        f["output"][4, 0] = np.inf  # the first point of sample 4 is always a real one
    with pytest.raises(UserInputError, match=r"array 'output' holds Inf values in sample 4"):
        load_point_split(path, n_train=4, n_test=2)
    with h5py.File(path, "r+") as f:
        f["output"][4, 0] = good
    assert load_point_split(path, n_train=4, n_test=2).train_x.shape[0] == 4


def test_the_address_form_check_passes_ray_addresses_and_refuses_the_rest():
    from mutransfer._study.inputs import check_address_form
    from mutransfer.errors import UserInputError

    for ok in (None, "auto", "127.0.0.1:6379", "ray://head.example:10001", "[::1]:6379"):
        check_address_form(ok)
    for bad in ("local", "head", "ray://head", "127.0.0.1:70000", "http://head:8265"):
        with pytest.raises(UserInputError, match="no --address: a local run"):
            check_address_form(bad)
