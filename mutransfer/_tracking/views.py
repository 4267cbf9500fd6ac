"""What the MLflow UI shows of a study: the experiment's tags, the study's saved view and the link to it.

MLflow 3.17 opens an experiment in its GenAI mode (traces, judges, the assistant) unless
told otherwise, and its runs table shows no metric until columns are picked by hand.
Three things make the printed link open on the study's runs with its errors visible:

- the experiment tag ``mlflow.experimentKind = custom_model_development`` (MLflow's own
  value for "Machine learning" experiments, the one its experiment-kind selector writes);
- a **shared view** per study: the experiment tag ``mlflow.sharedViewState.<key>`` holds
  the runs table's state as JSON (a filter on the study's tag, the error metrics and the
  searched hyperparameters as columns, sorted by ``final_test_error``); the runs page
  loads it when the URL carries ``viewStateShareKey=<key>``;
- ``workflowType=machine_learning`` in the link: in the 3.17.2 web app this URL parameter
  (remembered in the browser afterwards) picks the classic runs view; the tag alone does not.

The tags are written when a study starts or resumes (:func:`tag_study`) and again by
``mutransfer ui`` for the newest study (so stores written before this change get them).

Studies of several experiments (a study file's ``tracking.experiment``) are compared on MLflow's
compare-experiments page, ``#/compare-experiments/s?experiments=["1","2"]`` (:func:`compare_link`). What
its 3.17.2 web app does there, read from its bundle and checked in a headless Chromium
(tests/tracking/test_ui.py):

- with two or more ids it renders the classic runs table of all of them ("Displaying Runs from 2
  Experiments"), with no GenAI redirect, so no ``workflowType`` is needed;
- it honours ``viewStateShareKey=<key>``, but reads the ``mlflow.sharedViewState.<key>`` tag of one
  experiment only: the first of the listed ones that the page has loaded (it sorts the ids as strings).
  The view is therefore written onto *every* experiment in the link, so whichever is read holds it (in a check
  with the view on experiment 2 only, the link listing 1 and 2 left for experiment 1's GenAI overview). Its banner "You're viewing a
  shared view" shows or not depending on which experiment loaded first; the view itself stays applied;
- any facet in the URL (``searchFilter``, ``orderByKey``, ``orderByAsc``, ...) makes it skip the share
  key; ``searchFilter`` alone filters the rows but leaves the default columns (Run Name, Created,
  Dataset, Duration, Source, Models), no parameter or metric. So the link carries the key only;
- its table has an ``Experiment Name`` column (``attributes.`Experiment Name```, hidden unless selected),
  which the studies' view selects; the single-experiment runs table has no such column and ignores it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from urllib.parse import urlencode

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
WORKFLOW = {"workflowType": "machine_learning"}

#: Metrics shown in every study's view: proxy trials log val_error per epoch and final_val_error at the end
#: (they never see the test split), the target test_error and val_error, final_test_error and final_val_error;
#: the parent run logs the study's summary errors.
ERROR_METRICS = (
    "final_val_error",
    "final_test_error",
    "val_error",
    "test_error",
    "best_proxy_val_error",
    "target_test_error",
)


def view_key(study_name: str) -> str:
    """The share key of a study's view: its name where URL- and tag-safe, else a slug plus a short hash."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", study_name).strip("-") or "study"
    if slug == study_name:
        return slug
    return f"{slug}-{hashlib.sha1(study_name.encode()).hexdigest()[:8]}"


def _column(kind: str, key: str) -> str:
    """A runs-table column id as the MLflow web app writes it: ``metrics.`final_test_error```."""
    return f"{kind}.`{key}`"


def study_view_state(study_name: str, searched: Iterable[str]) -> dict:
    """The runs table of one study: its trials and target (the study's parent run apart: the summary is on the
    parent run's own page), the searched hyperparameters first (visible without scrolling), then the errors, best
    first."""
    name = study_name.replace("'", "\\'")
    return {
        "searchFilter": f"tags.`mutransfer.study` = '{name}' AND tags.`mutransfer.kind` != 'study'",
        "orderByKey": _column("metrics", "final_val_error"),
        "orderByAsc": True,
        "selectedColumns": [_column("params", f"hp.{k}") for k in searched]
        + [_column("metrics", m) for m in ERROR_METRICS],
    }


