"""Cost accounting of a study: FLOPs and device-seconds, μTransfer vs tuning the target directly.

μTransfer spends the proxy sweep plus one target training. Tuning the target directly
would run the same trials (same configurations, the same epochs each survived ASHA for)
at the target's K; its best trial is the final model, so no extra training follows.
The ratio (proxies + target) / direct is the paper's Table 1 "cost" column (0.30× on
Navier-Stokes FNO-3D, 1.38× on Darcy FNO-2D, where FFTs dominate and proxies are not cheap).

Two estimates: training FLOPs, and training time in device-seconds, where the direct sweep is
the target's trainer seconds per epoch (× its devices) times the trials' epochs; fixed costs
(Ray, MLflow, start-up) are left out of both sides. ``sweep --baseline direct`` measures
direct tuning instead (mutransfer._sweep.baseline). FNO FLOPs are analytic
(operators.planning.step_flops); the attention operators' are counted by
torch.utils.flop_counter on one sample's forward and backward pass (matmuls only, like
the analytic count's dominant terms), at the data's input shape.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from mutransfer._study.models import build_model, model_spec
from operators.adapters import PackedPointSet


def trial_devices(study) -> float:
    """Devices one proxy (or direct) trial holds: its GPU share, else its CPUs."""
    return study.resources.gpus_per_trial or study.resources.cpus_per_trial


def target_devices(num_workers: int, use_gpu: bool, cpus_per_worker: int) -> int:
    """Devices a Ray Train target holds: one GPU per worker, else its CPUs."""
    return int(num_workers) * (1 if use_gpu else int(cpus_per_worker))


def counted_step_flops(model, input_shape: tuple[int, ...]) -> float:
    """FLOPs of one forward + backward pass of ``model`` on one sample of ``input_shape`` (no batch axis)."""

    x = torch.rand(1, *input_shape)
    if isinstance(model, PackedPointSet):  # every point real
        x[..., -1] = 1.0
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return float(counter.get_total_flops())


def epoch_flops(
    study,
    modes: int | None,
    width: int | None = None,
    input_shape: tuple[int, ...] | None = None,
    resolution: int | None = None,
) -> float | None:
    """Training FLOPs of one epoch at K = ``modes`` and ``width`` (default: the proxy's width), on the grid of
    ``resolution`` points per space axis (default: the study's, the target's).

    FNO: analytic (every term of step_flops is linear in the batch). Attention
    operators: counted at ``input_shape`` (one sample's input tensor shape, e.g.
    (31, 31, 1) or packed (P, d + C + 1)); None when no shape is known.
    """
    width = int(study.operator.width if width is None else width)
    family = study.family
    if family.flops is not None:
        padded = study.grid_shape_at(int(resolution or study.problem.resolution))
        grid = tuple(n - study.padding for n in padded)  # the data's grid; the FNO pads it itself
        per_sample = family.flops(family.configure(model_spec(study, modes=modes, width=width)), grid)
        return per_sample * study.problem.n_fit
    if input_shape is None:
        if study.point_problem:
            return None
        input_shape = (int(study.problem.resolution),) * study.dim + (1,)

    with torch.random.fork_rng():
        model = build_model(study, width=width, input_channels=int(input_shape[-1]), output_channels=1)
        per_sample = counted_step_flops(model, tuple(input_shape))
    return per_sample * study.problem.n_fit


def model_epoch_flops(study, *, at_target: bool, input_shape: tuple[int, ...] | None = None) -> float | None:
    """Training FLOPs of one epoch of the study's target model (``at_target``: target_K, target_width, the full
    grid) or of its proxy (proxy_K, the proxy's width, on the proxy's grid ``proxy_resolution``): the one place
    each side's size is read for a cost."""
    if at_target:
        return epoch_flops(study, study.target_K, study.target_width or study.operator.width, input_shape)
    return epoch_flops(study, study.proxy_K, study.operator.width, input_shape, study.proxy_resolution)


