"""What `mutransfer train --out DIR [--tracking-uri URI]` keeps: the trained model as a model folder (the format of a
study's ``model/``, :mod:`mutransfer.serving._artifact`) and, with a tracking URI, an MLflow run holding it.

The folder is written beside its destination under a hidden name, then renamed into place
(:func:`~mutransfer.serving._artifact.write_model_dir`): an interrupted write leaves no half model where ``evaluate``
would read it. ``evaluate DIR``, ``predict DIR`` and
``runs:/<run>/model`` load it as they load a study's target.
"""

from __future__ import annotations

from pathlib import Path

from mutransfer._tracking.runs import KIND_TAG, RUN_NAME_TAG, STATUS_TAG, STUDY_TAG, Tracker, create_run, log_batch
from mutransfer.serving._artifact import LOGGED_NAME, ModelCard, log_logged_model, write_model_dir

#: the MLflow experiment `train --tracking-uri` logs to (a study's runs go to the study's own experiment)
TRAIN_EXPERIMENT = "mutransfer-train"


def keep_model(out: Path, card: ModelCard, state_dict: dict) -> Path:
    """The model folder ``out`` (new, or an empty folder: checked before training, mutransfer.cli._outputs.check_out_dir)
    with MLmodel, config.json and state_dict.pt, written whole (:func:`write_model_dir`)."""
    return write_model_dir(Path(out), card, state_dict)


def log_trained(
    uri: str, directory: Path, card: ModelCard, *, status: str, params: dict, metrics: dict[str, float]
) -> str:
    """An MLflow run (experiment :data:`TRAIN_EXPERIMENT`) with ``params``, ``metrics`` and the model in
    ``directory`` as its logged model (``status``: the training's, a tag); returns ``runs:/<run id>/model``."""
    tracker = Tracker(uri)
    experiment = tracker.ensure_experiment(TRAIN_EXPERIMENT)
    name = f"train {card.problem} {card.operator}"
    run_id = create_run(
        tracker.client, experiment, {KIND_TAG: "train", STUDY_TAG: card.study, RUN_NAME_TAG: name, STATUS_TAG: status}
    )
    log_batch(tracker.client, run_id, params=params, metrics=[(k, v, 0, 0) for k, v in metrics.items()])
    log_logged_model(tracker.client, experiment, run_id, directory, study=card.study)
    tracker.set_status(run_id, "FINISHED")
    return f"runs:/{run_id}/{LOGGED_NAME}"