#: the share key of the view of every study in an experiment, side by side
STUDIES_KEY = "mutransfer-studies"
#: its columns: what each study is (params of the parent run), then what it found and what it cost (metrics)
STUDY_PARAMS = ("study", "problem", "operator", "proxy_K", "target_K", "proxy_width", "target_width")
#: the compare-experiments page's column naming each run's experiment (absent from one experiment's runs table)
EXPERIMENT_NAME_COLUMN = _column("attributes", "Experiment Name")
STUDY_METRICS = (
    "best_proxy_val_error",
    "target_test_error",
    "proxy_to_target_gain",
    "mutransfer_vs_direct_training_seconds",
    "mutransfer_vs_direct_wall_seconds",
    "mutransfer_vs_direct_flops",
    "verify_transfer_error_decades",
    "sweep_wall_seconds",
)
#: the tag holding a study's verdict in words (the report's ``verdict``, joined), the view's last column
VERDICT_TAG = "mutransfer.verdict"


def studies_view_state() -> dict:
    """The runs table of every study of an experiment, or of several on MLflow's compare-experiments page: one row per
    study (its parent run), its experiment where several are compared, what it tuned (problem,
    operator, proxy -> target sizes) and what it found and cost (errors, time and FLOP ratios to direct tuning),
    best target first; MLflow's own table sorts and filters it further."""
    return {
        "searchFilter": "tags.`mutransfer.kind` = 'study'",
        "orderByKey": _column("metrics", "target_test_error"),
        "orderByAsc": True,
        "selectedColumns": [EXPERIMENT_NAME_COLUMN]
        + [_column("params", k) for k in STUDY_PARAMS]
        + [_column("metrics", m) for m in STUDY_METRICS]
        + [_column("tags", VERDICT_TAG)],
    }


def tag_studies(client, experiment_id: str) -> str:
    """Write the studies' side-by-side view onto the experiment; returns its key."""
    tag_kind(client, experiment_id)
    state = json.dumps(studies_view_state(), separators=(",", ":"))
    set_experiment_tag(client, experiment_id, SHARED_VIEW_PREFIX + STUDIES_KEY, state)
    return STUDIES_KEY


# What a store answers when two writers insert the same tag row at once (PostgreSQL, SQLite, MySQL).
_DUPLICATE_ROW = re.compile(r"duplicate key value|UNIQUE constraint failed|Duplicate entry", re.IGNORECASE)


def set_experiment_tag(client, experiment_id: str, key: str, value: str) -> None:
    """Set one experiment tag, as another study's driver may set it at the same moment.

    MLflow writes a tag by reading the row, then inserting it if absent; two drivers starting together on one
    store (the team's PostgreSQL) both read "absent" and the second insert is refused for a duplicate key. The
    row then exists, so writing once more updates it. Any other error is raised as is.
    """
    from mlflow.exceptions import MlflowException  # noqa: PLC0415 -- deferred: this module's views need no MLflow

    try:
        client.set_experiment_tag(experiment_id, key, value)
    except MlflowException as exc:
        if not _DUPLICATE_ROW.search(str(exc)):
            raise
        client.set_experiment_tag(experiment_id, key, value)


def tag_kind(client, experiment_id: str) -> None:
    """Mark the experiment as a machine-learning one (not GenAI) for MLflow's UI and assistant."""
    set_experiment_tag(client, experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)


def tag_study(client, experiment_id: str, study_name: str, searched: Iterable[str]) -> str:
    """Write the experiment-kind tag and the study's view onto the experiment; returns the view's key."""
    key = view_key(study_name)
    state = json.dumps(study_view_state(study_name, searched), separators=(",", ":"))
    tag_kind(client, experiment_id)
    set_experiment_tag(client, experiment_id, SHARED_VIEW_PREFIX + key, state)
    return key


def searched_keys(params: dict) -> list[str]:
    """The searched hyperparameters of a study from its parent run's ``search.space`` parameter (JSON)."""
    try:
        space = json.loads(params.get("search.space", "{}"))
    except ValueError:
        return []
    return list(space) if isinstance(space, dict) else []


def _base_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


def ui_link(host: str, port: int, experiment_id: str | None = None, key: str | None = None) -> str:
    """The link ``mutransfer ui`` prints: the study's runs view, or the experiments list without a study."""
    base = _base_url(host, port)
    if experiment_id is None:
        return base
    query = dict(WORKFLOW, **({"viewStateShareKey": key} if key else {}))
    return f"{base}#/experiments/{experiment_id}/runs?{urlencode(query)}"


def compare_link(host: str, port: int, experiment_ids: Iterable[str], key: str = STUDIES_KEY) -> str:
    """MLflow's compare-experiments page of ``experiment_ids`` opened on the shared view ``key``, which every one of
    them must carry (module docstring). The ids are listed as MLflow's own link lists them: sorted as strings,
    JSON without spaces."""
    ids = json.dumps(sorted(str(i) for i in experiment_ids), separators=(",", ":"))
    query = urlencode({"experiments": ids, "viewStateShareKey": key})
    return f"{_base_url(host, port)}#/compare-experiments/s?{query}"
