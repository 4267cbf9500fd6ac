"""Coordinate check: the probe's spectrum, the flatness verdicts, the CLI."""

import json
import math
import subprocess
import sys

import pytest
import torch

from mutransfer.data.burgers import generate_burgers
from mutransfer.data.hdf5_io import write_dataset
from mutransfer.data.loading import load_split
from mutransfer.diagnostics.coord_check import coord_check, loglog_slope, scale_invariant_probe
from operators.spectral import SpectralConv


@pytest.fixture(scope="module")
def burgers_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cc") / "burgers.h5"
    write_dataset(path, generate_burgers(40, 256, seed=0, progress=False))
    return path


def test_loglog_slope_recovers_a_power_law():
    modes = [2, 4, 8, 16]
    assert loglog_slope(modes, [3.0 * k**0.5 for k in modes]) == pytest.approx(0.5)
    assert loglog_slope(modes, [7.0] * 4) == pytest.approx(0.0)


@pytest.mark.parametrize("dim, grid", [(1, (512,)), (2, (64, 64))])
def test_probe_energy_in_kept_modes_grows_as_log_k(dim, grid):
    """Power ∝ |k|^-d: the energy within |k| <= K grows like log K (so doubling K adds a constant)."""
    probe = scale_invariant_probe(64, 1, grid, torch.Generator().manual_seed(0))
    assert abs(probe.mean()) < 0.05 and probe.std() == pytest.approx(1.0, rel=1e-5)
    spectrum = torch.fft.rfftn(probe, dim=tuple(range(-dim, 0))).abs().square().mean(dim=(0, 1))
    axes = [torch.fft.fftfreq(n, 1.0 / n) for n in grid[:-1]] + [torch.fft.rfftfreq(grid[-1], 1.0 / grid[-1])]
    radius = torch.sqrt(sum(f**2 for f in torch.meshgrid(*axes, indexing="ij")))
    energy = [spectrum[(radius > 0) & (radius <= k)].sum().item() for k in (4, 8, 16)]
    increments = [energy[1] - energy[0], energy[2] - energy[1]]
    assert increments[1] == pytest.approx(increments[0], rel=0.25)


@pytest.mark.parametrize("dim, grid, modes", [(1, (1024,), [4, 16, 64]), (2, (64, 64), [4, 8, 16]), (3, (32, 32, 32), [2, 4, 8])])
def test_probe_shows_sqrt_log_k_growth_under_sp_and_flat_under_mup(dim, grid, modes):
    probe = scale_invariant_probe(4, 8, grid, torch.Generator().manual_seed(1))
    sizes = {}
    for parametrization in ("standard", "mup"):
        torch.manual_seed(0)
        sizes[parametrization] = [SpectralConv(8, 8, k, dim, parametrization)(probe).abs().mean().item() for k in modes]
    # Energy within |k| <= K is c*log K + const (the const makes small K deviate a little).
    log_ratio = math.sqrt(math.log(modes[-1]) / math.log(modes[0]))
    growth = sizes["standard"][-1] / sizes["standard"][0]
    assert 1.2 < growth < 1.15 * log_ratio
    assert sizes["mup"][-1] / sizes["mup"][0] == pytest.approx(1.0, abs=0.16)


def test_coord_check_passes_mup_and_flags_sp(burgers_file):
    data = load_split(burgers_file, n_train=30, n_test=10)
    result = coord_check(data, dim=1, modes=[4, 8, 16, 32, 64], width=16, layers=3, steps=3, seeds=2)
    assert result.passed("mup")
    assert not result.passed("standard")
    sp_spectral = [c for c in result.curves if c.parametrization == "standard" and c.gated]
    assert all(c.slope > result.tolerance for c in sp_spectral)  # SP grows with K
    layers = {c.layer for c in result.curves if c.kind == "activation"}
    assert layers == {"lift", "fourier_1", "fourier_2", "fourier_3", "output"}
    payload = result.as_dict()
    assert payload["passed"] == {"standard": False, "mup": True}


def test_coord_check_cli_writes_plot_and_json(burgers_file, tmp_path):
    out = tmp_path / "cc"
    cmd = [sys.executable, "-m", "mutransfer.cli.main", "coord-check", "--problem", "burgers", "--data", str(burgers_file),
           "--modes", "4", "8", "16", "--width", "8", "--layers", "2", "--seeds", "1", "--n-train", "30",
           "--out", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert set(payload["passed"]) == {"standard", "mup"}
    assert (out / "coord_check.png").stat().st_size > 10_000
    assert json.loads((out / "coord_check.json").read_text())["tolerance"] == 0.1

    bad = subprocess.run(cmd[:6] + ["--modes", "8"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "at least two values of K" in bad.stderr and "Traceback" not in bad.stderr
