"""The optional gate before the target (``sweep --coord-check``): the coordinate check across K.

Runs at K_proxy, their geometric mean and K_target with the transferred LR; a flagged
parametrization stops the sweep with a :class:`SweepError` before any target compute
(the proxies stay done: ``--resume`` without ``--coord-check`` trains the target anyway).
"""

from __future__ import annotations

import json
import math

from mutransfer.sweep.context import SweepContext, SweepError
from mutransfer.sweep.state import write_atomic


def coord_check_gate(ctx: SweepContext) -> None:
    """The coordinate check across K when ``--coord-check`` was given and it has not passed yet."""
    if not ctx.options.coord_check or ctx.state.get("coord_check_passed"):
        return
    from mutransfer.diagnostics.coord_check import coord_check, plot_coord_check

    study, hp = ctx.study, ctx.transfer.hp
    modes = sorted({study.proxy_K, round(math.sqrt(study.proxy_K * study.target_K)), study.target_K})
    ctx.say(f"coordinate check ({study.parametrization}) at K = {modes} before the target ...")
    result = coord_check(
        ctx.data, dim=study.dim, modes=modes, parametrizations=(study.parametrization,), width=study.operator.width,
        layers=study.operator.layers, padding=study.padding, lr=hp["lr"], clip_value=hp["clip_value"],
        batch_size=min(10, int(study.problem.n_train)), seeds=3,
    )
    json_path, png_path = ctx.study_dir.root / "coord_check.json", ctx.study_dir.root / "coord_check.png"
    write_atomic(json_path, json.dumps(result.as_dict(), indent=2))
    plot_coord_check(result, png_path)
    ctx.tracker.client.log_artifact(ctx.parent_id, str(json_path), "coord_check")
    ctx.tracker.client.log_artifact(ctx.parent_id, str(png_path), "coord_check")
    if not result.passed(study.parametrization):
        worst = max((c for c in result.curves if c.gated), key=lambda c: abs(c.slope))
        raise SweepError(
            f"coordinate check flagged {study.parametrization}: {worst.kind} of {worst.layer} has log-log slope "
            f"{worst.slope:+.2f} in K (tolerance {result.tolerance}); see {png_path}. The proxy results are kept: "
            f"use parametrization mup, or run again with --resume and without --coord-check to train the target anyway"
        )
    ctx.say("coordinate check passed: spectral sizes are flat in K")
    ctx.update_state(coord_check_passed=True)
