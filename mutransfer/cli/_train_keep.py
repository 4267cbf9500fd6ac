"""`mutransfer train --out DIR [--tracking-uri URI]`: the flags, their checks before any work, and the kept model
(mutransfer.serving._kept writes it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mutransfer._tracking._server_check import check_server_reachable
from mutransfer._tracking.runs import resolve_tracking_uri
from mutransfer._training import TrainConfig
from mutransfer._training.checkpoint import weights_of
from mutransfer.cli._outputs import check_out_dir, check_outside_kept_folders
from mutransfer.errors import UserInputError
from mutransfer.serving._artifact import model_card
from mutransfer.serving._kept import TRAIN_EXPERIMENT, keep_model, log_trained


def add_keep_arguments(p: argparse.ArgumentParser) -> None:
    """--out and --tracking-uri."""
    p.add_argument(
        "--out",
        metavar="DIR",
        help="keep the trained model in this new (or empty) folder, in the format of a study's model/ (MLmodel, "
        "config.json, state_dict.pt; no pickle): `mutransfer evaluate DIR` and `predict DIR` read it",
    )
    p.add_argument(
        "--tracking-uri",
        metavar="URI",
        help=f"also log the training as an MLflow run (experiment {TRAIN_EXPERIMENT}) with the model as its logged "
        "model, runs:/<run>/model (needs --out; e.g. sqlite:///mlflow.db; default: no MLflow run)",
    )


def check_outputs(args: argparse.Namespace) -> Path | None:
    """--out, --checkpoint-dir and --tracking-uri checked before any data is read or anything trained; the folder to keep the model in."""
    if args.tracking_uri is not None and args.out is None:
        raise UserInputError("--tracking-uri logs the model kept by --out; add --out DIR (a new folder)")
    if getattr(args, "checkpoint_dir", None):  # a study's trial folder would have its checkpoint replaced
        check_outside_kept_folders(args.checkpoint_dir, flag="--checkpoint-dir")
    if args.out is None:
        return None
    if args.tracking_uri is not None:
        args.tracking_uri = resolve_tracking_uri(args.tracking_uri)
        check_server_reachable(args.tracking_uri, "start the tracking server, or pass another --tracking-uri")
    return check_out_dir(args.out)


def keep(
    args: argparse.Namespace, out: Path, model, problem, data, time_resolution, config: TrainConfig, result
) -> dict:
    """Write the model folder (and log its MLflow run): the summary's ``model_dir`` (and ``run_uri``)."""
    hyperparameters = {
        "lr": config.lr,
        "batch_size": config.batch_size,
        "betas": list(config.betas),
        "weight_decay": config.weight_decay,
        "clip_value": config.clip_value,
        "init_scale": 1.0 if args.init_scale is None else args.init_scale,
        "schedule": config.schedule,
        "epochs": config.epochs,
        "iterations": config.iterations,
        "seed": config.seed,
    }
    card = model_card(
        type(model).__name__,
        model.config,
        data,
        problem=problem.name,
        dim=problem.dim,
        point_problem=problem.kind == "points",
        operator=args.operator,
        time_resolution=time_resolution,
        name="train",
        hyperparameters=hyperparameters,
        test_error=result.test_error,
    )
    keep_model(out, card, weights_of(model))
    kept: dict = {"model_dir": str(out)}
    if args.tracking_uri is not None:
        kept["run_uri"] = log_trained(
            args.tracking_uri,
            out,
            card,
            status=result.status,
            params={"problem": problem.name, "operator": args.operator, **model.config, **hyperparameters},
            metrics={"final_test_error": result.test_error, "best_test_error": result.best_test_error},
        )
    return kept
