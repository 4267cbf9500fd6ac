"""`mutransfer train --out DIR [--tracking-uri URI]`: the trained model kept in a study target's format, read by
`evaluate`/`predict` and MLflow URIs; its outputs checked before anything is trained; cosine as the default recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mutransfer.cli.main import main
from tests.sweep_helpers import mlflow_runs


@pytest.fixture(scope="module")
def darcy(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "darcy.h5"
    assert (
        main(["data", "generate", "darcy", "--n", "24", "--resolution", "13", "--out", str(path), "--no-progress"]) == 0
    )
    return path


def _train(darcy: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--problem",
        "darcy",
        "--data",
        str(darcy),
        "--modes",
        "3",
        "--width",
        "8",
        "--layers",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--n-train",
        "16",
        "--n-test",
        "8",
        "--padding",
        "2",
        "--no-progress",
        "--json",
        *extra,
    ]


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_the_kept_model_is_the_trained_one_and_evaluate_and_mlflow_read_it(darcy, tmp_path, capsys):
    out, ckpt, uri = tmp_path / "m", tmp_path / "ckpt", f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = _train(darcy, "--out", str(out), "--checkpoint-dir", str(ckpt), "--tracking-uri", uri)
    assert main(args) == 0
    summary = _json(capsys)
    assert summary["model_dir"] == str(out) and sorted(p.name for p in out.iterdir()) == [
        "MLmodel",
        "config.json",
        "state_dict.pt",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".m.")]  # no staging folder left
    # the final weights, exactly: the last checkpoint's model
    kept = torch.load(out / "state_dict.pt", weights_only=True)
    final = torch.load(ckpt / "checkpoint.pt", weights_only=True)["model"]
    assert kept.keys() == final.keys() and all(torch.equal(kept[k], final[k]) for k in kept)
    card = json.loads((out / "config.json").read_text())
    assert card["problem"] == "darcy" and card["resolution"] == 13 and card["study"] == "train"
    assert card["hyperparameters"]["schedule"] == "cosine" and card["test_error"] == summary["result"]["test_error"]

    # evaluate and predict read the folder as they read a study's target; the MLflow run holds the same model
    assert main(["evaluate", str(out), "--data", str(darcy), "--json"]) == 0
    by_folder = _json(capsys)
    assert summary["run_uri"].startswith("runs:/") and summary["run_uri"].endswith("/model")
    assert main(["evaluate", summary["run_uri"], "--data", str(darcy), "--tracking-uri", uri, "--json"]) == 0
    by_run = _json(capsys)
    assert by_run["results"] == by_folder["results"]
    (run,) = [r for r in mlflow_runs(uri) if r.data.tags.get("mutransfer.kind") == "train"]
    assert run.info.status == "FINISHED" and run.data.metrics["final_test_error"] == summary["result"]["test_error"]
    assert run.data.params["lr"] == "0.003" and run.data.params["schedule"] == "cosine"
    predicted = tmp_path / "pred.h5"
    assert main(["predict", str(out), "--data", str(darcy), "--out", str(predicted), "--json"]) == 0
    assert _json(capsys)["samples"] == 24 and predicted.is_file()


def test_train_defaults_to_cosine_and_takes_step_where_its_milestones_are_given(darcy, capsys):
    assert main(_train(darcy)) == 0
    assert _json(capsys)["train"]["schedule"] == "cosine"
    assert main(_train(darcy, "--milestones", "1")) == 0
    assert _json(capsys)["train"]["schedule"] == "step"
    assert main(_train(darcy, "--schedule", "constant")) == 0
    assert _json(capsys)["train"]["schedule"] == "constant"


def _refused(capsys, args, *fragments) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(f in err[0] for f in fragments), err


@pytest.mark.parametrize(
    "where, fragments",
    [
        ("full", ["the folder exists and is not empty"]),
        ("file", ["is a file; name a new folder"]),
        ("study", ["inside the study folder"]),
        ("data", ["the folder exists and is not empty"]),  # the input's own folder
        ("no-out", ["--tracking-uri logs the model kept by --out"]),
        ("bad-store", ["tracking store", "is a directory"]),
    ],
)
def test_outputs_that_would_overwrite_or_cannot_be_written_are_refused_before_training(
    darcy, tmp_path, capsys, monkeypatch, where, fragments
):
    """One line, exit 2, nothing trained (the train loop is never called) and nothing a user made touched."""
    import mutransfer._training

    monkeypatch.setattr(mutransfer._training, "train", lambda *a, **k: pytest.fail("trained"))
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    study = tmp_path / "runs" / "s"
    study.mkdir(parents=True)
    (study / "state.json").write_text("{}")
    data_home = tmp_path / "data"
    data_home.mkdir()
    (data_home / "d.h5").write_bytes(darcy.read_bytes())
    data = data_home / "d.h5" if where == "data" else darcy
    out = {
        "full": ["--out", str(full)],
        "file": ["--out", str(full / "notes.txt")],
        "study": ["--out", str(study / "model2")],
        "data": ["--out", str(data_home)],
        "no-out": ["--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
        "bad-store": ["--out", str(tmp_path / "new"), "--tracking-uri", f"sqlite:///{tmp_path}"],
    }[where]
    args = _train(data, *out)
    _refused(capsys, args, *fragments)
    assert (full / "notes.txt").read_text() == "mine" and sorted(p.name for p in full.iterdir()) == ["notes.txt"]
    assert not (tmp_path / "new").exists() and not (study / "model2").exists()


def test_an_empty_folder_is_filled(darcy, tmp_path, capsys):
    out = tmp_path / "empty"
    out.mkdir()
    assert main(_train(darcy, "--out", str(out))) == 0
    assert (out / "MLmodel").is_file() and _json(capsys)["model_dir"] == str(out)
