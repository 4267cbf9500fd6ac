"""The transfer phase: the best proxy's hyperparameters rescaled to the target by the muP rules.

operators.transfer.transfer does the arithmetic (K, width or both); the models apply
every multiplier themselves (c(K) on spectral weights, m0/m on hidden weights under
width-muP), so the target's hyperparameters are the proxy's and the record states the
effective values each rule produces. Sets ``made.transfer`` (:class:`TransferResult`), computed once
here and carried: the target trains it, top-k reuses it for the candidate it was computed from.
"""

from __future__ import annotations

from dataclasses import replace

from mutransfer._study import Study
from mutransfer._study.search_space import SIZE_KEYS, trial_study
from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.context import TransferResult
from mutransfer._sweep.session import Made, Session
from operators.transfer import transfer as rescale


def transfer(study: Study, best: TrialRecord | dict) -> tuple[dict, dict]:
    """(the transfer record as a dict, the target's hyperparameters) for the best proxy."""

    hp = dict(best.hp if isinstance(best, TrialRecord) else best["hp"])
    study = trial_study(study, hp)  # a searched proxy size: the transfer is from the trial's own
    own = study.family.own_hyperparameters(hp)  # clip_value, init_scale only where they act
    carried = {k: v for k, v in own.items() if k != "lr" and v is not None and k not in SIZE_KEYS}
    unchanged = {k: v for k, v in carried.items() if not isinstance(v, str)}
    named = {k: v for k, v in carried.items() if isinstance(v, str)}  # a searched schedule, loss or precision
    record = rescale(study.transfer_scaling(), hp["lr"], init_scale=own.get("init_scale"), unchanged=unchanged)
    stds = {q.name: q for q in record.quantities}.get("spectral_init_std")
    out = record.as_dict()
    out.update(
        table=record.format_table(),
        lr_factor=record.lr_factor,
        init_variance_factor=record.init_variance_factor,
        proxy_spectral_init_std=stds.proxy if stds else None,
        target_spectral_init_std=stds.target if stds else None,
        note="; ".join([*record.notes, *([_named_note(named)] if named else [])]),
    )
    if named:  # the text report and the page list the notes
        out["notes"] = [*record.notes, _named_note(named)]
    return out, hp


def _named_note(named: dict[str, str]) -> str:
    """The note for the searched options that are names, not numbers (carried over unchanged, as the table's
    other unchanged rows)."""
    return "carried over unchanged: " + ", ".join(f"{k} {v}" for k, v in named.items())


def transfer_phase(session: Session, made: Made) -> Made:
    """``made`` with its transfer (``made.transfer``) from the best of the search the target draws from (the proxies, or with a ladder the
    last rung's best, from its size); the source trial and its name are carried with the record."""
    search = made.final(session.study)
    record, hp = transfer(search.study, search.best)
    return replace(
        made, made_transfer=TransferResult(record, hp, source=search.best, source_key=search.key(search.best))
    )
