"""Burgers solver against the Cole-Hopf exact solution, plus invariants."""

import numpy as np
import pytest

from mutransfer.data._burgers import generate_burgers, solve_burgers, stable_time_step
from mutransfer.data._grf import periodic_grf_1d
from mutransfer.errors import UserInputError

NU = 0.1


def cole_hopf(x, t, nu=NU, a=1.0, b=0.5):
    """u = -2 nu phi_x / phi with phi = a + b exp(-nu (2 pi)^2 t) cos(2 pi x) solving phi_t = nu phi_xx."""
    decay = b * np.exp(-nu * (2 * np.pi) ** 2 * t)
    phi = a + decay * np.cos(2 * np.pi * x)
    phi_x = -2 * np.pi * decay * np.sin(2 * np.pi * x)
    return -2 * nu * phi_x / phi


def test_cole_hopf_is_a_burgers_solution():
    # sanity of the reference itself: residual of u_t + u u_x - nu u_xx by finite differences
    x, t, e = 0.3, 0.2, 1e-4
    u = lambda x, t: cole_hopf(x, t)  # noqa: E731
    u_t = (u(x, t + e) - u(x, t - e)) / (2 * e)
    u_x = (u(x + e, t) - u(x - e, t)) / (2 * e)
    u_xx = (u(x + e, t) - 2 * u(x, t) + u(x - e, t)) / e**2
    assert abs(u_t + u(x, t) * u_x - NU * u_xx) < 1e-5


# (nu, b/a): the brief's moderate case, and a steeper, more nonlinear one
CASES = [(0.1, 0.5), (0.02, 0.95)]


@pytest.mark.parametrize("t_final", [0.5, 1.0])
@pytest.mark.parametrize("nu,b", CASES)
def test_matches_cole_hopf_with_automatic_dt(nu, b, t_final):
    n = 256
    x = np.arange(n) / n
    u = solve_burgers(cole_hopf(x, 0.0, nu=nu, b=b)[None], nu=nu, t_final=t_final)[0]
    exact = cole_hopf(x, t_final, nu=nu, b=b)
    assert np.abs(exact).max() > 0.01  # a nontrivial solution at t_final
    err = np.abs(u - exact).max()
    assert err < 1e-8 and err < 1e-6 * np.abs(exact).max(), err


@pytest.mark.parametrize("nu,b", CASES)
def test_time_stepper_is_fourth_order(nu, b):
    n = 256
    x = np.arange(n) / n
    u0 = cole_hopf(x, 0.0, nu=nu, b=b)
    exact = cole_hopf(x, 1.0, nu=nu, b=b)
    errors = [np.abs(solve_burgers(u0, nu=nu, t_final=1.0, n_steps=m) - exact).max() for m in (20, 40, 80)]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert errors[-1] < 1e-8
    assert np.all((orders > 3.5) & (orders < 4.5)), (errors, orders)
    # 1-D input works, and dt rounds down to a whole number of steps
    np.testing.assert_array_equal(
        solve_burgers(u0, nu=nu, t_final=1.0, dt=0.024), solve_burgers(u0, nu=nu, t_final=1.0, n_steps=42)
    )


def test_mean_conserved_and_energy_decays_for_grf_data():
    u0 = periodic_grf_1d(8, 512, np.random.default_rng(0), zero_mean=False)
    assert np.abs(u0.mean(axis=1)).max() > 0.1  # a nonzero mean to conserve
    u1 = solve_burgers(u0, nu=NU, t_final=1.0)
    np.testing.assert_allclose(u1.mean(axis=1), u0.mean(axis=1), rtol=0, atol=1e-12)
    # viscous Burgers: L2 energy and max|u| do not grow
    assert np.all(np.sum(u1**2, axis=1) < np.sum(u0**2, axis=1))
    assert np.all(np.abs(u1).max(axis=1) <= np.abs(u0).max(axis=1) + 1e-12)


