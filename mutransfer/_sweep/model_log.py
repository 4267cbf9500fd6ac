"""The model phase: the trained target as a model directory in the study, an MLflow logged model, optionally registered.

After the target phase, the final checkpoint's ``model.pt`` (the plain state dict and
the model's config) becomes ``<study dir>/model/`` (mutransfer.serving._artifact: an
MLflow model of the ``mutransfer`` flavor, no pickle) and an MLflow *logged model*
named ``model`` whose source run is the target run, so ``runs:/<target run>/model``
and ``models:/<model id>`` resolve. ``sweep --register NAME`` adds it to the model
registry as a new version of NAME (``models:/NAME/<version>``); a sqlite (or other
database) store is needed for the registry. ``state.json`` keeps the record
(``model``), so a resumed sweep does not log it twice.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mutransfer._study_folder.records import MODEL_DIR
from mutransfer._sweep._memo import Memo, remembered
from mutransfer._sweep.session import Made, Prepared, Session
from mutransfer.errors import UserInputError
from mutransfer.serving._artifact import LOGGED_NAME, card_for, log_logged_model, write_model_dir

#: state.json's key of the target as a logged MLflow model (its folder, model id and URIs; its registration)
MODEL_KEY = "model"


def check_registry_store(uri: str, register: str | None) -> None:
    """``--register`` needs a database-backed MLflow store (sqlite://, postgresql://, …) or a server."""
    if register is None:
        return
    scheme = uri.split(":", 1)[0] if "://" in uri else ""
    if scheme in ("", "file"):
        raise UserInputError(
            f"--register {register}: the model registry needs a database-backed tracking store, "
            f"not {uri}; pass --tracking-uri sqlite:///mlflow.db (or a server's http:// URI)"
        )


def log_model_phase(session: Session, made: Made) -> Made:
    """Write ``<study dir>/model``, log it as an MLflow model of the target run, register it if asked."""

    def log() -> dict:
        directory = write_study_model(session, made)
        model_id = log_logged_model(
            session.tracker.client, session.experiment_id, made.target_run_id, directory, study=session.study.name
        )
        record = {
            "dir": MODEL_DIR,
            "model_id": model_id,
            "model_uri": f"models:/{model_id}",
            "run_uri": f"runs:/{made.target_run_id}/{LOGGED_NAME}",
        }
        session.say(f"model: {directory} (MLflow {record['model_uri']}, {record['run_uri']})")
        return record

    # logged once per target run (a resumed study finds it logged)
    record = remembered(session, Memo(MODEL_KEY, dict, dict), {"target_run_id": made.target_run_id}, log)
    register_if_asked(session, record, made.target_run_id)
    return made


def register_completed(session: Prepared) -> None:
    """``sweep --resume --register NAME`` of a completed study: register its logged model now."""
    if session.options.register is None:
        return
    if not session.state.get("model"):
        raise UserInputError(
            f"--register {session.options.register}: study {session.study.name!r} logged no model "
            "(it ran before models were logged); run the study again with --name NEW"
        )

    register_if_asked(session, session.state["model"], session.state.get("target_run_id"))


def register_if_asked(session: Prepared, record: dict, run_id: str | None) -> None:
    """Register the study's logged model under ``--register NAME`` (once per name); ``run_id``: the target's run
    (None for a study whose state kept none)."""
    name = session.options.register
    if name is None or record.get("registered", {}).get("name") == name:
        return
    record = dict(record, registered=register_model(session.tracker.client, name, record["model_id"], run_id))
    session.update_state(model=record)
    session.say(f"model registered: {record['registered']['uri']}")


def write_study_model(session: Session, made: Made) -> Path:
    """``<study dir>/model`` from the target's final checkpoint (model.pt, read with ``weights_only=True``)."""

    checkpoint = Path(made.target.checkpoint_dir or "") / "model.pt"
    if not checkpoint.is_file():
        raise FileNotFoundError(f"the target's final checkpoint {checkpoint} is missing; the model cannot be logged")
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    card = card_for(
        session.study,
        saved["model_class"],
        saved["model_config"],
        session.data,
        hyperparameters=saved.get("hyperparameters") or {},
        test_error=made.target.test_error,
    )
    return write_model_dir(session.study_dir.root / MODEL_DIR, card, saved["model"])


def register_model(client, name: str, model_id: str, run_id: str | None) -> dict:
    """A new version of registered model ``name`` (created if new) from logged model ``model_id``."""
    import mlflow  # noqa: PLC0415 -- deferred: MLflow (~1 s) loads only when a sweep uses it, not with `import mutransfer._sweep`
    from mlflow.exceptions import MlflowException  # noqa: PLC0415 -- deferred: MLflow (~1 s) loads only when a sweep uses it, not with `import mutransfer._sweep`

    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    # the sqlite registry looks the logged model up through MLflow's global tracking URI (mlflow 3.17):
    # point it at this store while the version is created
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(client.tracking_uri)
    try:
        version = client.create_model_version(name, source=f"models:/{model_id}", run_id=run_id, model_id=model_id)
    finally:
        mlflow.set_tracking_uri(previous)
    return {"name": name, "version": str(version.version), "uri": f"models:/{name}/{version.version}"}
