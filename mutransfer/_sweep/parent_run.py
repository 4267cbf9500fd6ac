"""The study's MLflow parent run: created once per study with the study's parameters and files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from mutransfer._sweep.search import total_trials
from mutransfer._sweep.session import Prepared
from mutransfer._tracking.views import tag_study
from mutransfer._version import __version__

#: the parent run's tag naming the study folder it was made for (a rebuilt state finds its parent by it)
FOLDER_TAG = "mutransfer.study_dir"
#: the parent run's tag keeping the search window (state.json's ``search_window``) for a rebuilt state
WINDOW_TAG = "mutransfer.search_window"


def git_commit() -> str | None:
    """The commit of the installed source tree, or None outside a git checkout."""

    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def create_parent(session: Prepared, data_path: Path, experiment_id: str) -> str:
    """Create the parent run in ``experiment_id`` (params, tags, the study's files as artifacts); returns its id."""

    study = session.study
    commit = git_commit()
    params = {
        "study": study.name,
        "problem": study.problem.name,
        "dim": study.dim,
        **study.scaling(),
        "layers": study.operator.layers,
        "resolution": study.problem.resolution,
        "n_train": study.problem.n_train,
        "n_test": study.problem.n_test,
        "data": str(data_path),
        "search.algorithm": study.search.algorithm,
        "search.num_trials": total_trials(study),
        "search.space": {k: v.to_dict() for k, v in study.search_space.items()},
        "budget.epochs": study.budget.epochs,
        "target.epochs": study.target.epochs,
        "target.num_workers": study.target.num_workers,
        "device_kind": "gpu" if study.resources.gpus_per_trial > 0 else "cpu",
        "mutransfer_version": __version__,
        "git_commit": commit or "unknown",
        "overrides": [o.describe() for o in session.overrides] or "none",
    }
    tags = {FOLDER_TAG: str(session.study_dir.root)}
    if commit:
        tags["mlflow.source.git.commit"] = commit
    files = {"study/study.yaml": study.to_yaml(), "study/source.yaml": session.source_text}
    return session.tracker.create_parent(experiment_id, study, params=params, tags=tags, files=files)


def tag_study_view(session: Prepared, experiment_id: str) -> None:
    """Tag the experiment so the MLflow UI opens on this study's runs (see mutransfer._tracking.views)."""

    tag_study(session.tracker.client, experiment_id, session.study.name, list(session.study.search_space))
