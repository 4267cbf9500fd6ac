"""PINO physics loss for Darcy: the residual of the generator's own discretisation, trainer integration."""

import json

import numpy as np
import pytest
import torch

from mutransfer._training import TrainConfig, train
from mutransfer._training.pino import build_loss, darcy_physics_loss, darcy_residual, pino_darcy_loss
from mutransfer._training.trainer import load_checkpoint
from mutransfer.cli.main import main
from mutransfer.data._darcy import darcy_matrix, generate_darcy
from mutransfer.data._hdf5_io import write_dataset
from mutransfer.data._loading import load_split
from mutransfer.errors import UserInputError
from operators.fno import FNO


@pytest.fixture(scope="module")
def darcy():
    return generate_darcy(4, 29, seed=1, progress=False)


def test_residual_vanishes_on_the_generators_solutions(darcy):
    u = torch.tensor(darcy["output"])
    a = torch.tensor(darcy["input"])
    per_sample = darcy_physics_loss(u, a, reduction="none")
    assert per_sample.shape == (4,) and float(per_sample.max()) < 1e-10
    # float32 storage (what training sees) leaves only rounding noise
    assert float(darcy_physics_loss(u.float()[..., None], a.float()[..., None])) < 1e-4


def test_residual_is_large_on_perturbed_solutions(darcy):
    u = torch.tensor(darcy["output"])
    a = torch.tensor(darcy["input"])
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(u.shape, generator=g, dtype=u.dtype)
    perturbed = u + 0.01 * u.abs().max() * noise  # 1% of the solution's scale
    assert float(darcy_physics_loss(perturbed, a, reduction="none").min()) > 1.0
    smooth = u * 1.05  # a smooth, 5% wrong amplitude
    assert float(darcy_physics_loss(smooth, a)) == pytest.approx(0.05, rel=1e-6)
    assert float(darcy_physics_loss(torch.zeros_like(u), a)) == pytest.approx(1.0)
    # boundary values are imposed (zero Dirichlet), so they do not enter the residual
    shifted = u.clone()
    shifted[:, 0, :] += 1.0
    assert float(darcy_physics_loss(shifted, a)) < 1e-10


def test_residual_matches_the_generators_matrix(darcy):
    """R = A u / h^2 - f with A from mutransfer.data._darcy.darcy_matrix (same stencil, harmonic faces)."""
    a = darcy["input"][0]
    s = a.shape[0]
    v = np.random.default_rng(0).standard_normal((s, s))
    v[0] = v[-1] = 0
    v[:, 0] = v[:, -1] = 0
    r = darcy_residual(torch.tensor(v)[None], torch.tensor(a)[None], forcing=2.0)[0].numpy()
    expected = (darcy_matrix(a) @ v[1:-1, 1:-1].ravel()) * (s - 1) ** 2 - 2.0
    np.testing.assert_allclose(r.ravel(), expected, rtol=1e-10, atol=1e-8)


def test_pino_loss_combines_at_the_ratio_and_has_gradients(darcy):
    u = torch.tensor(darcy["output"], dtype=torch.float32)[..., None]
    a = torch.tensor(darcy["input"], dtype=torch.float32)[..., None]
    pred = (0.9 * u).requires_grad_()
    data = float(
        torch.linalg.vector_norm(0.1 * u.reshape(4, -1), dim=1)
        .div(torch.linalg.vector_norm(u.reshape(4, -1), dim=1))
        .mean()
    )
    phys = float(darcy_physics_loss(pred.detach(), a))
    total = pino_darcy_loss(pred, u, a)
    assert float(total.detach()) == pytest.approx(5 * data + phys, rel=1e-5)
    total.backward()
    assert pred.grad is not None and torch.isfinite(pred.grad).all() and pred.grad.abs().sum() > 0
    loss, data_term = build_loss("pino", data_weight=1, physics_weight=0)(pred.detach(), u, a)
    assert float(loss) == pytest.approx(data, rel=1e-5) and float(data_term) == pytest.approx(data, rel=1e-5)
    loss, data_term = build_loss("pino")(pred.detach(), u, a)
    assert float(loss) == pytest.approx(5 * data + phys, rel=1e-5) and float(data_term) == pytest.approx(data, rel=1e-5)
    with pytest.raises(UserInputError, match="square 2D"):
        darcy_physics_loss(torch.zeros(2, 16, 1), torch.ones(2, 16, 1))


