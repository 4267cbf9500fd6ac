"""Navier-Stokes (vorticity) solver and generator: exact solutions, order, schema, CLI."""

import json
import math
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from mutransfer.data._hdf5_io import read_dataset, write_dataset
from mutransfer.data._loading import load_split
from mutransfer.data._navier_stokes import (
    FNO_TIME_STEPS,
    PRESETS,
    VorticitySolver,
    _forcing_field,
    generate_navier_stokes,
    periodic_grf_2d,
    solve_navier_stokes,
)
from mutransfer.errors import UserInputError


def _grid(n, length):
    x = np.arange(n) * (length / n)
    return np.meshgrid(x, x, indexing="ij")


@pytest.mark.parametrize("length, k", [(2 * math.pi, 1), (2 * math.pi, 3), (1.0, 2)])
def test_taylor_green_decay_is_exact(length, k):
    """w = 2 kappa cos(kappa x) cos(kappa y) exp(-2 nu kappa^2 t), kappa = 2 pi k / L: u.grad w = 0."""
    n, nu, dt, steps = 32, 0.05 if length > 1 else 1e-3, 1e-2, 100
    kappa = 2 * math.pi * k / length
    xx, yy = _grid(n, length)
    w0 = 2 * kappa * np.cos(kappa * xx) * np.cos(kappa * yy)
    solver = VorticitySolver(n, nu=nu, dt=dt, length=length)
    w_hat = solver.to_spectral(w0[None])
    # the advection term of the Taylor-Green vortex vanishes identically
    assert float(solver.nonlinear(w_hat).abs().max()) < 1e-9 * float(w_hat.abs().max())
    w = solver.to_physical(solver.advance(w_hat, steps))[0].numpy()
    z = 2 * nu * kappa**2 * dt
    exact = w0 * np.exp(-z * steps)
    assert np.abs(exact).max() < 0.95 * np.abs(w0).max()  # it decayed
    # Crank-Nicolson reproduces exp(-z) to O(z^3) per step ...
    assert np.abs(w - exact).max() < 1e-5 * np.abs(w0).max()
    # ... and its discrete amplification factor exactly
    cn = w0 * ((1 - z / 2) / (1 + z / 2)) ** steps
    assert np.abs(w - cn).max() < 1e-12 * np.abs(w0).max()


def test_velocity_is_divergence_free_and_inverts_the_vorticity():
    rng = np.random.default_rng(0)
    n, length = 32, 2 * math.pi
    w0 = periodic_grf_2d(3, n, rng, length=length)
    solver = VorticitySolver(n, nu=1e-3, dt=1e-3, length=length)
    w_hat = solver.to_spectral(w0)
    u_hat, v_hat = solver.velocity(w_hat)
    div = 1j * solver.kx * u_hat + 1j * solver.ky * v_hat
    scale = float(w_hat.abs().max())
    assert float(div.abs().max()) < 1e-12 * scale
    # curl u = v_x - u_y recovers w (zero-mean field)
    curl = 1j * solver.kx * v_hat - 1j * solver.ky * u_hat
    assert float((curl - w_hat).abs().max()) < 1e-12 * scale
    # and in physical space, with an independent FFT: the velocity the advection term uses
    # (built from the 2/3-truncated state, so no Nyquist mode is lost in the real transform)
    u, v = (solver.to_physical(h).numpy() for h in solver.velocity(solver.mask * w_hat))
    kx = np.fft.fftfreq(n, d=length / n)[:, None] * 2 * np.pi
    ky = np.fft.fftfreq(n, d=length / n)[None, :] * 2 * np.pi
    div_phys = np.fft.ifft2(1j * kx * np.fft.fft2(u) + 1j * ky * np.fft.fft2(v)).real
    assert np.abs(div_phys).max() < 1e-12 * np.abs(u).max() * n