def test_stable_time_step_rule():
    u0 = periodic_grf_1d(4, 1024, np.random.default_rng(0))
    dt, n_steps = stable_time_step(u0, nu=NU, t_final=1.0)
    assert dt * n_steps == pytest.approx(1.0) and dt <= 5e-3
    # a much larger amplitude needs a smaller step, and the automatic one stays finite
    dt_big, _ = stable_time_step(30 * u0, nu=NU, t_final=1.0)
    assert dt_big < dt / 10
    u = solve_burgers(30 * u0[:1, ::4], nu=NU, t_final=0.05)
    assert np.all(np.isfinite(u))


def test_blow_up_and_bad_arguments_raise_user_errors():
    u0 = 30 * periodic_grf_1d(1, 256, np.random.default_rng(0))
    with pytest.raises(UserInputError, match="dt"):
        solve_burgers(u0, nu=NU, t_final=0.5, n_steps=5)
    with pytest.raises(UserInputError, match="nu"):
        solve_burgers(u0, nu=0.0, t_final=1.0)
    with pytest.raises(UserInputError, match="dt and n_steps"):
        solve_burgers(u0, t_final=1.0, dt=0.1, n_steps=10)
    with pytest.raises(UserInputError, match="seed"):
        generate_burgers(2, 64, seed=-1, progress=False)


def test_generate_burgers_is_deterministic():
    a = generate_burgers(4, 128, seed=3, progress=False)
    b = generate_burgers(4, 128, seed=3, progress=False)
    c = generate_burgers(4, 128, seed=4, progress=False)
    assert a["input"].shape == a["output"].shape == (4, 128)
    np.testing.assert_array_equal(a["input"], b["input"])
    np.testing.assert_array_equal(a["output"], b["output"])
    assert not np.allclose(a["input"], c["input"])
    np.testing.assert_array_equal(a["grid"]["x"], np.arange(128) / 128)
    attrs = a["attrs"]
    assert attrs["problem"] == "burgers" and attrs["seed"] == 3 and attrs["pde.nu"] == NU
    assert attrs["solver.dt"] * attrs["solver.n_steps"] == pytest.approx(attrs["pde.t_final"])
    # the output is the solver's map of the input
    np.testing.assert_array_equal(
        a["output"], solve_burgers(a["input"], nu=NU, t_final=1.0, n_steps=attrs["solver.n_steps"])
    )


def test_cli_generates_rough_burgers_with_its_own_viscosity_and_smoothness(tmp_path, capsys):
    """`data generate burgers --nu --alpha`: the attrs record them, and a rougher field carries more energy at
    high modes (the data the coordinate check and the rough landscape use); the flags refuse other problems."""
    import h5py

    from mutransfer.cli.main import main

    spectra = {}
    for alpha in (2.0, 0.6):
        out = tmp_path / f"b{alpha}.h5"
        assert (
            main(
                [
                    "data",
                    "generate",
                    "burgers",
                    "--n",
                    "4",
                    "--resolution",
                    "128",
                    "--nu",
                    "0.05",
                    "--alpha",
                    str(alpha),
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
            == 0
        )
        with h5py.File(out, "r") as f:
            assert f.attrs["pde.nu"] == pytest.approx(0.05) and f.attrs["grf.alpha"] == pytest.approx(alpha)
            power = (np.abs(np.fft.rfft(f["input"][()], axis=-1)) ** 2).mean(0)
        spectra[alpha] = power[17:].sum() / power[1:].sum()  # share of the energy above mode 16
    assert spectra[0.6] > 10 * spectra[2.0]
    capsys.readouterr()
    assert (
        main(
            [
                "data",
                "generate",
                "darcy",
                "--alpha",
                "0.6",
                "--n",
                "2",
                "--resolution",
                "9",
                "--out",
                str(tmp_path / "d.h5"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--alpha applies to burgers only" in err
