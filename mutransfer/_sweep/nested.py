"""A search nested in a study: its own folder, ``state.json`` and MLflow run under the study's parent run.

The direct-tuning baseline (``<study dir>/direct``) and each rung of a model-size ladder
(``<study dir>/rungs/r<n>``) are searches of their own: :func:`nested_context` gives one
a :class:`SweepContext` over its folder (so ``--resume`` continues it from its own JSON
files) whose trials are logged under an MLflow run of ``kind``, a child of the study's
parent run, created once and reused on resume.
"""

from __future__ import annotations

from pathlib import Path

from mutransfer._study_folder.state import StudyDir
from mutransfer._sweep.context import StudyRun, SweepContext
from mutransfer._tracking.runs import KIND_TAG, PARENT_TAG, RUN_NAME_TAG, STUDY_TAG, create_run, log_batch


def nested_context(
    ctx: SweepContext, folder: Path, *, kind: str, run_name: str, study=None, params: dict | None = None, **fields
) -> SweepContext:
    """A sweep context over ``folder`` for ``study`` (default: the study's), training the target-sized model.

    ``fields`` are further SweepContext fields (preset, label, trial_tags). ``params`` are logged on the
    nested run when it is created.
    """

    study = study or ctx.study
    sdir = StudyDir(folder)
    sdir.root.mkdir(parents=True, exist_ok=True)
    state = sdir.read_state() or {"phase": "proxies", "study": ctx.study.name}
    sub = SweepContext(
        ctx.options, study, sdir, [], ctx.tracking_uri, ctx.source_text, state, 0, search_at_target=True, **fields
    )
    sub.loaded = ctx.study_data
    sub.booked = ctx.executor  # one ledger per study, under the tag of the phase that nests the search
    sub.tracker = ctx.tracker
    parent = state.get("parent_run_id")
    if not (parent and ctx.tracker.run_exists(parent)):
        parent = create_run(
            ctx.tracker.client,
            ctx.experiment_id,
            {
                PARENT_TAG: ctx.parent_id,
                KIND_TAG: kind,
                STUDY_TAG: ctx.study.name,
                RUN_NAME_TAG: run_name,
                **fields.get("trial_tags", {}),
            },
        )
        if params:
            log_batch(ctx.tracker.client, parent, params=params)
    sub.run = StudyRun(ctx.experiment_id, parent)
    sub.update_state(**{**state, "parent_run_id": parent})
    return sub