def test_second_order_in_time_on_nonlinear_dynamics():
    """Observed order log2(e(dt)/e(dt/2)) against a fine-dt reference: 2 (CN + Heun)."""
    n, length, t_final = 32, 2 * math.pi, 0.5
    w0 = 2 * periodic_grf_2d(2, n, np.random.default_rng(3), length=length)
    forcing = _forcing_field("mutransfer", n, length)

    def solve(steps):
        s = VorticitySolver(n, nu=0.01, dt=t_final / steps, length=length, forcing=forcing)
        return s.to_physical(s.advance(s.to_spectral(w0), steps)).numpy()

    ref = solve(1024)
    # the dynamics are nonlinear: the advection term changes the solution at O(1)
    linear = VorticitySolver(n, nu=0.01, dt=t_final / 1024, length=length, forcing=forcing)
    linear.nonlinear = lambda w_hat: linear.f_hat.expand_as(w_hat)
    lin = linear.to_physical(linear.advance(linear.to_spectral(w0), 1024)).numpy()
    assert np.abs(ref - lin).max() > 0.3 * np.abs(w0).max()
    errors = [np.abs(solve(steps) - ref).max() for steps in (32, 64, 128)]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((orders > 1.8) & (orders < 2.3)), (errors, orders)


def test_grf_covariance_matches_the_spectrum():
    n, length = 32, 2 * math.pi
    w = periodic_grf_2d(400, n, np.random.default_rng(1), length=length)
    k = np.fft.fftfreq(n, d=1.0 / n)
    lam = 7.0**3 * (k[:, None] ** 2 + k[None, :] ** 2 + 49.0) ** -2.5
    lam[0, 0] = 0.0
    assert abs(w.mean()) < 0.05 * w.std()
    np.testing.assert_allclose(w.var(), lam.sum(), rtol=0.05)
    np.testing.assert_allclose(w.mean(axis=(1, 2)), 0.0, atol=1e-12)  # zero mean per sample
    # deterministic and sample-major
    again = periodic_grf_2d(3, n, np.random.default_rng(1), length=length)
    np.testing.assert_array_equal(again, w[:3])


def test_generate_mutransfer_preset_schema_and_round_trip(tmp_path):
    data = generate_navier_stokes(3, 16, seed=5, time_steps=8, progress=False)
    attrs = data["attrs"]
    assert data["input"].shape == (3, 16, 16) and data["output"].shape == (3, 16, 16, 8)
    assert attrs["problem"] == "navier_stokes" and attrs["preset"] == "mutransfer"
    assert attrs["pde.nu"] == pytest.approx(1 / 500) and attrs["pde.forcing"] == "-4 cos(4 y)"
    assert attrs["solver.resolution"] == 32 and attrs["solver.dt"] == pytest.approx(1 / 1024)
    assert 0 < attrs["solver.max_cfl"] < 1
    np.testing.assert_allclose(data["grid"]["t"], np.arange(1, 9) / 512)
    np.testing.assert_allclose(data["grid"]["x"], np.arange(16) * 2 * np.pi / 16)
    # the stored data are the fine solve strided: compare with a direct solve at 32^2
    w0 = periodic_grf_2d(3, 32, np.random.default_rng(5), length=2 * np.pi)
    np.testing.assert_allclose(data["input"], w0[:, ::2, ::2], atol=1e-12)
    direct = solve_navier_stokes(
        w0,
        nu=1 / 500,
        dt=1 / 1024,
        record_interval=1 / 512,
        time_steps=8,
        forcing=_forcing_field("mutransfer", 32, 2 * np.pi),
    )
    np.testing.assert_allclose(data["output"], direct["w"][:, ::2, ::2], atol=1e-6)
    # forcing drives the mean-free part: w(t) - w0 is not zero
    assert np.abs(data["output"][..., -1] - data["input"]).max() > 1e-3
    # the first samples do not depend on how many are generated
    two = generate_navier_stokes(2, 16, seed=5, time_steps=8, progress=False)
    np.testing.assert_allclose(two["output"], data["output"][:2], atol=1e-6)

    path = write_dataset(tmp_path / "ns.h5", data)
    back = read_dataset(path)
    assert back["output"].shape == (3, 16, 16, 8) and back["grid"]["t"].shape == (8,)
    with h5py.File(path, "r") as f:
        assert f.attrs["problem"] == "navier_stokes" and f.attrs["pde.nu"] == pytest.approx(0.002)


