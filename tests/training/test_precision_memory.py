"""Mixed precision, the memory plan and its refusals, and streamed training, on the CPU (issue: paper scale on GPUs)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch

from mutransfer._training import TrainConfig, train
from mutransfer.data._hdf5_io import write_dataset
from mutransfer.data._loading import load_split
from mutransfer.errors import UserInputError
from operators import FNO
from operators.planning import largest_batch, parse_bytes, plan_fno
from tests.operator_helpers import saved_activation_bytes


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm((a.float() - b).flatten()) / torch.linalg.vector_norm(b.flatten()))


@pytest.fixture(scope="module")
def burgers_file(tmp_path_factory) -> Path:
    """A small real Burgers data file (the project's solver): 48 samples at 128 points."""
    from mutransfer.data._burgers import generate_burgers

    return write_dataset(
        tmp_path_factory.mktemp("data") / "burgers.h5", generate_burgers(48, 128, seed=0, progress=False)
    )


def _config(**changes) -> TrainConfig:
    base = dict(lr=3e-3, batch_size=8, epochs=3, schedule="constant", progress=False, seed=0)
    return TrainConfig(**{**base, **changes})


def _model() -> FNO:
    torch.manual_seed(0)
    return FNO(1, 1, 1, modes=8, width=16, layers=3, parametrization="mup", projection_channels=16)


# --------------------------------------------------------------------------- precision


@pytest.mark.parametrize("dim,grid", [(1, (64,)), (2, (24, 20)), (3, (12, 12, 10))])
def test_bf16_forward_error_against_fp32_is_small_but_nonzero(dim, grid):
    torch.manual_seed(0)
    model = FNO(dim, 1, 1, modes=4, width=16, layers=4, parametrization="mup", padding=2)
    x = torch.randn(3, *grid, 1)
    with torch.no_grad():
        ref = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
    error = _rel(out, ref)
    assert out.dtype == torch.bfloat16
    assert 1e-4 < error < 3e-2  # bf16 has 8 bits of mantissa: a zero error would mean autocast did nothing


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_training_learns_on_cpu(burgers_file, precision):
    data = load_split(burgers_file, n_train=40, n_test=8)
    recipe = dict(epochs=15, lr=1e-2, schedule="cosine")
    fp32 = train(_model(), data, _config(**recipe))
    mixed = train(_model(), data, _config(**recipe, precision=precision))
    # measured (seed 0): fp32 ~0.09, bf16 0.10-0.40, fp16 ~0.19 from ~11 at the first epoch; over 6 seeds bf16's
    # median is 0.13 (fp16 skips its first steps while the loss scale backs off)
    assert mixed.status == "completed" and fp32.test_error < 0.15
    assert mixed.test_error < 0.6 and mixed.test_error < 0.06 * mixed.history[0].test_error
    assert mixed.test_error != fp32.test_error  # the precision changed something


def test_fp16_clips_the_unscaled_gradients(burgers_file, monkeypatch):
    """Clipping sees the true gradients (the loss scale, 65536 at first, is divided out before)."""
    import mutransfer._training.trainer as trainer

    seen = {}

    def record(model, clip_value):
        seen.setdefault(clip_value, []).append(
            max(float(torch.view_as_real(p.grad).abs().max()) for p in model.spectral[0].spectral_weights())
        )

    monkeypatch.setattr(trainer, "clip_spectral_gradients", record)
    data = load_split(burgers_file, n_train=8, n_test=8)
    train(_model(), data, _config(epochs=1, clip_value=0.5))
    train(_model(), data, _config(epochs=1, clip_value=0.25, precision="fp16"))
    fp32, fp16 = seen[0.5][0], seen[0.25][0]
    assert fp16 == pytest.approx(fp32, rel=0.05)  # scaled gradients would be ~65536x larger


def test_fp16_resume_restores_the_loss_scaler(burgers_file, tmp_path):
    data = load_split(burgers_file, n_train=40, n_test=8)
    whole = train(_model(), data, _config(epochs=4, precision="fp16"))
    first = train(
        _model(), data, _config(epochs=4, precision="fp16", checkpoint_dir=str(tmp_path)), callbacks=[_stop_after(2)]
    )
    assert first.status == "stopped"
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["grad_scaler"]["scale"] > 0
    resumed = train(_model(), data, _config(epochs=4, precision="fp16", checkpoint_dir=str(tmp_path)))
    assert resumed.resumed_from is not None and resumed.test_error == whole.test_error


def _stop_after(epochs: int):
    from mutransfer._training import StopTraining

    def callback(event):
        if event.event == "eval" and event.epoch >= epochs:
            raise StopTraining

    return callback


def test_a_checkpoint_written_in_another_precision_is_refused(burgers_file, tmp_path):
    data = load_split(burgers_file, n_train=16, n_test=8)
    train(_model(), data, _config(epochs=1, checkpoint_dir=str(tmp_path)))
    with pytest.raises(UserInputError, match="precision 'fp32' -> 'bf16'"):
        train(_model(), data, _config(epochs=2, precision="bf16", checkpoint_dir=str(tmp_path)))


def test_unknown_precision_is_a_one_line_error(tmp_path):
    with pytest.raises(UserInputError, match="precision 'fp8' is unknown; use one of: fp32, bf16, fp16"):
        _config(precision="fp8")
    from mutransfer._study import parse_study, read_study_mapping

    mapping, _ = read_study_mapping(None)
    mapping["training"]["precision"] = "fp8"
    with pytest.raises(UserInputError, match=r"training\.precision: 'fp8' is unknown"):
        parse_study(mapping, "x.yaml")


# --------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("padding", [0, 2])
@pytest.mark.parametrize("transform", ["dft", "fft"])
def test_bf16_activation_bytes_equal_saved_tensors(dim, padding, transform, monkeypatch):
    """Under autocast the planner's activations are exactly what autograd saves (bf16 copies included),
    with either truncated transform (GEMM DFT, the CPU default; torch.fft, the GPU default)."""
    import operators.spectral as spectral

    monkeypatch.setattr(spectral, "_TRANSFORM", transform)
    grid = {1: (32,), 2: (16, 12), 3: (8, 8, 6)}[dim]
    model = FNO(dim, 1, 1, modes=2, width=4, layers=3, padding=padding, projection_channels=9)
    saved, _ = saved_activation_bytes(model, torch.randn(3, *grid, 1), autocast_dtype=torch.bfloat16)
    bf16 = plan_fno(
        dim, 2, 4, 3, grid=grid, batch=3, padding=padding, projection_channels=9, precision="bf16", device="cpu"
    )
    fp32 = bf16.replan(precision="fp32")
    assert bf16.activations_bytes == saved
    assert bf16.activations_bytes < fp32.activations_bytes
    # the kept spectra in bf16 (CPUs with bf16 matrix units, the GEMM transform) or complex64: the plan knows which
    monkeypatch.setattr(spectral, "_SPECTRAL_BF16", "off" if spectral.cpu_multiplies_bf16() else "on")
    other, _ = saved_activation_bytes(model, torch.randn(3, *grid, 1), autocast_dtype=torch.bfloat16)
    assert bf16.replan(precision="bf16").activations_bytes == other
    assert (other != saved) == (transform == "dft")


#: (dim, grid, K, width, batch, padding, projection): activation-bound (the peak at the start of backward)
#: and weight-bound (the end of backward, the optimizer step) configurations
PEAK_CASES = [
    (1, (256,), 8, 16, 4, 0, 32),
    (2, (32, 32), 6, 16, 4, 3, 32),
    (3, (12, 12, 10), 3, 8, 2, 2, 32),
    (2, (20, 20), 8, 64, 2, 2, 32),
    (3, (16, 16, 16), 6, 32, 1, 0, 32),
]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("case", PEAK_CASES, ids=lambda c: f"d{c[0]}-K{c[2]}-m{c[3]}-B{c[4]}")
def test_plan_predicts_the_measured_cpu_peak(case, precision):
    """The plan (device cpu) against the peak of live tensors over a real training step: within 3 %."""
    from mutransfer._diagnostics.peak_memory import measure_training_peak

    dim, grid, modes, width, batch, padding, projection = case
    torch.manual_seed(0)
    model = FNO(dim, 1, 1, modes=modes, width=width, layers=4, padding=padding, projection_channels=projection)
    measured = measure_training_peak(model, batch, grid, precision=precision)["peak_bytes"]
    plan = plan_fno(
        dim,
        modes,
        width,
        4,
        grid=grid,
        batch=batch,
        padding=padding,
        precision=precision,
        projection_channels=projection,
        device="cpu",
    )
    assert plan.total_bytes == pytest.approx(measured, rel=0.03)


def test_the_peak_measurement_sees_a_leak():
    """A step that keeps an extra buffer alive raises the measured peak by exactly its size (the meter can fail)."""
    from mutransfer._diagnostics.peak_memory import LiveTensorPeak

    x = torch.randn(64, 64)
    with LiveTensorPeak([x]) as quiet:
        (x @ x).sum()
    kept = []
    with LiveTensorPeak([x]) as leaky:
        kept.append(torch.empty(1_000_000))  # 4 MB held across the step
        (x @ x).sum()
    assert leaky.peak_bytes - quiet.peak_bytes == 4_000_000


def test_largest_batch_is_the_edge_of_fitting():
    plan = plan_fno(3, 24, 64, 4, grid=(64, 64, 64), padding=4, batch=1, precision="bf16")
    memory = parse_bytes("80GiB")
    best = largest_batch(plan, memory)
    assert plan.replan(batch=best).fits(memory) and not plan.replan(batch=best + 1).fits(memory)
    assert best > largest_batch(plan.replan(precision="fp32"), memory)  # bf16 halves the activations
    assert largest_batch(plan, plan.step_peak_bytes - 1) == 0  # Adam's step alone does not fit: no batch does


def test_plan_cli_reports_fit_and_precision():
    from mutransfer.cli.main import main

    def plan(*extra):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert (
                main(
                    [
                        "plan",
                        "--dim",
                        "3",
                        "--modes",
                        "24",
                        "--width",
                        "64",
                        "--layers",
                        "4",
                        "--grid",
                        "64",
                        "--padding",
                        "4",
                        "--batch",
                        "2",
                        "--json",
                        *extra,
                    ]
                )
                == 0
            )
        return json.loads(buffer.getvalue())

    fp32 = plan("--device-memory", "80GiB")
    bf16 = plan("--precision", "bf16", "--device-memory", "80GiB")
    small = plan("--device-memory", "24GiB")
    assert fp32["spectral_params"] == 905_969_664 and fp32["fits"] and bf16["fits"] and not small["fits"]
    assert bf16["activations_bytes"] < fp32["activations_bytes"] and bf16["largest_batch"] > fp32["largest_batch"]
    assert small["largest_batch"] == 0 and fp32["device"] == "--device-memory"


# --------------------------------------------------------------------------- refusals before allocation


def test_trainer_refuses_before_moving_the_model_or_making_an_optimizer(burgers_file, tmp_path):
    data = load_split(burgers_file, n_train=8, n_test=8)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(UserInputError, match=r"needs .* but the memory limit set \(--device-memory\) is 1\.0 KiB"):
        train(model, data, _config(device_memory=1024, checkpoint_dir=str(tmp_path / "ckpt")))
    assert not (tmp_path / "ckpt").exists()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_train_cli_refuses_a_model_too_large_with_one_line(tmp_path, monkeypatch, capsys):
    from mutransfer.cli.main import main

    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    burgers = tmp_path / "b.h5"
    from mutransfer.data._burgers import generate_burgers

    write_dataset(burgers, generate_burgers(10, 128, seed=0, progress=False))
    # width 4096 at K 64: 4 x 4096^2 x 64 complex = 34 GB of weights (never built: planned on the meta device)
    rc = main(
        [
            "train",
            "--problem",
            "burgers",
            "--data",
            str(burgers),
            "--modes",
            "64",
            "--width",
            "4096",
            "--epochs",
            "1",
            "--no-progress",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "FNO-1D K=64 width 4096" in err[0] and "use" in err[0]
    assert not (tmp_path / "ckpt").exists()


def test_sweep_refuses_a_study_that_cannot_fit_before_starting(tmp_path, monkeypatch, capsys):
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MUTRANSFER_DEVICE_MEMORY", "1MiB")
    rc = main(["sweep", "--proxy-K", "6", "--target-K", "24"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "proxy trial" in err[0] and "MUTRANSFER_DEVICE_MEMORY" in err[0]
    assert not (tmp_path / "mutransfer-runs").exists() and not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "cache").exists()  # no data generated either


def test_sweep_memory_check_passes_a_study_that_fits(monkeypatch):
    from mutransfer._study import load_study
    from mutransfer._study.memory import check_study_memory

    study, _ = load_study(None)
    monkeypatch.setenv("MUTRANSFER_DEVICE_MEMORY", "1GiB")
    check_study_memory(study, 2, gpus=0)  # the quick study needs a few MiB
    monkeypatch.setenv("MUTRANSFER_DEVICE_MEMORY", "8MiB")
    with pytest.raises(UserInputError, match="target"):
        check_study_memory(study, 2, gpus=0)  # the K = 24 target (9.1 MiB) does not fit, the K = 6 proxy (7.1 MiB) does


def test_the_trainer_holds_the_plan_it_is_given_not_its_own(burgers_file, tmp_path, monkeypatch):
    """A sweep's workers get the driver's plan: the trainer checks that one (here a huge target's) and does not re-plan."""
    from mutransfer._study import load_study
    from mutransfer._study.memory import plan_step

    study, _ = load_study(None)
    big = plan_step(dataclasses.replace(study, target_width=4096), target=True, device="cpu")
    data = load_split(burgers_file, n_train=8, n_test=8)
    config = _config(device_memory=2**30, checkpoint_dir=str(tmp_path / "ckpt"))
    train(_model(), data, config)  # the small model fits 1 GiB when the trainer plans it
    with pytest.raises(UserInputError, match="width 4096"):
        train(_model(), data, config, plan=big)
    assert plan_step(study, target=True, device="cpu").total_bytes < 2**30 < big.total_bytes


def test_the_sweep_plans_each_model_once_and_carries_the_plan(tmp_path):
    from mutransfer._study import load_study
    from mutransfer._study.memory import plan_step
    from tests.sweep_helpers import prepared_by_hand

    study, _ = load_study(None)
    ctx = prepared_by_hand(study, tmp_path / "s")
    proxy = ctx.memory_plan(target=False, device="cpu")
    assert ctx.memory_plan(target=False, device="cpu") is proxy  # made once, the same object handed on
    assert proxy == plan_step(study, target=False, device="cpu")
    two = ctx.memory_plan(target=True, device="cpu", workers=2)
    one = ctx.memory_plan(target=True, device="cpu")
    assert two.total_bytes < one.total_bytes  # the per-worker batch is half the batch


# --------------------------------------------------------------------------- streamed training


@pytest.mark.parametrize("workers", [0, 2])
def test_streamed_training_equals_loaded_training(burgers_file, workers):
    """The same file trained from memory and streamed from disk gives the same numbers, bit for bit."""
    loaded = load_split(burgers_file, n_train=40, n_test=8, resolution=64, stream=False)
    streamed = load_split(burgers_file, n_train=40, n_test=8, resolution=64, stream=True)
    assert streamed.streaming and not loaded.streaming
    a = train(_model(), loaded, _config(epochs=2))
    b = train(_model(), streamed, _config(epochs=2, data_workers=workers))
    assert [h.test_error for h in a.history] == [h.test_error for h in b.history]
    assert a.train_loss == b.train_loss


def test_streaming_is_chosen_when_the_split_exceeds_the_memory_allowed(burgers_file):
    # 48 samples x 128 points x 2 arrays x 4 bytes = 49 KiB in memory
    assert load_split(burgers_file, n_train=40, n_test=8, max_memory=10_000).streaming
    assert not load_split(burgers_file, n_train=40, n_test=8, max_memory=10_000_000).streaming


def test_landscape_refuses_its_largest_point_before_starting(tmp_path, monkeypatch, capsys):
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MUTRANSFER_DEVICE_MEMORY", "5.2MiB")  # K = 4 (4.9 MiB) fits, K = 8 (5.4 MiB) does not
    rc = main(["landscape", "--modes", "4", "8", "--lr-range", "1e-3", "1e-2", "--points", "3", "--seeds", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "K=8" in err[0]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "mlflow.db").exists()


def test_the_plans_count_the_channels_of_a_data_file(tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    """A data file of 3 channels (PDEBench's per-sample groups): once the data are loaded, the plans the trials and
    the target get count the parameters of the models as built, lift and readout included (1 and 1 before: a
    lower bound, which the runner checks again with the data's channels)."""
    import h5py
    import numpy as np

    import mutransfer as mt
    from mutransfer._study.models import model_for
    from mutransfer._sweep.context import SweepOptions
    from mutransfer._sweep.prepare import prepare
    from mutransfer._sweep.runner import _load_data

    path = tmp_path / "2D_diff-react_NA_NA.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        for i in range(12):
            g = f.create_group(f"{i:04d}")
            g["data"] = rng.standard_normal((2, 16, 16, 3))  # (t, x, y, c)
            g["grid/x"], g["grid/y"], g["grid/t"] = np.linspace(-1, 1, 16), np.linspace(-1, 1, 16), np.linspace(0, 1, 2)
    sizes = {"problem.resolution": 16, "problem.n_train": 8, "problem.n_test": 4, "proxy_K": 3, "target_K": 6}
    sizes |= {"proxy_resolution": None, "operator.width": 8}
    spec = mt.StudySpec.default().replace(
        {"name": "channels", "problem.name": "darcy", "problem.data": str(path), **sizes, "target_width": 16}
    )
    ctx = prepare(SweepOptions(study_text=spec.text, runs_dir=str(tmp_path / "runs"), executor="inprocess", quiet=True))
    one_channel = ctx.memory_plan(target=True, device="cpu")
    data = _load_data(ctx)
    assert data.channels == (3, 3)
    target = ctx.memory_plan(target=True, device="cpu", channels=data.channels)
    proxy = ctx.memory_plan(target=False, device="cpu", channels=data.channels)

    def count(model) -> int:
        return sum(p.numel() for p in model.parameters())

    assert target.total_params == count(model_for(ctx.study, data.fit, target=True))
    assert proxy.total_params == count(model_for(ctx.study, data.proxy))
    assert one_channel.total_params < target.total_params  # what the plans counted before the data were read


def test_a_target_that_fits_only_as_one_channel_is_refused_once_the_data_are_read(tmp_path, monkeypatch):
    """The runner plans again with the data's channels, and refuses a step that no longer fits, before any lock,
    folder or run exists."""
    import mutransfer as mt
    from mutransfer._sweep.context import SweepOptions
    from mutransfer._sweep.prepare import prepare
    from mutransfer._sweep.runner import _load_data, sweep_steps

    test_the_plans_count_the_channels_of_a_data_file(tmp_path / "probe")  # writes the file, checks the counts
    path = tmp_path / "probe" / "2D_diff-react_NA_NA.h5"
    sizes = {"problem.resolution": 16, "problem.n_train": 8, "problem.n_test": 4, "proxy_K": 3, "target_K": 6}
    sizes |= {"proxy_resolution": None, "operator.width": 8, "target_width": 64, "problem.name": "darcy"}
    spec = mt.StudySpec.default().replace({"name": "tight", "problem.data": str(path), **sizes})
    options = SweepOptions(study_text=spec.text, runs_dir=str(tmp_path / "runs"), executor="inprocess", quiet=True)
    ctx = prepare(options)
    one = ctx.memory_plan(target=True, device="cpu").total_bytes
    three = ctx.memory_plan(target=True, device="cpu", channels=_load_data(ctx).channels).total_bytes
    assert one < three
    monkeypatch.setenv("MUTRANSFER_DEVICE_MEMORY", str((one + three) // 2))
    with pytest.raises(UserInputError, match="target .* needs .* but MUTRANSFER_DEVICE_MEMORY is"):
        next(sweep_steps(options))
    assert not (tmp_path / "runs" / "tight").exists()
