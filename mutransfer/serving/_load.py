"""Find a trained target and load it: ``load_model(study_or_uri)`` → :class:`LoadedModel`.

Accepted sources:

- a study: its directory (``mutransfer-runs/<name>``) or its name (looked up in ``--runs-dir``,
  default ``./mutransfer-runs``): the model directory ``<study dir>/model`` written by the sweep;
- a model directory itself (holding ``MLmodel``): a study's ``model/``, or what ``mutransfer train --out DIR`` kept;
- ``runs:/<target run id>/model``: the logged model of a sweep's target run;
- ``models:/<model id>`` (``m-…``): a logged model;
- ``models:/<name>/<version>`` or ``models:/<name>@<alias>``: a registered model version.

MLflow URIs are resolved in the tracking store ``--tracking-uri`` (default
``sqlite:///mlflow.db`` here). A store that was moved or copied still works: an
artifact missing at the absolute path MLflow recorded is looked up beside the store
(mutransfer._study_folder.portable), with a note on stderr.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from mutransfer._study_folder.portable import relocated_artifact_path
from mutransfer._study_folder.records import MODEL_DIR
from mutransfer._study_folder.state import StudyDir
from mutransfer._tracking._server_check import check_server_reachable
from mutransfer._tracking._sqlite_file import sqlite_path
from mutransfer._tracking.runs import _client, resolve_tracking_uri
from mutransfer.errors import UserInputError
from mutransfer.serving._artifact import MLMODEL_FILE, ModelCard, read_model_dir

#: the prefix of the temporary folder a model from a tracking server is downloaded into
DOWNLOADED = "mutransfer-model-"


@dataclass
class LoadedModel:
    """A rebuilt target: the module (eval mode, CPU), its card, and where it came from."""

    model: object
    card: ModelCard
    source: str
    #: where it was read from (a model from a tracking server: its scratch download, removed once read)
    directory: Path


def load_model(source: str, *, runs_dir: str | None = None, tracking_uri: str | None = None) -> LoadedModel:
    """The model named by ``source`` (a study or an MLflow URI, see the module docstring)."""
    if not source.startswith(("runs:/", "models:/")):
        directory = _study_model_dir(source, runs_dir)
        model, card = read_model_dir(directory)
        return LoadedModel(model, card, source, directory)
    # a model on a server is downloaded into a scratch folder, read whole, and the folder removed
    with tempfile.TemporaryDirectory(prefix=DOWNLOADED) as scratch:
        directory = _mlflow_model_dir(source, tracking_uri, Path(scratch))
        model, card = read_model_dir(directory)
        return LoadedModel(model, card, source, directory)


def _study_model_dir(source: str, runs_dir: str | None) -> Path:
    given = Path(source)
    if (given / MLMODEL_FILE).is_file():  # a model directory: `train --out DIR`, or a study's model/
        return given
    study_dir = StudyDir(given) if (given / "study.yaml").is_file() else StudyDir.for_study(source, runs_dir)
    if not study_dir.study_file.is_file():
        where = runs_dir or "./mutransfer-runs"
        raise UserInputError(
            f"study {source!r} not found (no {given / 'study.yaml'} and no study of that name in "
            f"{where}); pass a study directory, a study name with --runs-dir, a model folder (`train --out`), or a "
            "runs:/ or models:/ URI"
        )
    state = study_dir.read_state()
    record = state.get("model") or {}
    name = record.get("dir", MODEL_DIR)
    if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
        raise UserInputError(
            f"{study_dir.state_file}: field 'model' names its folder by a path, not by a name inside the study folder; "
            "restore the file from a copy"
        )
    directory = study_dir.root / name
    if not record or not directory.is_dir():
        raise UserInputError(
            f"study {study_dir.root.name!r} has no trained model yet (phase {state.get('phase', 'none')}); "
            "finish it with `mutransfer sweep --resume`, or pass another study"
        )
    return directory


def _mlflow_model_dir(uri: str, tracking_uri: str | None, scratch: Path) -> Path:
    from mlflow.exceptions import MlflowException  # noqa: PLC0415 -- deferred: mlflow (~1 s), only for a model from a tracking store

    store = resolve_tracking_uri(tracking_uri)
    if sqlite_path(store) is not None and not sqlite_path(store).is_file():
        raise UserInputError(
            f"{uri}: tracking store {sqlite_path(store)} not found; pass --tracking-uri of the "
            "store the sweep logged to"
        )
    check_server_reachable(store, "start the tracking server, or pass --tracking-uri of the store the sweep logged to")
    client = _client(store)
    try:
        logged = _logged_model(client, uri)
    except MlflowException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(
            f"{uri}: not found in {store} ({first[:200]}); check the URI or pass --tracking-uri"
        ) from None
    return _local_artifacts(client, store, logged, uri, scratch)


def _logged_model(client, uri: str):
    """The MLflow LoggedModel a runs:/ or models:/ URI names."""
    rest = uri.split(":/", 1)[1].strip("/")
    if uri.startswith("runs:/"):
        run_id, _, name = rest.partition("/")
        run = client.get_run(run_id)
        found = client.search_logged_models(
            [run.info.experiment_id], filter_string=f"source_run_id = '{run_id}' AND name = '{name or 'model'}'"
        )
        if not found:
            raise UserInputError(
                f"{uri}: run {run_id} has no logged model {name or 'model'!r}; "
                "pass the target run of a sweep (state.json: target_run_id)"
            )
        return found[0]
    if rest.startswith("m-") and "/" not in rest and "@" not in rest:
        return client.get_logged_model(rest)
    if "@" in rest:
        name, alias = rest.split("@", 1)
        version = client.get_model_version_by_alias(name, alias)
    else:
        name, _, number = rest.partition("/")
        if not number:
            raise UserInputError(f"{uri}: name a version, models:/{name}/<version> (or models:/{name}@<alias>)")
        version = client.get_model_version(name, number)
    # the sqlite registry keeps the logged model in the version's source (models:/m-…), not in model_id
    source = version.source or ""
    model_id = version.model_id or (source[len("models:/") :] if source.startswith("models:/m-") else None)
    if not model_id:
        raise UserInputError(
            f"{uri}: this version (source {source}) was not registered by `mutransfer sweep --register`"
        )
    return client.get_logged_model(model_id)


def _local_artifacts(client, store: str, logged, uri: str, scratch: Path) -> Path:
    """A local directory holding the logged model's files (moved stores and remote artifacts handled)."""

    location = logged.artifact_location
    local = Path(location[len("file://") :] if location.startswith("file://") else location)
    if urlsplit(location).scheme in ("", "file"):  # a path on this machine (not mlflow-artifacts:/, s3://, …)
        if local.is_dir():
            return local
        moved = relocated_artifact_path(store, client.get_experiment(logged.experiment_id), location)
        if moved is None:
            raise UserInputError(
                f"{uri}: its files are not at {local} (the store moved without its mlruns/ folder?); "
                "copy mlruns/ beside the store or evaluate the study directory instead"
            )
        print(f"note: {uri}: the store moved; reading its files from {moved}", file=sys.stderr)
        return moved
    import mlflow.artifacts  # noqa: PLC0415 -- deferred: mlflow (~1 s), only for a model from a tracking store

    return Path(mlflow.artifacts.download_artifacts(artifact_uri=location, dst_path=str(scratch), tracking_uri=store))