def test_load_split_broadcasts_w0_along_time_and_strides(tmp_path):
    data = generate_navier_stokes(5, 16, seed=0, time_steps=8, progress=False)
    path = write_dataset(tmp_path / "ns.h5", data)
    split = load_split(path, n_train=3, n_test=2, resolution=8, time_resolution=4, problem="navier_stokes")
    assert split.train_x.shape == (3, 8, 8, 4, 1) and split.test_y.shape == (2, 8, 8, 4, 1)
    assert split.grid_shape == (8, 8, 4) and split.problem == "navier_stokes"
    # w0 repeated along t (an expanded view, no copy) and the final time kept
    w0 = data["input"][:3, ::2, ::2].astype(np.float32)
    for k in range(4):
        np.testing.assert_array_equal(split.train_x[..., k, 0].numpy(), w0)
    assert split.train_x.stride()[-2] == 0
    np.testing.assert_array_equal(split.test_y[..., 0].numpy(), data["output"][3:, ::2, ::2, 1::2])
    np.testing.assert_allclose(split.grid["t"], np.array([2, 4, 6, 8]) / 512)
    with pytest.raises(UserInputError, match="time_resolution 3: the 8 output times .* try 4 or 2"):
        load_split(path, n_train=1, n_test=1, time_resolution=3)
    with pytest.raises(UserInputError, match="a 2-D grid operator; .*navier_stokes"):
        load_split(path, n_train=1, n_test=1, problem="darcy")
    # a single output time makes it an FNO-2D map w0 -> w(T)
    two_d = load_split(path, n_train=1, n_test=1, output_time=-1)
    assert two_d.train_y.shape == (1, 16, 16, 1)
    np.testing.assert_array_equal(two_d.train_y[0, ..., 0].numpy(), data["output"][0, ..., -1])


def test_fno_preset():
    data = generate_navier_stokes(2, 8, seed=1, preset="fno", nu=1e-4, time_steps=2, dt=0.01, progress=False)
    attrs = data["attrs"]
    assert attrs["preset"] == "fno" and attrs["pde.nu"] == pytest.approx(1e-4)
    assert attrs["pde.forcing"].startswith("0.1 (sin(2 pi (x + y))")
    np.testing.assert_allclose(data["grid"]["t"], [1.0, 2.0])
    np.testing.assert_allclose(data["grid"]["x"], np.arange(8) / 8)
    assert data["output"].shape == (2, 8, 8, 2)
    assert PRESETS["fno"]["dt"] == 1e-4 and FNO_TIME_STEPS[1e-3] == 50
    # the FNO GRF on [0,1]^2: variance sum 7^3 (4 pi^2 |k|^2 + 49)^-2.5 (small, ~0.05)
    w = periodic_grf_2d(300, 16, np.random.default_rng(0), length=1.0)
    k = np.fft.fftfreq(16, d=1 / 16)
    lam = 343.0 * (4 * np.pi**2 * (k[:, None] ** 2 + k[None, :] ** 2) + 49.0) ** -2.5
    lam[0, 0] = 0
    np.testing.assert_allclose(w.var(), lam.sum(), rtol=0.08)
    with pytest.raises(UserInputError, match="no default for nu 0.002"):
        generate_navier_stokes(1, 8, seed=0, preset="fno", nu=2e-3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"preset": "kolmogorov"}, "preset 'kolmogorov' is unknown"),
        ({"nu": -1.0}, "nu -1"),
        ({"solver_resolution": 20}, "solver_resolution 20: must be an even multiple"),
        ({"time_steps": 0}, "time_steps 0"),
        ({"spinup": -1.0}, "spinup"),
    ],
)
def test_generator_rejects_bad_settings(kwargs, match):
    with pytest.raises(UserInputError, match=match):
        generate_navier_stokes(1, 8, seed=0, progress=False, **kwargs)


