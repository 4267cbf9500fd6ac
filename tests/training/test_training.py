"""Tests for mutransfer._training: losses, schedules, the training loop and resume."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from mutransfer._training import (
    DIVERGED_METRIC,
    EpochRecord,
    StopTraining,
    TrainConfig,
    TrainEnd,
    TrainResult,
    load_checkpoint,
    relative_l2,
    schedules,
    train,
)
from mutransfer._training.schedules import schedule_function
from mutransfer.errors import UserInputError
from operators.fno import FNO
from operators.parametrization import optimizer_param_groups

N_TRAIN, N_TEST, GRID, BATCH = 24, 8, 32, 8  # 3 iterations per epoch


def make_data(seed: int = 0) -> SimpleNamespace:
    """Smooth random 1D functions u (n, GRID, 1) → antiderivative-like target (n, GRID, 1)."""
    g = torch.Generator().manual_seed(seed)
    n = N_TRAIN + N_TEST
    x = torch.linspace(0, 2 * math.pi, GRID)
    coeff = torch.randn(n, 4, generator=g)
    u = sum(coeff[:, k : k + 1] * torch.sin((k + 1) * x) for k in range(4))
    v = sum(-coeff[:, k : k + 1] * torch.cos((k + 1) * x) / (k + 1) for k in range(4))
    u, v = u.unsqueeze(-1), v.unsqueeze(-1)
    return SimpleNamespace(train_x=u[:N_TRAIN], train_y=v[:N_TRAIN], test_x=u[N_TRAIN:], test_y=v[N_TRAIN:])


def make_fno(seed: int = 0, parametrization: str = "mup") -> FNO:
    torch.manual_seed(seed)
    return FNO(1, 1, 1, modes=4, width=8, layers=2, parametrization=parametrization, projection_channels=16)


def config(**kw) -> TrainConfig:
    base = dict(lr=3e-3, batch_size=BATCH, epochs=4, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def one_line(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg and msg
    return msg


# --------------------------------------------------------------------------- losses


def test_relative_l2_matches_hand_computation():
    pred = torch.tensor([[[1.0], [2.0]], [[0.0], [0.0]]])  # (2, 2, 1)
    target = torch.tensor([[[1.0], [1.0]], [[3.0], [4.0]]])
    # sample 0: |(0, 1)| / |(1, 1)| = 1/sqrt(2); sample 1: |(3, 4)| / |(3, 4)| = 1
    per_sample = relative_l2(pred, target, reduction="none")
    assert per_sample.shape == (2,)
    assert torch.allclose(per_sample, torch.tensor([1 / math.sqrt(2), 1.0]))
    assert relative_l2(pred, target).item() == pytest.approx((1 / math.sqrt(2) + 1) / 2)
    assert relative_l2(pred, target, reduction="sum").item() == pytest.approx(1 / math.sqrt(2) + 1)
    x = torch.randn(3, 5, 5, 2)
    assert relative_l2(x, x).item() == 0.0
    zero = torch.zeros(2, 4)
    assert torch.isfinite(relative_l2(zero + 1, zero))  # eps guard
    assert relative_l2(zero, zero).item() == 0.0
    with pytest.raises(UserInputError):
        relative_l2(x, x, reduction="max")


# --------------------------------------------------------------------------- schedules


def build_scheduler(optimizer, name: str, total: int, **options):
    """The trainer's scheduler: the schedule as a LambdaLR over ``optimizer`` (mutransfer._training._schedule_of)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_function(name, total, **options))


def two_group_optimizer(lr: float = 1.0, ratio: float = 0.25) -> torch.optim.Optimizer:
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2))
    return torch.optim.Adam([{"params": [a], "lr": lr * ratio}, {"params": [b], "lr": lr}])


