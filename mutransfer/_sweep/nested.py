"""A search nested in a study, as a value: :class:`Search`, trained by :func:`run_search` and nothing else.

The direct-tuning baseline (``<study dir>/direct``) and each rung of a model-size ladder (``<study dir>/rungs/r<n>``)
are searches of their own: a :class:`Search` says what one trains (the study at its size, the configurations it
runs instead of sampling) and where it keeps it (its folder, with its own ``state.json`` and trial files, so
``--resume`` continues it; its MLflow run of ``kind``, a child of the study's parent run, created once and reused on
resume). :func:`run_search` trains it through the study's executor, as the proxies train, and returns a
:class:`SearchResult`. The study's own search is not cloned for it: the search is a value, run by the proxy
phase's function (mutransfer._sweep.proxies.run_scope) with the study's data, tracker and executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mutransfer._study_folder.records import TrialRecord
from mutransfer._study_folder.state import StudyDir
from mutransfer._sweep.context import StudyRun
from mutransfer._sweep.proxies import SearchScope, run_scope
from mutransfer._sweep.session import Session
from mutransfer._tracking.runs import KIND_TAG, PARENT_TAG, RUN_NAME_TAG, STUDY_TAG, create_run, log_batch

if TYPE_CHECKING:
    from mutransfer._study import Study


@dataclass(frozen=True)
class Search:
    """One nested search: ``folder`` (its trials, ``state.json``), ``study`` (the study at the search's size: it
    trains the target-sized model, or a rung's), the MLflow run it logs its trials under (``kind``, ``run_name``,
    ``params`` logged once when the run is made, ``trial_tags`` on each trial's run), ``preset`` (the configurations
    it runs instead of sampling, without ASHA: a rung's promoted trials) and ``label`` (how the console names it)."""

    folder: Path
    study: Study
    kind: str
    run_name: str
    label: str | None = None
    preset: tuple[Mapping[str, object], ...] | None = None
    trial_tags: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchResult:
    """What a nested search found: its trials, the best one, its proxy-phase seconds, its MLflow run and folder."""

    trials: list[TrialRecord]
    best: TrialRecord
    seconds: float
    run_id: str
    folder: Path


def run_search(session: Session, search: Search) -> SearchResult:
    """Train ``search`` (or continue it from its folder) through the study's executor, booked in the study's ledger
    under the tag of the phase that runs it."""
    scope = _scope(session, search)
    found = run_scope(session, scope)
    return SearchResult(found.trials, found.best, found.seconds, scope.run.parent_id, search.folder)


def _scope(session: Session, search: Search) -> SearchScope:
    """``search`` as the proxy phase's machinery trains it: its folder (made, with a first ``state.json``), its study,
    and its own MLflow run under the study's parent run (made once; a resume finds it in the folder's state)."""
    sdir = StudyDir(search.folder)
    sdir.root.mkdir(parents=True, exist_ok=True)
    state = sdir.read_state() or {"phase": "proxies", "study": session.study.name}
    parent = state.get("parent_run_id")
    if not (parent and session.tracker.run_exists(parent)):
        tags = {PARENT_TAG: session.parent_id, KIND_TAG: search.kind, STUDY_TAG: session.study.name}
        parent = create_run(
            session.tracker.client, session.experiment_id, {**tags, RUN_NAME_TAG: search.run_name, **search.trial_tags}
        )
        if search.params:
            log_batch(session.tracker.client, parent, params=dict(search.params))
    sdir.update_state(**{**state, "parent_run_id": parent})
    return SearchScope(
        search.study,
        sdir,
        StudyRun(session.experiment_id, parent),
        nested=True,
        preset=search.preset,
        label=search.label or "direct search",
        trial_tags=search.trial_tags,
    )