def test_train_config_loss_fields():
    cfg = TrainConfig(lr=1e-3, epochs=1, loss="pino")
    assert (cfg.data_weight, cfg.physics_weight) == (5.0, 1.0)
    d = cfg.to_dict()
    assert d["loss"] == "pino" and d["data_weight"] == 5.0 and d["physics_weight"] == 1.0
    assert TrainConfig(lr=1e-3, epochs=1).to_dict()["loss"] == "relative_l2"
    for kwargs, match in (
        ({"loss": "mse"}, "loss 'mse' is unknown"),
        ({"physics_weight": 1.0}, "apply to loss 'pino' only"),
        ({"loss": "pino", "data_weight": -1.0}, "data_weight -1.0"),
        ({"loss": "pino", "data_weight": 0.0, "physics_weight": 0.0}, "both are 0"),
    ):
        with pytest.raises(UserInputError, match=match):
            TrainConfig(lr=1e-3, epochs=1, **kwargs)


def test_train_with_pino_loss_and_resume(tmp_path, darcy):
    path = write_dataset(tmp_path / "d.h5", generate_darcy(12, 15, seed=0, progress=False))
    data = load_split(path, n_train=8, n_test=4)
    ckpt = tmp_path / "ckpt"
    cfg = TrainConfig(
        lr=3e-3,
        iterations=6,
        batch_size=4,
        loss="pino",
        data_weight=5.0,
        physics_weight=1.0,
        schedule="constant",
        progress=False,
        checkpoint_dir=str(ckpt),
    )
    model = FNO(2, 1, 1, modes=3, width=8, layers=2, parametrization="mup", padding=2)
    result = train(model, data, cfg)
    assert result.status == "completed" and 0 < result.test_error < 10
    losses = [h.train_loss for h in result.history]
    assert losses[-1] < losses[0]
    # the evaluation metric is still the relative L2, not the combined loss
    assert result.test_error < losses[0]
    state = load_checkpoint(ckpt / "checkpoint.pt")  # weights_only=True
    assert state["train_config"]["loss"] == "pino" and state["train_config"]["physics_weight"] == 1.0
    # a different ratio is a different trajectory: resume refuses
    other = TrainConfig(**{**cfg.to_dict(), "betas": tuple(cfg.betas), "iterations": 6, "physics_weight": 2.0})
    with pytest.raises(UserInputError, match="physics_weight 1.0 -> 2.0"):
        train(FNO(2, 1, 1, modes=3, width=8, layers=2, parametrization="mup", padding=2), data, other)


def test_cli_pino(tmp_path, capsys):
    path = write_dataset(tmp_path / "d.h5", generate_darcy(10, 13, seed=0, progress=False))
    args = [
        "train",
        "--problem",
        "darcy",
        "--data",
        str(path),
        "--modes",
        "3",
        "--width",
        "8",
        "--layers",
        "2",
        "--iterations",
        "3",
        "--batch-size",
        "4",
        "--padding",
        "2",
        "--loss",
        "pino",
        "--pino-ratio",
        "5:1",
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["train"]["loss"] == "pino" and summary["train"]["data_weight"] == 5.0
    assert summary["result"]["status"] == "completed"
    assert main(["train", "--data", str(path), "--pino-ratio", "5:1"]) == 2
    assert "--pino-ratio applies to --loss pino only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as excinfo:  # argparse-level error
        main(["train", "--data", str(path), "--loss", "pino", "--pino-ratio", "5"])
    assert excinfo.value.code == 2 and "DATA:PHYSICS" in capsys.readouterr().err
    # the physics loss is Darcy's: other data are refused with one line
    burgers = tmp_path / "b.h5"
    from mutransfer.data._burgers import generate_burgers

    write_dataset(burgers, generate_burgers(6, 32, seed=0, progress=False))
    assert (
        main(
            [
                "train",
                "--problem",
                "burgers",
                "--data",
                str(burgers),
                "--loss",
                "pino",
                "--modes",
                "2",
                "--width",
                "4",
                "--iterations",
                "1",
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "use it with --problem darcy" in err[0]


def test_large_initial_residual_is_not_divergence(tmp_path, monkeypatch):
    """The divergence check looks at the relative L2 part, not the (legitimately large) initial residual."""
    import mutransfer._training.trainer as trainer

    data = load_split(
        write_dataset(tmp_path / "d.h5", generate_darcy(6, 31, seed=0, progress=False)), n_train=4, n_test=2
    )
    model = FNO(2, 1, 1, modes=3, width=8, layers=2, parametrization="mup", padding=2)
    with torch.no_grad():
        initial = float(darcy_physics_loss(model(data.train_x), data.train_x))
    monkeypatch.setattr(trainer, "EXPLODED_LOSS", initial / 2, raising=False)
    cfg = TrainConfig(lr=1e-3, iterations=2, batch_size=4, loss="pino", progress=False)
    assert train(model, data, cfg).status == "completed"