def trajectory(name: str, total: int, ratio: float = 0.25, **kw) -> list[tuple[float, float]]:
    """(base-group LR, ratio) used at iterations 0..total (the last is after the final step)."""
    opt = two_group_optimizer(ratio=ratio)
    sched = build_scheduler(opt, name, total, **kw)
    out = []
    for _ in range(total):
        spectral, other = (g["lr"] for g in opt.param_groups)
        out.append((other, spectral / other))
        opt.step()
        sched.step()
    spectral, other = (g["lr"] for g in opt.param_groups)
    out.append((other, spectral / other if other else (ratio if spectral == 0 else math.inf)))
    return out


def test_step_schedule_halves_exactly_at_milestones():
    lrs = [lr for lr, _ in trajectory("step", 10, milestones=[3, 7])]
    assert lrs == [1.0] * 3 + [0.5] * 4 + [0.25] * 4
    lrs = [lr for lr, _ in trajectory("step", 9, step_size=4)]
    assert lrs == [1.0] * 4 + [0.5] * 4 + [0.25] * 2
    lrs = [lr for lr, _ in trajectory("step", 10)]  # default: every total // 5
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125, 0.0625, 0.0625, 0.03125]
    with pytest.raises(UserInputError):
        build_scheduler(two_group_optimizer(), "step", 10, milestones=[3], step_size=2)


def test_cosine_ends_at_eta_min():
    lrs = [lr for lr, _ in trajectory("cosine", 20)]
    assert lrs[0] == 1.0 and lrs[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    assert lrs[10] == pytest.approx(0.5)
    lrs = [lr for lr, _ in trajectory("cosine", 20, min_factor=0.1)]
    assert lrs[-1] == pytest.approx(0.1)


def test_onecycle_peaks_at_lr():
    lrs = [lr for lr, _ in trajectory("onecycle", 20, pct_start=0.3)]
    assert max(lrs) == pytest.approx(1.0)
    assert lrs.index(max(lrs)) == 6
    assert lrs[0] == pytest.approx(1 / 25)
    assert lrs[-1] == pytest.approx(1 / 25 / 1e4)
    assert all(a <= b for a, b in zip(lrs[:7], lrs[1:7]))
    assert all(a >= b for a, b in zip(lrs[6:], lrs[7:]))


def test_warmup_rises_linearly_then_follows_the_schedule_on_its_own_clock():
    """warmup 0.25 of 20 iterations: 1/5, 2/5, ... 5/5 of the schedule's LR, then the schedule itself; a cosine still
    ends at 0 at the budget's end (it is not shifted by the warm-up)."""
    plain = [lr for lr, _ in trajectory("cosine", 20)]
    warm = [lr for lr, _ in trajectory("cosine", 20, warmup=0.25)]
    assert warm[:5] == pytest.approx([plain[i] * (i + 1) / 5 for i in range(5)])
    assert warm[5:] == pytest.approx(plain[5:]) and warm[-1] == pytest.approx(0.0, abs=1e-12)
    assert [lr for lr, _ in trajectory("constant", 4, warmup=0.5)] == pytest.approx([0.5, 1.0, 1.0, 1.0, 1.0])
    assert [lr for lr, _ in trajectory("constant", 4, warmup=0.0)] == [1.0] * 5  # no warm-up: unchanged
    for _, ratio in trajectory("step", 10, ratio=0.3, warmup=0.3):  # the muP ratio holds through it
        assert ratio == pytest.approx(0.3, rel=1e-12)
    for bad in (1.0, -0.1):
        with pytest.raises(UserInputError, match="warmup"):
            build_scheduler(two_group_optimizer(), "cosine", 10, warmup=bad)


@pytest.mark.parametrize("name", schedules.SCHEDULES)
def test_schedules_preserve_group_lr_ratio(name):
    for _, ratio in trajectory(name, 25, ratio=0.3):
        assert ratio == pytest.approx(0.3, rel=1e-12)


def test_unknown_schedule_lists_valid_names():
    with pytest.raises(UserInputError) as exc:
        build_scheduler(two_group_optimizer(), "linear", 10)
    msg = one_line(exc)
    assert all(name in msg for name in schedules.SCHEDULES)


def test_scheduler_state_round_trip_with_weights_only(tmp_path):
    opt = two_group_optimizer()
    sched = build_scheduler(opt, "onecycle", 30)
    for _ in range(11):
        opt.step()
        sched.step()
    torch.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=True)
    opt2 = two_group_optimizer()
    sched2 = build_scheduler(opt2, "onecycle", 30)
    opt2.load_state_dict(state["opt"])
    sched2.load_state_dict(state["sched"])
    for _ in range(5):
        for o, s in ((opt, sched), (opt2, sched2)):
            o.step()
            s.step()
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in opt2.param_groups]


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(lr=-1e-3, epochs=1), "lr"),
        (dict(lr=0.0, epochs=1), "lr"),
        (dict(lr=1e-3, batch_size=0, epochs=1), "batch_size"),
        (dict(lr=1e-3, epochs=1, iterations=5), "epochs"),
        (dict(lr=1e-3), "epochs"),
        (dict(lr=1e-3, epochs=0), "epochs"),
        (dict(lr=1e-3, epochs=2, schedule="linear"), "schedule"),
        (dict(lr=1e-3, epochs=2, betas=(0.9,)), "betas"),
        (dict(lr=1e-3, epochs=2, clip_value=-1.0), "clip_value"),
        (dict(lr=1e-3, epochs=2, milestones=[0]), "milestones"),
        (dict(lr=1e-3, epochs=2, device="tpu"), "device"),
        (dict(lr=1e-3, epochs=2, eval_every=0), "eval_every"),
    ],
)
def test_config_validation(kw, field):
    with pytest.raises(UserInputError) as exc:
        TrainConfig(**kw)
    assert field in one_line(exc)


