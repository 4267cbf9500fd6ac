"""Recipe "add a PDE problem" (docs/architecture.md): a toy problem registered from one place.

The toy is the 1D heat equation u_t = ν u_xx on the periodic unit interval, solved exactly in
Fourier space (each mode decays as exp(-ν (2πk)² t)). It is declared the way a new problem's
module declares it — ``problem_from_facts(name, facts=ProblemFacts(...), ...)`` — and added with
``register_problem``: no other file of the project changes. Then ``mutransfer data generate``
writes its data and ``mutransfer train`` learns it, through the same code as the built-in problems.
"""

from __future__ import annotations

import json
import math

import h5py
import numpy as np
import pytest

from mutransfer._problems import get_problem
from mutransfer._problems.base import problem_from_facts
from mutransfer._problems.registry import register_problem, unregister_problem
from mutransfer.cli.main import main
from mutransfer.data._problem_facts import ProblemFacts, get_facts
from mutransfer.errors import UserInputError

NU = 0.01


def solve_heat(u0: np.ndarray, nu: float, t: float) -> np.ndarray:
    """Exact solution of u_t = ν u_xx at time t on the periodic unit interval; u0: (n, N)."""
    k = np.fft.rfftfreq(u0.shape[-1], d=1.0 / u0.shape[-1])
    return np.fft.irfft(np.fft.rfft(u0, axis=-1) * np.exp(-nu * (2 * math.pi * k) ** 2 * t), n=u0.shape[-1], axis=-1)


def generate_heat(n: int, resolution: int, *, seed: int, progress: bool = True) -> dict:
    """n pairs (u0, u(., 1)) of the heat equation; u0 a random sum of the first 8 Fourier modes."""
    rng = np.random.default_rng(seed)
    x = np.arange(resolution) / resolution
    k = np.arange(1, 9)
    a, b = rng.normal(size=(2, n, k.size)) / k
    u0 = a @ np.sin(2 * math.pi * np.outer(k, x)) + b @ np.cos(2 * math.pi * np.outer(k, x))
    attrs = {
        "problem": "heat_toy",
        "seed": int(seed),
        "n_samples": int(n),
        "resolution": int(resolution),
        "pde.nu": NU,
        "pde.t_final": 1.0,
    }
    return {"input": u0, "output": solve_heat(u0, NU, 1.0), "grid": {"x": x}, "attrs": attrs}


@pytest.fixture
def heat_problem():
    problem = problem_from_facts(
        "heat_toy",
        facts=ProblemFacts("heat_toy", dim=1, space_dim=1, periodic=True, name_hints=("heat_toy",)),
        description="1D heat equation, nu=0.01, periodic; map u0 -> u(., 1)",
        generator=generate_heat,
        generated_resolution=64,
        resolution=64,
        n_train=24,
        n_test=8,
        padding=0,
    )
    register_problem(problem)
    yield problem
    unregister_problem("heat_toy")


def test_the_toy_solver_decays_each_mode_as_the_mathematics_says():
    x = np.arange(64) / 64
    u0 = np.sin(2 * math.pi * 3 * x)[None]
    expected = math.exp(-NU * (2 * math.pi * 3) ** 2) * u0
    assert np.allclose(solve_heat(u0, NU, 1.0), expected, atol=1e-12)


def test_a_registered_problem_is_found_by_the_data_layer_and_the_service(heat_problem):
    assert get_problem("heat_toy") is heat_problem
    assert get_facts("heat_toy").periodic and heat_problem.dim == 1


def test_other_facts_under_a_known_name_are_refused():
    with pytest.raises(UserInputError, match="already registered with other facts"):
        problem_from_facts(
            "burgers",
            facts=ProblemFacts("burgers", dim=2, space_dim=2, periodic=False),
            description="x",
            generator=generate_heat,
            generated_resolution=8,
            resolution=8,
            n_train=1,
            n_test=1,
            padding=0,
        )


def test_unregistering_leaves_no_trace(heat_problem):
    unregister_problem("heat_toy")
    with pytest.raises(UserInputError, match="problem 'heat_toy' is unknown"):
        get_problem("heat_toy")
    with pytest.raises(UserInputError, match="problem 'heat_toy' is unknown"):
        get_facts("heat_toy")


def test_generate_and_train_a_registered_problem_through_the_cli(heat_problem, tmp_path, capsys):
    out = tmp_path / "heat.h5"
    assert (
        main(["data", "generate", "heat_toy", "--n", "32", "--resolution", "64", "--out", str(out), "--no-progress"])
        == 0
    )
    with h5py.File(out, "r") as f:
        assert f["input"].shape == (32, 64)
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "--problem",
                "heat_toy",
                "--data",
                str(out),
                "--operator",
                "fno",
                "--modes",
                "4",
                "--width",
                "8",
                "--layers",
                "2",
                "--epochs",
                "2",
                "--n-train",
                "24",
                "--n-test",
                "8",
                "--device",
                "cpu",
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["problem"] == "heat_toy" and summary["grid"] == [64]
    errors = [v for k, v in summary["result"].items() if "test" in k and isinstance(v, float)]
    assert errors and all(math.isfinite(e) for e in errors), summary["result"]
