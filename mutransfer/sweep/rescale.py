"""The transfer phase: the best proxy's hyperparameters rescaled to the target by the muP rules.

operators.transfer.transfer does the arithmetic (K, width or both); the models apply
every multiplier themselves (c(K) on spectral weights, m0/m on hidden weights under
width-muP), so the target's hyperparameters are the proxy's and the record states the
effective values each rule produces. Sets ``ctx.transfer`` (:class:`TransferResult`).
"""

from __future__ import annotations

from mutransfer.study import Study
from mutransfer.sweep.context import SweepContext, TransferResult
from mutransfer.study_folder.records import TrialRecord


def transfer(study: Study, best: TrialRecord | dict) -> tuple[dict, dict]:
    """(the transfer record as a dict, the target's hyperparameters) for the best proxy."""
    from operators.transfer import transfer as rescale

    hp = dict(best.hp if isinstance(best, TrialRecord) else best["hp"])
    own = study.family.own_hyperparameters(hp)  # clip_value, init_scale only where they act
    unchanged = {k: v for k, v in own.items() if k != "lr" and v is not None}
    record = rescale(study.transfer_scaling(), hp["lr"], init_scale=own.get("init_scale"), unchanged=unchanged)
    stds = {q.name: q for q in record.quantities}.get("spectral_init_std")
    out = record.as_dict()
    out.update(
        table=record.format_table(),
        lr_factor=record.lr_factor,
        init_variance_factor=record.init_variance_factor,
        proxy_spectral_init_std=stds.proxy if stds else None,
        target_spectral_init_std=stds.target if stds else None,
        note="; ".join(record.notes),
    )
    return out, hp


def transfer_phase(ctx: SweepContext) -> None:
    """Set ``ctx.transfer`` from ``ctx.proxies.best`` (with a ladder: the last rung's best, from its size)."""
    record, hp = transfer(*transfer_source(ctx))
    ctx.transfer = TransferResult(record, hp)


def transfer_source(ctx: SweepContext) -> tuple[Study, TrialRecord]:
    """(the study whose proxy→target step the transfer takes, the trial it transfers): with a ladder
    (mutransfer.sweep.ladder) the last rung's best from the last rung's size, else the best proxy."""
    return transfer_study(ctx), ctx.proxies.best if ctx.ladder is None else ctx.ladder.last.best


def transfer_study(ctx: SweepContext) -> Study:
    """The study whose proxy→target step a transfer takes: the study's, or with a ladder the last rung's size → the target."""
    if ctx.ladder is None:
        return ctx.study
    from mutransfer.study.ladder import step_study, target_size

    return step_study(ctx.study, ctx.ladder.last.size, target_size(ctx.study))