# --------------------------------------------------------------------------- training


def test_training_reduces_error_and_reports_events():
    events = []
    model = make_fno(parametrization="mup")
    result = train(model, make_data(), config(lr=1e-2, epochs=6, schedule="cosine"), callbacks=[events.append])
    assert isinstance(result, TrainResult)
    assert result.status == "completed" and result.device == "cpu"
    assert result.epochs_completed == 6 and result.iterations_completed == 18
    assert all(isinstance(h, EpochRecord) for h in result.history)
    assert [h.epoch for h in result.history] == [1, 2, 3, 4, 5, 6]
    assert result.history[-1].test_error < result.history[0].test_error
    assert result.test_error == result.history[-1].test_error
    assert result.best_test_error == min(h.test_error for h in result.history)
    assert result.resumed_from is None
    evals, end = events[:-1], events[-1]
    assert len(evals) == 6
    assert evals == result.history  # the callbacks get the history's records
    assert evals[0].lr == pytest.approx(1e-2 * schedules.cosine(3, 18))
    assert isinstance(end, TrainEnd) and end.event == "end" and end.status == "completed"


def test_resume_after_interrupt_matches_uninterrupted_run(tmp_path):
    data = make_data()
    cfg = dict(epochs=4, schedule="step", milestones=[1, 3], clip_value=0.5)
    a = train(make_fno(seed=1), data, config(checkpoint_dir=str(tmp_path / "a"), **cfg))
    model_a = make_fno(seed=1)
    model_a.load_state_dict(load_checkpoint(tmp_path / "a" / "checkpoint.pt")["model"])

    def kill_after_epoch_2(event):
        if isinstance(event, EpochRecord) and event.epoch == 2:
            raise KeyboardInterrupt

    model_b = make_fno(seed=1)
    with pytest.raises(KeyboardInterrupt):
        train(model_b, data, config(checkpoint_dir=str(tmp_path / "b"), **cfg), callbacks=[kill_after_epoch_2])
    assert load_checkpoint(tmp_path / "b" / "checkpoint.pt")["epoch"] == 2

    fresh = make_fno(seed=123)  # different init: everything must come from the checkpoint
    b = train(fresh, data, config(checkpoint_dir=str(tmp_path / "b"), **cfg), resume=True)
    assert b.status == "completed" and b.resumed_from == 6
    assert b.epochs_completed == 4 and b.iterations_completed == 12
    assert [h.epoch for h in b.history] == [1, 2, 3, 4]
    for pa, pb in zip(model_a.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(pa, pb)
    strip = lambda hs: [dataclasses.replace(h, seconds=0.0) for h in hs]  # noqa: E731
    assert strip(b.history) == strip(a.history)
    assert b.test_error == a.test_error

    # resuming a finished run trains nothing and reports the same result
    again = train(make_fno(seed=5), data, config(checkpoint_dir=str(tmp_path / "b"), **cfg))
    assert again.status == "completed" and again.iterations_completed == 12 and again.test_error == a.test_error


def test_resume_refuses_changed_trajectory_settings(tmp_path):
    data = make_data()
    train(make_fno(), data, config(epochs=1, checkpoint_dir=str(tmp_path)))
    with pytest.raises(UserInputError) as exc:
        train(make_fno(), data, config(epochs=1, lr=1e-2, checkpoint_dir=str(tmp_path)))
    msg = one_line(exc)
    assert "lr" in msg and "--no-resume" in msg
    # progress/eval settings may change; resume=False starts over
    r = train(make_fno(), data, config(epochs=1, lr=1e-2, checkpoint_dir=str(tmp_path)), resume=False)
    assert r.resumed_from is None and r.status == "completed"


def test_checkpoint_is_weights_only_loadable(tmp_path):
    model = make_fno()
    train(model, make_data(), config(epochs=2, checkpoint_dir=str(tmp_path)))
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["iteration"] == 6 and state["epoch"] == 2 and state["status"] == "completed"
    assert state["model_config"] == model.config
    assert state["train_config"]["lr"] == 3e-3 and state["train_config"]["betas"] == [0.9, 0.999]
    assert len(state["history"]) == 2
    groups = state["optimizer"]["param_groups"]
    assert {g["name"] for g in groups} == {"spectral", "other"}
    # muP: the spectral group keeps lr_multiplier x the master LR after scheduling
    masters = [g["lr"] / g["lr_multiplier"] for g in groups]
    assert min(g["lr_multiplier"] for g in groups) < 1
    assert masters == pytest.approx([masters[0]] * len(masters), rel=1e-12)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_history_records_round_trip_through_checkpoints(tmp_path):
    """The checkpoint holds plain dicts in the layout older versions wrote; both directions read them."""
    result = train(make_fno(), make_data(), config(epochs=2, checkpoint_dir=str(tmp_path)))
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    keys = ["event", "epoch", "iteration", "train_loss", "test_error", "lr", "seconds", "val_error"]
    assert [list(d) for d in state["history"]] == [keys, keys] and state["history"][0]["event"] == "eval"
    assert [EpochRecord.from_dict(d) for d in state["history"]] == result.history
    record = result.history[0]
    assert EpochRecord.from_dict(record.as_dict()) == record
    older = dict(state, history=[{**d, "extra": 1} for d in state["history"]])  # unknown keys are ignored
    torch.save(older, tmp_path / "checkpoint.pt")
    again = train(make_fno(), make_data(), config(epochs=2, checkpoint_dir=str(tmp_path)))
    assert again.resumed_from == 6 and again.history == result.history


def test_load_checkpoint_errors(tmp_path):
    with pytest.raises(UserInputError) as exc:
        load_checkpoint(tmp_path / "missing.pt")
    one_line(exc)
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(UserInputError) as exc:
        load_checkpoint(bad)
    one_line(exc)


def test_diverging_lr_reports_sentinel_without_raising():
    events = []
    result = train(
        make_fno(parametrization="standard"), make_data(), config(lr=1e30, epochs=3), callbacks=[events.append]
    )
    assert result.status == "diverged"
    assert result.test_error == DIVERGED_METRIC and math.isfinite(result.test_error)
    assert result.iterations_completed < 9
    assert isinstance(events[-1], TrainEnd) and events[-1].status == "diverged"


def test_non_finite_data_diverges_on_first_step(tmp_path):
    data = make_data()
    data.train_y = data.train_y.clone()
    data.train_y[:] = float("inf")
    result = train(make_fno(), data, config(epochs=2, checkpoint_dir=str(tmp_path)))
    assert result.status == "diverged" and result.iterations_completed == 0
    assert result.test_error == DIVERGED_METRIC == result.best_test_error
    # a diverged checkpoint is final: resuming does not retrain
    again = train(make_fno(), data, config(epochs=2, checkpoint_dir=str(tmp_path)))
    assert again.status == "diverged" and again.resumed_from == 0


def test_stop_training_from_callback():
    def stop_after_two(event):
        if isinstance(event, EpochRecord) and event.epoch >= 2:
            raise StopTraining

    result = train(make_fno(), make_data(), config(epochs=5), callbacks=[stop_after_two])
    assert result.status == "stopped"
    assert result.epochs_completed == 2 and len(result.history) == 2
    assert result.test_error == result.history[-1].test_error


def test_iterations_budget_runs_exact_number_of_steps(tmp_path):
    model = make_fno()
    steps = []
    model.register_forward_hook(lambda m, i, o: steps.append(1) if m.training else None)
    result = train(model, make_data(), config(epochs=None, iterations=7, eval_every=3, checkpoint_dir=str(tmp_path)))
    assert result.status == "completed"
    assert sum(steps) == 7 and result.iterations_completed == 7
    assert result.epochs_completed == 2  # 3 iterations per epoch
    assert [h.iteration for h in result.history] == [3, 6, 7]
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    assert all(int(s["step"]) == 7 for s in state["optimizer"]["state"].values())


def test_trainer_mechanics_with_plain_torch_model():
    """Any nn.Module works (no spectral weights → a single "other" group)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 16), nn.GELU(), nn.Linear(16, 1))
    assert [g["name"] for g in optimizer_param_groups(model, 1e-3)] == ["other"]
    result = train(model, make_data(), config(epochs=2, schedule="onecycle"))
    assert result.status == "completed" and result.iterations_completed == 6


def test_exploded_but_finite_loss_counts_as_diverged():
    """Predictions 10^4 times the targets' size: finite, but the run has blown up."""
    data = make_data()
    data.train_y = data.train_y * 1e-9
    data.test_y = data.test_y * 1e-9
    result = train(make_fno(), data, config(epochs=2))
    assert result.status == "diverged" and result.test_error == DIVERGED_METRIC


def test_the_training_clock_leaves_setup_out(monkeypatch):
    """The run's seconds (history, end event) count the loop only; setup (the first optimizer of a process imports
    torch._dynamo, about 1.3 s) counts in the call's wall time. Fails if the clock starts with setup."""
    import time

    from mutransfer._training import trainer

    slow_setup = 0.4
    build = trainer._Run._optimizer

    def slow_optimizer(self, unit):
        time.sleep(slow_setup)
        return build(self, unit)

    monkeypatch.setattr(trainer._Run, "_optimizer", slow_optimizer)
    events = []
    result = train(make_fno(), make_data(), config(epochs=2), callbacks=[events.append])
    assert result.history[-1].seconds > 0
    assert result.seconds - result.trainer_seconds >= slow_setup  # the call's wall time holds setup, the clock not
    assert result.trainer_seconds >= result.history[-1].seconds
    assert events[-1].seconds == pytest.approx(result.trainer_seconds, abs=0.05)
    # a run that diverges before its first evaluation has no history: its training time is the clock's too
    data = make_data()
    data.train_y = data.train_y.clone()
    data.train_y[:] = float("inf")
    diverged = train(make_fno(), data, config(epochs=2))
    assert diverged.status == "diverged" and not diverged.history
    assert diverged.seconds - diverged.trainer_seconds >= slow_setup


def test_the_training_clock_leaves_checkpoints_and_callbacks_out(tmp_path):
    """A callback's time (a trial's report to Tune, the target's checkpoint to Ray Train) and the checkpoint writes
    are overhead: a callback that sleeps moves the call's wall time, not the run's seconds. Fails if they count."""
    import time

    pause = 0.15
    result = train(
        make_fno(),
        make_data(),
        config(epochs=3, checkpoint_dir=str(tmp_path)),
        callbacks=[lambda event: time.sleep(pause)],
    )
    assert result.history[-1].seconds > 0
    # the three evaluations' callbacks slept (the end event's comes after the result): in the call, not the clock
    assert result.seconds - result.trainer_seconds >= 3 * pause


def test_the_divergence_check_finds_every_non_finite_weight_and_no_finite_one():
    """all_finite reads each tensor's sum: a NaN, an infinity of either sign, both infinities (whose sum is NaN) and a
    NaN in a complex weight's imaginary part are found; large but finite half-precision and float64 tensors are not
    flagged (their sums accumulate in float32 and float64)."""
    from mutransfer._training.precision import all_finite

    base = [torch.ones(3, 4), torch.zeros(5, dtype=torch.complex64)]
    assert all_finite(base) and all_finite([])
    for bad in (math.nan, math.inf, -math.inf):
        weight = torch.ones(3, 4)
        weight[1, 2] = bad
        assert not all_finite([weight, base[1]]), bad
    both = torch.tensor([math.inf, -math.inf])
    assert not all_finite([both])
    spectral = torch.zeros(5, dtype=torch.complex64)
    spectral[2] = complex(0.0, math.nan)
    assert not all_finite([base[0], spectral])
    assert all_finite([torch.full((100_000,), 60_000.0, dtype=torch.float16)])  # sums past float16's 65,504
    # the documented limit: finite float32 entries whose sum passes float32's range (~3.4e38) count as diverged
    assert all_finite([torch.full((1000,), 1e34)]) and not all_finite([torch.full((1000,), 1e36)])
    assert all_finite([torch.full((10,), 1e300, dtype=torch.float64), torch.full((4,), 1e300, dtype=torch.complex128)])


@pytest.mark.parametrize("bad", [math.inf, math.nan, complex(math.nan, 0.0)])
def test_the_loss_scaler_skips_a_step_whose_gradients_overflow_and_halves_its_scale(bad):
    """fp16's loss scaler (mutransfer._training.precision.LossScaler): an unscaled gradient that is not finite (a real
    or a complex one) skips the optimizer's step and halves the scale; finite ones step and keep it."""
    from mutransfer._training.precision import LossScaler

    real = torch.nn.Parameter(torch.ones(3))
    spectral = torch.nn.Parameter(torch.ones(2, dtype=torch.complex64))
    opt = torch.optim.SGD([real, spectral], lr=0.1)
    scaler = LossScaler(init_scale=8.0)
    real.grad, spectral.grad = torch.full((3,), 8.0), torch.full((2,), 8.0 + 0j, dtype=torch.complex64)
    scaler.unscale_(opt)
    assert scaler.step(opt) and scaler.scale_value == 8.0  # finite: stepped by the unscaled gradient (1.0)
    assert torch.allclose(real.detach(), torch.full((3,), 0.9))
    target = spectral if isinstance(bad, complex) else real
    real.grad, spectral.grad = torch.full((3,), 8.0), torch.full((2,), 8.0 + 0j, dtype=torch.complex64)
    with torch.no_grad():
        target.grad[0] = bad
    before = [p.detach().clone() for p in (real, spectral)]
    scaler.unscale_(opt)
    assert not scaler.step(opt) and scaler.scale_value == 4.0  # skipped, the scale halved
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, (real, spectral)))
