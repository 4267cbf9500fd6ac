"""``sweep --coord-check``: the coordinate check across K before the target — reported, never blocking.

Runs at K_proxy, their geometric mean and K_target with the transferred LR, 3 seeds
(:mod:`mutransfer.diagnostics.coord_check`: the RMS change of the output and of every
Fourier layer after a few Adam steps, flat / grows / shrinks / unresolved / no-signal in K),
on the selection split. Its verdict (pass, or the flagged curves with their slopes and CIs) is
printed, kept in ``state.json`` and the report (``coord_check``) and logged to MLflow; the sweep
**goes on to the target either way**.

Why it does not stop the sweep: a gate may block only if it classifies known rules correctly, and this
one does not. On the rule panel (``benchmarks/rule_panel.py``, docs/results.md "The rule panel") it
flagged SP, the paper's μP and c(K)² on smooth Burgers, whose optima did not resolvably move — it would
have stopped sweeps that had no measured failure — while it passed c = 1. Use ``--verify`` to measure
whether the optimum moved.
"""

from __future__ import annotations

import json
import math

from mutransfer.diagnostics.coord_check import coord_check
from mutransfer.diagnostics.coord_plot import plot_coord_check
from mutransfer.study_folder.state import write_atomic
from mutransfer.sweep.context import SweepContext


def coord_check_gate(ctx: SweepContext) -> None:
    """The coordinate check across K when ``--coord-check`` was given and it has not run yet: reported only."""
    if not ctx.options.coord_check or ctx.state.get("coord_check"):
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
    verdict = result.verdict(study.parametrization)
    if flagged:
        others = f" (and {len(flagged) - 1} more)" if len(flagged) > 1 else ""
        ctx.say(
            f"coordinate check flagged {study.parametrization}: {flagged[0].describe()}{others}, tolerance "
            f"{result.tolerance} at K = {modes}; see {png_path}. Reported only: this check misclassifies known rules "
            "(docs/results.md, the rule panel), so the target trains anyway; --verify measures whether the optimum moved"
        )
    else:
        ctx.say("coordinate check passed: the output's and every Fourier layer's update are flat in K (reported only)")
    ctx.update_state(
        coord_check={
            "verdict": verdict,
            "modes": modes,
            "flagged": [c.describe() for c in flagged],
            "blocks": False,
            "json": str(json_path),
        }
    )
    if ctx.tracker is not None and ctx.parent_id is not None:
        ctx.tracker.set_tags(ctx.parent_id, {"mutransfer.coord_check": verdict})