def test_unstable_step_is_a_one_line_error():
    w0 = 60 * periodic_grf_2d(1, 16, np.random.default_rng(0), length=2 * np.pi)
    with pytest.raises(UserInputError) as excinfo:
        solve_navier_stokes(w0, nu=1e-3, dt=0.2, record_interval=0.2, time_steps=3)
    msg = str(excinfo.value)
    assert "\n" not in msg and "Courant number" in msg and "pass dt <=" in msg


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, **(env or {})),
    )


def test_cli_generate_flags(tmp_path, capsys):
    from mutransfer.cli.main import main

    out = tmp_path / "ns.h5"
    args = [
        "data",
        "generate",
        "navier_stokes",
        "--preset",
        "fno",
        "--nu",
        "1e-3",
        "--n",
        "2",
        "--resolution",
        "8",
        "--time-steps",
        "1",
        "--dt",
        "0.05",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(args) == 0
    with h5py.File(out, "r") as f:
        assert f["output"].shape == (2, 8, 8, 1) and f.attrs["preset"] == "fno"
    capsys.readouterr()
    code = main(
        [
            "data",
            "generate",
            "darcy",
            "--preset",
            "fno",
            "--n",
            "2",
            "--resolution",
            "9",
            "--out",
            str(tmp_path / "d.h5"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--preset applies to navier_stokes only" in err and not (tmp_path / "d.h5").exists()


def test_fno3d_trains_on_generated_navier_stokes_under_mup(tmp_path):
    """`mutransfer train --problem navier_stokes` end to end (a subprocess): FNO-3D, muP, loss decreases."""
    data = write_dataset(tmp_path / "ns.h5", generate_navier_stokes(10, 16, seed=1, time_steps=8, progress=False))
    proc = _cli(
        "train",
        "--problem",
        "navier_stokes",
        "--data",
        data,
        "--modes",
        "3",
        "--width",
        "8",
        "--layers",
        "2",
        "--iterations",
        "8",
        "--batch-size",
        "2",
        "--lr",
        "1e-2",
        "--schedule",
        "constant",
        "--resolution",
        "8",
        "--n-train",
        "8",
        "--n-test",
        "2",
        "--clip-value",
        "0.01",
        "--no-progress",
        "--json",
        env={"OMP_NUM_THREADS": "1"},
    )  # tiny tensors: one thread is fastest
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    result = summary["result"]
    assert result["status"] == "completed" and result["iterations_completed"] == 8
    assert summary["grid"] == [8, 8, 8] and summary["model"]["dim"] == 3
    assert summary["model"]["parametrization"] == "mup" and summary["model"]["padding"] == 4
    losses = [h["train_loss"] for h in result["history"]]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert 0 < result["test_error"] < 10


def test_train_without_data_uses_the_registry(tmp_path, monkeypatch, capsys):
    """No --data: the navier_stokes problem generates and caches its own small dataset."""
    import mutransfer._problems as problems
    from mutransfer.cli.main import main

    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path))
    small = problems.Problem(
        **{
            **problems.PROBLEMS["navier_stokes"].__dict__,
            "n_train": 4,
            "n_test": 2,
            "generated_resolution": 16,
            "resolution": 8,
            "time_resolution": 4,
        }
    )
    monkeypatch.setitem(problems.PROBLEMS, "navier_stokes", small)
    args = [
        "train",
        "--problem",
        "navier_stokes",
        "--modes",
        "2",
        "--width",
        "4",
        "--layers",
        "1",
        "--iterations",
        "2",
        "--batch-size",
        "2",
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["grid"] == [8, 8, 4] and summary["result"]["status"] == "completed"
    cached = list((tmp_path / "data").glob("navier_stokes_*.h5"))
    assert len(cached) == 1
    with h5py.File(cached[0], "r") as f:
        assert f["output"].shape == (6, 16, 16, 64)
