"""``sweep --coord-check``: the coordinate check across K before the target — reported, never blocking.

Runs at K_proxy, their geometric mean and K_target with the transferred LR, 3 seeds
(:mod:`mutransfer._diagnostics.coord_check`: the RMS change of the output and of every
Fourier layer after a few Adam steps, flat / grows / shrinks / unresolved / no-signal in K),
on the selection split. Its verdict (pass, or the flagged curves with their slopes and CIs) is
printed, kept in ``state.json`` and the report (``coord_check``) and logged to MLflow; the sweep
**goes on to the target either way**.

Why it does not stop the sweep: a gate may block only if it classifies known rules correctly, and this
one does not. On the rule panel (``benchmarks/rule_panel.py``, docs/results.md "The rule panel") it
flagged SP, the paper's μP and c(K)² on smooth Burgers, whose optima did not resolvably move — it would
have stopped sweeps that had no measured failure — while it passed c = 1. Use ``--verify`` to measure
whether the optimum moved.

On a user's factory (``operator.type: "mymodel:build"``) the check is the conformance kit's over K
(:func:`mutransfer._diagnostics.k_coord_check.k_coord_check`): the layers holding the spectral weights, found from the
muP facts on the parameters, at the same K values, seeds and LR; it passes when their update, relative to the K
rule, is flat in K **and** the same model under a deliberately wrong K rule grows (else the check could not see the
rule at these sizes: ``no-signal``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from mutransfer._diagnostics.coord_check import coord_check
from mutransfer._diagnostics.coord_plot import plot_coord_check
from mutransfer._diagnostics.k_coord_check import k_coord_check
from mutransfer._diagnostics.operator_check import TOLERANCE as KIT_TOLERANCE
from mutransfer._study import Study
from mutransfer._study_folder.state import write_atomic
from mutransfer._sweep._memo import Memo, remembered
from mutransfer._sweep.context import SweepError
from mutransfer._sweep.session import Made, Session
from mutransfer.data._validation import SelectionSplit

#: state.json's (and the report's) key of the coordinate check's record
COORD_CHECK_KEY = "coord_check"


def coord_check_gate(session: Session, made: Made) -> Made:
    """The coordinate check across K when ``--coord-check`` was given, once for the transferred hyperparameters (a
    resumed study reads it back): reported only."""
    if session.options.coord_check:
        hp = made.transfer.hp
        remembered(session, Memo(COORD_CHECK_KEY, dict, dict), {"hp": hp}, lambda: _coord_check(session, hp))
    return made


def _coord_check(session: Session, hp: dict) -> dict:
    """Run the coordinate check at the proxy's K, the target's and their geometric mean; say, log and return its
    record."""
    study = session.study
    proxy_k, target_k = study.proxy_modes, study.target_modes
    if proxy_k is None or target_k is None:  # prepare refuses --coord-check for a study whose K is not transferred
        raise SweepError(f"--coord-check: study {study.name!r} has no proxy and target K to check across; drop it")
    modes = sorted({proxy_k, round(math.sqrt(proxy_k * target_k)), target_k})
    session.say(f"coordinate check ({study.parametrization}) at K = {modes} before the target ...")
    json_path = session.study_dir.root / "coord_check.json"
    if study.family.facts_on_parameters:
        data, tracker = session.selection_data, session.tracker
        verdict, flagged, payload = _factory_check(study, data, tuple(modes), hp)
        write_atomic(json_path, json.dumps(payload, indent=2))
        tracker.client.log_artifact(session.parent_id, str(json_path), "coord_check")
        where, tolerance, why = json_path, KIT_TOLERANCE, "it checks that the K rule reaches those layers"
        layers = str(payload.get("layers", "spectral"))
        passed = (
            f"the update of the {'layers holding the spectral weights' if layers == 'spectral' else 'output'}, "
            "relative to the K rule, is flat in K and under a wrong K rule it grows"
        )
    else:
        verdict, flagged, where, tolerance = _fno_check(session, modes, hp)
        why = "this check misclassifies known rules (docs/results.md, the rule panel)"
        passed = "the output's and every Fourier layer's update are flat in K"
    if flagged:
        others = f" (and {len(flagged) - 1} more)" if len(flagged) > 1 else ""
        session.say(
            f"coordinate check {verdict} {study.parametrization}: {flagged[0]}{others}, tolerance {tolerance} at "
            f"K = {modes}; see {where}. Reported only: {why}, so the target trains anyway; --verify measures "
            "whether the optimum moved"
        )
    else:
        session.say(f"coordinate check passed: {passed} (reported only)")
    session.tracker.set_tags(session.parent_id, {"mutransfer.coord_check": verdict})
    return {"verdict": verdict, "modes": modes, "flagged": flagged, "blocks": False, "json": str(json_path)}


def _fno_check(session: Session, modes: list[int], hp: dict) -> tuple[str, list[str], Path, float]:
    """The project's FNO check (mutransfer._diagnostics.coord_check), its JSON and plot written and logged: (verdict,
    what it flags, the plot, the tolerance)."""
    study = session.study
    result = coord_check(
        session.selection_data,
        dim=study.dim,
        modes=modes,
        parametrizations=(study.parametrization,),
        width=study.operator.width,
        layers=study.operator.layers,
        padding=study.padding,
        lr=hp["lr"],
        clip_value=hp["clip_value"],
        batch_size=min(10, int(session.selection_data.train_x.shape[0])),  # the samples it draws from
        seeds=3,
        projection_channels=study.operator.projection_channels,
        init_scale=hp["init_scale"],
    )
    json_path, png_path = session.study_dir.root / "coord_check.json", session.study_dir.root / "coord_check.png"
    write_atomic(json_path, json.dumps(result.as_dict(), indent=2))
    plot_coord_check(result, png_path)
    session.tracker.client.log_artifact(session.parent_id, str(json_path), "coord_check")
    session.tracker.client.log_artifact(session.parent_id, str(png_path), "coord_check")
    flagged = [c.describe() for c in result.flagged(study.parametrization)]
    return result.verdict(study.parametrization), flagged, png_path, result.tolerance


def _factory_check(
    study: Study, data: SelectionSplit, modes: tuple[int, ...], hp: dict
) -> tuple[str, list[str], dict[str, object]]:
    """The kit's check over K on the study's factory (module docstring), on the first 10 fit samples, at the
    transferred LR, init scale and spectral clipping (``hp``): (verdict, what it flags, the JSON)."""
    lr, init_scale = float(hp["lr"]), float(hp.get("init_scale", 1.0))
    clip = None if hp.get("clip_value") is None else float(hp["clip_value"])
    knobs = {"init_scale": init_scale, "clip_value": clip}
    n = min(10, int(data.train_x.shape[0]))
    x = torch.as_tensor(data.train_x[:n], dtype=torch.float32)
    y = torch.as_tensor(data.train_y[:n], dtype=torch.float32)
    try:
        found = k_coord_check(
            study.family.build_class,
            name=study.operator.type,
            options=dict(study.operator.options),
            x=x,
            y=y,
            modes=modes,
            width=int(study.operator.width),
            lr=lr,
            seeds=3,
            k_exponent=float(study.k_exponent),
            init_scale=init_scale,
            clip_value=clip,
        )
    except Exception as exc:  # the user's code failed at a size no trial built (any error): reported, not raised
        flagged = [f"the check could not run the model: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"]
        return "error", flagged, {"modes": list(modes), "lr": lr, **knobs, "verdict": "error", "flagged": flagged}
    layers = found.curves[0].layers if found.curves else "spectral"
    return (
        found.verdict,
        found.flagged,
        found.as_dict() | knobs | {"layers": layers, "k_exponent": float(study.k_exponent)},
    )
