"""Cost accounting of a study: FLOPs and device-seconds, μTransfer vs tuning the target directly.

μTransfer spends the proxy sweep plus one target training. Tuning the target directly
would run the same trials (same configurations, the same epochs each survived ASHA for)
at the target's K; its best trial is the final model, so no extra training follows.
The ratio (proxies + target) / direct is the paper's Table 1 "cost" column (0.30× on
Navier-Stokes FNO-3D, 1.38× on Darcy FNO-2D, where FFTs dominate and proxies are not cheap).

Two estimates: analytic FLOPs (operators.planning.step_flops, training steps only) and
device-seconds, where the direct sweep is the target's measured device-seconds per epoch
times the trials' epochs.
"""

from __future__ import annotations

from operators.planning import step_flops


def epoch_flops(study, modes: int) -> float:
    """Training FLOPs of one epoch at K = ``modes`` (every term of step_flops is linear in the batch)."""
    grid = (int(study.problem.resolution),) * study.dim
    per_sample = step_flops(
        study.dim, int(modes), study.operator.width, study.operator.layers, grid,
        batch=1, projection_channels=study.operator.projection_channels, padding=study.padding,
    )["total"]
    return per_sample * int(study.problem.n_train)


def study_cost(study, trials: list[dict], target: dict | None) -> dict:
    """FLOPs and device-seconds of the proxies, the target and a direct sweep of the target."""
    epochs = sum(int(t["epochs"]) for t in trials)
    proxy_flops = epochs * epoch_flops(study, study.proxy_K)
    direct_flops = epochs * epoch_flops(study, study.target_K)
    out = {
        "proxy_flops": proxy_flops,
        "direct_sweep_flops": direct_flops,
        "target_flops": None,
        "mutransfer_vs_direct_flops": None,
        "direct_sweep_device_seconds_estimate": None,
        "mutransfer_vs_direct_device_seconds": None,
    }
    if target and target.get("epochs"):
        target_flops = target["epochs"] * epoch_flops(study, study.target_K)
        out["target_flops"] = target_flops
        if direct_flops > 0:
            out["mutransfer_vs_direct_flops"] = (proxy_flops + target_flops) / direct_flops
        per_epoch = target["device_seconds"] / target["epochs"] if target.get("device_seconds") else None
        if per_epoch:
            direct = epochs * per_epoch
            proxy = sum(t["device_seconds"] for t in trials)
            out["direct_sweep_device_seconds_estimate"] = direct
            if direct > 0:
                out["mutransfer_vs_direct_device_seconds"] = (proxy + target["device_seconds"]) / direct
    return out