def study_cost(study, trials: list, target: dict | None, input_shape: tuple[int, ...] | None = None) -> dict:
    """FLOPs and device-seconds of the proxies (TrialRecords), the target and a direct sweep of the target."""
    epochs = sum(int(t.epochs) for t in trials)
    proxy_epoch = model_epoch_flops(study, at_target=False, input_shape=input_shape)
    target_epoch = model_epoch_flops(study, at_target=True, input_shape=input_shape)
    proxy_flops = None if proxy_epoch is None else epochs * proxy_epoch
    direct_flops = None if target_epoch is None else epochs * target_epoch
    out = {
        "flops_method": "analytic" if study.family.flops is not None else "counted",
        "proxy_flops": proxy_flops,
        "direct_sweep_flops": direct_flops,
        "target_flops": None,
        "mutransfer_vs_direct_flops": None,
        "direct_sweep_training_seconds_estimate": None,
        "mutransfer_vs_direct_training_seconds": None,
    }
    if target and target.get("epochs") and target_epoch is not None:
        target_flops = target["epochs"] * target_epoch
        out["target_flops"] = target_flops
        if direct_flops and proxy_flops is not None:
            out["mutransfer_vs_direct_flops"] = (proxy_flops + target_flops) / direct_flops
        # Training time only (the trainer's own seconds x the devices it held): Ray Train's start-up is a fixed
        # cost per training, not per epoch, so billing the target's whole wall time to every epoch overstated
        # direct tuning. ``sweep --baseline direct`` measures direct tuning instead of estimating it.
        devices = target_devices(
            target.get("num_workers", 1), bool(target.get("use_gpu")), target.get("cpus_per_worker", 1)
        )
        target_training = target["trainer_seconds"] * devices if target.get("trainer_seconds") else None
        if target_training:
            direct = epochs * target_training / target["epochs"]
            proxy = sum(t.trainer_seconds for t in trials) * trial_devices(study)
            out["direct_sweep_training_seconds_estimate"] = direct
            if direct > 0:
                out["mutransfer_vs_direct_training_seconds"] = (proxy + target_training) / direct
    return out


def direct_wall_estimate(compute: dict, trials: list, target: dict | None) -> float | None:
    """The wall time tuning the target directly would have taken (seconds; None where a part was not measured):
    this study's setup and its proxy phase's time outside training (start-up, scheduling), with the same trials
    trained at the target's size, at the target's measured trainer seconds per epoch, as many at once as the
    proxies ran; no target phase (the direct search's best is the tuned target). Same concurrency and start-up as
    the proxies is in direct tuning's favour: a target-sized trial holds more of the machine."""
    setup, phase = compute.get("setup_seconds"), compute.get("proxy_phase_seconds")
    if not (target and target.get("trainer_seconds") and target.get("epochs")) or setup is None or phase is None:
        return None
    concurrency = max(1, int(compute.get("proxy_concurrency") or 1))
    proxy_training = sum(t.trainer_seconds for t in trials) / concurrency
    direct_training = sum(int(t.epochs) for t in trials) * target["trainer_seconds"] / target["epochs"] / concurrency
    return setup + max(0.0, phase - proxy_training) + direct_training


def add_to_mutransfer(compute: dict, flops: float | None, training_seconds: float) -> None:
    """Count extra trainings (a ladder's rungs, top-k's other candidates) on muTransfer's side of ``study_cost``'s
    ratios to direct tuning: their FLOPs (None: unknown, the FLOPs ratio is left as is) and training time
    (trainer seconds x devices)."""
    if compute.get("mutransfer_vs_direct_flops") is not None and flops is not None:
        compute["mutransfer_vs_direct_flops"] += flops / compute["direct_sweep_flops"]
    direct = compute.get("direct_sweep_training_seconds_estimate")
    if compute.get("mutransfer_vs_direct_training_seconds") is not None and direct:
        compute["mutransfer_vs_direct_training_seconds"] += training_seconds / direct


def target_cost(study, outcome, input_shape) -> dict:
    """Device-seconds (trainer / overhead) and FLOPs of one Ray Train target training (a TargetOutcome)."""
    devices = target_devices(outcome.num_workers, outcome.use_gpu, outcome.cpus_per_worker)
    per_epoch = model_epoch_flops(study, at_target=True, input_shape=input_shape)
    trainer = min(outcome.device_seconds, outcome.trainer_seconds * devices)  # training cannot outlast the device
    return {
        "device_seconds": outcome.device_seconds,
        "trainer_device_seconds": trainer,
        "overhead_device_seconds": max(0.0, outcome.device_seconds - trainer),
        "flops": None if per_epoch is None else outcome.epochs * per_epoch,
        "epochs": outcome.epochs,
    }
