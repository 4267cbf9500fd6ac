"""The optional gate before the target (``sweep --coord-check``): the coordinate check across K.

Runs at K_proxy, their geometric mean and K_target with the transferred LR, 3 seeds
(:mod:`mutransfer.diagnostics.coord_check`: the RMS change of the output and of every
Fourier layer after a few Adam steps, flat / grows / shrinks / unresolved / no-signal in K).
A parametrization whose gated curves are not all flat stops the sweep with a
:class:`SweepError` naming the curve, its verdict and slope with CI, before any target
compute (the proxies stay done: ``--resume`` without ``--coord-check`` trains the target anyway).
"""

from __future__ import annotations

import json
import math

from mutransfer.diagnostics.coord_check import coord_check
from mutransfer.diagnostics.coord_plot import plot_coord_check
from mutransfer.study_folder.state import write_atomic
from mutransfer.sweep.context import SweepContext, SweepError


def coord_check_gate(ctx: SweepContext) -> None:
    """The coordinate check across K when ``--coord-check`` was given and it has not passed yet."""
    if not ctx.options.coord_check or ctx.state.get("coord_check_passed"):
        return

    study, hp = ctx.study, ctx.transfer.hp
    modes = sorted({study.proxy_K, round(math.sqrt(study.proxy_K * study.target_K)), study.target_K})
    ctx.say(f"coordinate check ({study.parametrization}) at K = {modes} before the target ...")
    result = coord_check(
        ctx.selection_data,
        dim=study.dim,
        modes=modes,
        parametrizations=(study.parametrization,),
        width=study.operator.width,
        layers=study.operator.layers,
        padding=study.padding,
        lr=hp["lr"],
        clip_value=hp["clip_value"],
        batch_size=min(10, int(study.problem.n_train)),
        seeds=3,
        projection_channels=study.operator.projection_channels,
        init_scale=hp["init_scale"],
    )
    json_path, png_path = ctx.study_dir.root / "coord_check.json", ctx.study_dir.root / "coord_check.png"
    write_atomic(json_path, json.dumps(result.as_dict(), indent=2))
    plot_coord_check(result, png_path)
    ctx.tracker.client.log_artifact(ctx.parent_id, str(json_path), "coord_check")
    ctx.tracker.client.log_artifact(ctx.parent_id, str(png_path), "coord_check")
    flagged = result.flagged(study.parametrization)
    if flagged:
        others = f" (and {len(flagged) - 1} more)" if len(flagged) > 1 else ""
        raise SweepError(
            f"coordinate check flagged {study.parametrization}: {flagged[0].describe()}{others}, tolerance "
            f"{result.tolerance} at K = {modes}; see {png_path}. The proxy results are kept: run again with --resume "
            f"and without --coord-check to train the target anyway"
        )
    ctx.say("coordinate check passed: the output's and every Fourier layer's update are flat in K")
    ctx.update_state(coord_check_passed=True)
