"""A trained model served from a study directory and from MLflow (real sqlite store, real registry), no sweep needed.

The model is a real FNO written as the sweep writes it (mutransfer._sweep.model_log); the
store is moved to another folder to check that `evaluate` still finds its artifacts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.repo_paths import ROOT
from tests.sweep_helpers import write_tiny_data, write_tiny_study


def _main(*argv) -> int:
    from mutransfer.cli.main import main

    return main(list(argv))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Folder A: data.h5, mlflow.db + mlruns/, runs/tiny/ with model/ and state.json; a logged and registered model."""
    from mutransfer._study import load_study
    from mutransfer._study.models import model_for
    from mutransfer._study_folder.portable import stored_tracking, write_study_file
    from mutransfer._study_folder.state import StudyDir
    from mutransfer._sweep.model_log import register_model
    from mutransfer._tracking.runs import Tracker
    from mutransfer.data._loading import load_split
    from mutransfer.serving._artifact import card_for, log_logged_model, write_model_dir

    home = tmp_path_factory.mktemp("A")
    data = write_tiny_data(home / "data.h5")
    study, _ = load_study(str(write_tiny_study(home, data)), {})
    split = load_split(data, n_train=32, n_test=16, resolution=64, problem="burgers")
    torch.manual_seed(0)
    model = model_for(study, split, target=True)
    sdir = StudyDir(home / "runs" / "tiny")
    sdir.root.mkdir(parents=True)
    write_study_file(sdir, study)
    card = card_for(study, type(model).__name__, model.config, split, hyperparameters={"lr": 1e-3}, test_error=0.5)
    directory = write_model_dir(sdir.root / "model", card, model.state_dict())
    uri = f"sqlite:///{home / 'mlflow.db'}"
    tracker = Tracker(uri)
    experiment = tracker.ensure_experiment("mutransfer")
    run_id = tracker.create_target_run(experiment, tracker.client.create_run(experiment).info.run_id, "tiny", {})
    model_id = log_logged_model(tracker.client, experiment, run_id, directory, study="tiny")
    registered = register_model(tracker.client, "tiny-fno", model_id, run_id)
    sdir.write_state(
        {
            "phase": "done",
            "report": {},
            **stored_tracking(uri, sdir.root),
            "target_run_id": run_id,
            "model": {"dir": "model", "model_id": model_id},
        }
    )
    with torch.no_grad():
        x = torch.cat([split.train_x, split.test_x])
    return {
        "home": home,
        "uri": uri,
        "run_id": run_id,
        "model_id": model_id,
        "registered": registered,
        "model": model,
        "data": data,
        "x": x,
    }


def _evaluate_json(capsys, *argv) -> dict:
    assert _main("evaluate", *argv, "--json") == 0
    return json.loads(capsys.readouterr().out)


def test_the_model_directory_rebuilds_the_model_without_pickle(served):
    from mutransfer.serving._artifact import read_model_dir

    model, card = read_model_dir(served["home"] / "runs" / "tiny" / "model")
    assert card.model_class == "FNO" and card.problem == "burgers" and card.resolution == 64
    x = torch.randn(2, 64, 1)
    with torch.no_grad():
        assert torch.equal(model(x), served["model"].eval()(x))
    mlmodel = (served["home"] / "runs" / "tiny" / "model" / "MLmodel").read_text()
    assert "mutransfer:" in mlmodel and "loader_module: mutransfer.serving.pyfunc" in mlmodel
    assert "python_model" not in mlmodel and "pickle" not in mlmodel  # pyfunc rebuilds it too: nothing pickled


def test_any_mlflow_client_loads_it_with_pyfunc_by_folder_run_and_registered_name(served):
    """mlflow.pyfunc.load_model(uri).predict(array): the trained model's own output, whichever URI names it; an
    array of the wrong shape is refused by the signature, naming it."""
    import mlflow
    import mlflow.pyfunc
    from mlflow.exceptions import MlflowException

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(served["uri"])  # what an MLflow user sets for runs:/ and models:/
    try:
        x = served["x"][:5]
        with torch.no_grad():
            expected = served["model"].eval()(x).numpy()
        for uri in (
            str(served["home"] / "runs" / "tiny" / "model"),
            f"runs:/{served['run_id']}/model",
            served["registered"]["uri"],
        ):
            predicted = mlflow.pyfunc.load_model(uri).predict(x.numpy())
            assert predicted.shape == expected.shape and np.allclose(predicted, expected, atol=1e-6), uri
        with pytest.raises(MlflowException, match="shape"):
            mlflow.pyfunc.load_model(f"runs:/{served['run_id']}/model").predict(x.numpy()[..., 0])
    finally:
        mlflow.set_tracking_uri(previous)


@pytest.mark.slow  # starts MLflow's scoring server (uvicorn)
def test_mlflow_models_serve_answers_a_request_on_loopback(served, tmp_path):
    """`mlflow models serve` (the python_function flavor, this environment) on 127.0.0.1: a JSON request of two
    samples gets the model's two predictions."""
    import socket
    import time
    import urllib.request

    from tests.team_store import free_port

    port = free_port()
    directory = served["home"] / "runs" / "tiny" / "model"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", str(directory), "--env-manager", "local"]
    server = subprocess.Popen(
        [*cmd, "-h", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, server.stderr.read()[-2000:] if server.stderr else ""
            time.sleep(0.5)
        x = served["x"][:2]
        body = json.dumps({"inputs": x.numpy().tolist()}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations", data=body, headers={"Content-Type": "application/json"}
        )
        predictions = np.array(json.loads(urllib.request.urlopen(request, timeout=60).read())["predictions"])
        with torch.no_grad():
            expected = served["model"].eval()(x).numpy()
        assert predictions.shape == expected.shape and np.allclose(predictions, expected, atol=1e-5)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_pickled_object_in_the_weights_is_refused(served, tmp_path):
    from mutransfer.errors import UserInputError
    from mutransfer.serving._artifact import read_model_dir

    bad = tmp_path / "model"
    shutil.copytree(served["home"] / "runs" / "tiny" / "model", bad)
    torch.save({"weights": torch.nn.Linear(2, 2)}, bad / "state_dict.pt")  # a pickled module, not tensors
    with pytest.raises(UserInputError, match="not a plain state dict"):
        read_model_dir(bad)


def test_study_run_uri_logged_model_and_registered_version_agree(served, capsys, monkeypatch):
    monkeypatch.chdir(served["home"])
    sources = [
        "runs/tiny",
        "tiny",
        f"runs:/{served['run_id']}/model",
        f"models:/{served['model_id']}",
        served["registered"]["uri"],
    ]
    errors = set()
    for source in sources:
        result = _evaluate_json(capsys, source, "--data", "data.h5", "--runs-dir", "runs")
        assert [r["samples"] for r in result["results"]] == [48]
        errors.add(round(result["results"][0]["relative_l2"], 6))
    assert len(errors) == 1  # the same weights, whichever way they were found
    assert served["registered"]["uri"] == "models:/tiny-fno/1"


def test_evaluate_reports_each_resolution_and_refuses_one_the_operator_cannot_take(served, capsys, monkeypatch):
    monkeypatch.chdir(served["home"])
    result = _evaluate_json(capsys, "tiny", "--runs-dir", "runs", "--data", "data.h5", "--resolution", "64", "128")
    assert [r["resolution"] for r in result["results"]] == [64, 128]
    assert _main("evaluate", "tiny", "--runs-dir", "runs", "--data", "data.h5", "--resolution", "32") == 2
    err = capsys.readouterr().err
    assert "--resolution 32" in err and "K <= 17" in err and len(err.strip().splitlines()) == 1


def test_predict_writes_the_project_schema_and_evaluates_to_zero(served, capsys, monkeypatch):
    from mutransfer.data._hdf5_io import read_dataset

    monkeypatch.chdir(served["home"])
    assert (
        _main("predict", served["registered"]["uri"], "--data", "data.h5", "--out", "pred.h5", "--resolution", "64")
        == 0
    )
    assert "wrote 48 predictions" in capsys.readouterr().out
    written = read_dataset(served["home"] / "pred.h5")
    assert written["output"].shape == (48, 64) and written["attrs"]["problem"] == "burgers"
    with torch.no_grad():
        expected = served["model"].eval()(served["x"])[..., 0].numpy()
    assert abs(written["output"] - expected).max() < 1e-5
    result = _evaluate_json(capsys, "tiny", "--runs-dir", "runs", "--data", "pred.h5")
    assert result["results"][0]["relative_l2"] < 1e-6


def test_bad_inputs_are_one_line_and_exit_2(served, tmp_path, capsys, monkeypatch):
    from mutransfer.data._hdf5_io import write_dataset

    monkeypatch.chdir(served["home"])
    import numpy as np

    darcy = tmp_path / "darcy.h5"
    grid = np.linspace(0, 1, 9)
    write_dataset(
        darcy,
        {
            "input": np.ones((3, 9, 9)),
            "output": np.ones((3, 9, 9)),
            "grid": {"x": grid, "y": grid},
            "attrs": {"problem": "darcy"},
        },
    )
    cases = [
        (["evaluate", "nosuch", "--data", "data.h5"], "study 'nosuch' not found"),
        (["evaluate", "tiny", "--runs-dir", "runs", "--data", "missing.h5"], "missing.h5: file not found"),
        (["evaluate", "tiny", "--runs-dir", "runs", "--data", str(tmp_path)], f"--data {tmp_path}: is a directory"),
        (["evaluate", "tiny", "--runs-dir", "runs", "--data", str(darcy)], "holds darcy data"),
        (["evaluate", "models:/nosuch/1", "--data", "data.h5"], "models:/nosuch/1: not found"),
        (["predict", "tiny", "--runs-dir", "runs", "--data", "data.h5", "--out", str(tmp_path)], "is a directory"),
    ]
    for argv, expected in cases:
        assert _main(*argv) == 2, argv
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "predictions.h5").exists()


def test_a_moved_store_still_serves_its_models(served, tmp_path, capsys, monkeypatch):
    """Folder A copied to B and A removed: the study and the registry's models:/ URI both load from B."""
    moved = tmp_path / "B"
    shutil.copytree(served["home"], moved)
    hidden = served["home"].with_name(served["home"].name + "-away")
    served["home"].rename(hidden)
    try:
        monkeypatch.chdir(moved)
        for source in ("tiny", served["registered"]["uri"], f"runs:/{served['run_id']}/model"):
            assert (
                _evaluate_json(capsys, source, "--runs-dir", "runs", "--data", "data.h5")["results"][0]["samples"] == 48
            )
    finally:
        hidden.rename(served["home"])
    # the relocation only steps in where MLflow's recorded path is gone: with A back, nothing is noted
    monkeypatch.chdir(served["home"])
    assert _main("evaluate", served["registered"]["uri"], "--data", "data.h5") == 0
    assert "store moved" not in capsys.readouterr().err


def test_register_needs_a_database_store_and_a_valid_name(tmp_path):
    from mutransfer._sweep.model_log import check_registry_store
    from mutransfer.errors import UserInputError

    check_registry_store("sqlite:////tmp/x.db", "ok-name")  # a database store passes
    check_registry_store("file:///tmp/mlruns", None)  # nothing to register: no check
    with pytest.raises(UserInputError, match="database-backed"):
        check_registry_store("file:///tmp/mlruns", "ok-name")
    proc = subprocess.run(
        [sys.executable, "-m", "mutransfer", "sweep", "--register", "a/b"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2 and "is not a model name" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing created


def test_outputs_never_overwrite_the_input_the_store_or_a_study(served, tmp_path, capsys, monkeypatch):
    """predict/report/data generate --out: an existing file needs --force; the command's input, a tracking store and a
    study's or model's files are refused even with it, each in one line with exit 2 and the file unchanged."""
    monkeypatch.chdir(served["home"])
    home = served["home"]
    study = home / "runs" / "tiny"
    model = ["tiny", "--runs-dir", "runs", "--data", "data.h5"]
    kept = {p: p.read_bytes() for p in (home / "data.h5", home / "mlflow.db", study / "state.json")}
    kept[study / "model" / "state_dict.pt"] = (study / "model" / "state_dict.pt").read_bytes()
    elsewhere = tmp_path / "elsewhere.h5"
    elsewhere.write_bytes(b"a user's file")
    (home / "runs" / ".locks").mkdir(exist_ok=True)
    (home / "runs" / ".locks" / "tiny.lock").touch()  # the study's lock, as a driver leaves it
    cases = [
        (["predict", *model, "--out", "data.h5", "--force"], "is this command's input (data.h5)"),
        (["predict", *model, "--out", "mlflow.db", "--force"], "is an SQLite database"),
        (["predict", *model, "--out", str(study / "model" / "state_dict.pt"), "--force"], "inside the model folder"),
        (["predict", *model, "--out", str(elsewhere)], "the file exists and is kept; pass --force"),
        (["report", "tiny", "--runs-dir", "runs", "--out", str(study / "state.json"), "--force"], "inside the study"),
        (["report", "tiny", "--runs-dir", "runs", "--out", "mlflow.db", "--force"], "is an SQLite database"),
        (
            ["data", "generate", "burgers", "--n", "4", "--resolution", "64", "--out", "mlflow.db", "--force"],
            "is an SQLite database",
        ),
        (
            ["data", "generate", "burgers", "--n", "4", "--resolution", "64", "--out", str(study / "trial.h5")],
            "inside the study folder",
        ),
        # the attack re-run: a store's lock and a study's lock were replaced (a second driver could then get in)
        (["predict", *model, "--out", "mlflow.db.lock", "--force"], "is the lock file of the SQLite database"),
        (["report", "tiny", "--runs-dir", "runs", "--out", "mlflow.db-wal", "--force"], "is the wal file of the"),
        (["report", "tiny", "--runs-dir", "runs", "--out", "runs/.locks/tiny.lock", "--force"], "the lock of study"),
    ]
    for argv, expected in cases:
        assert _main(*argv) == 2, argv
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert all(path.read_bytes() == content for path, content in kept.items())
    assert elsewhere.read_bytes() == b"a user's file" and not (study / "trial.h5").exists()
    # with --force, a file of the user's that is none of those is replaced
    assert _main("predict", *model, "--out", str(elsewhere), "--force", "--resolution", "64") == 0
    from mutransfer.data._hdf5_io import read_dataset

    assert read_dataset(elsewhere)["output"].shape == (48, 64)


def test_a_model_folder_is_replaced_whole_or_not_at_all(served, tmp_path):
    """A sweep's model folder is written beside it and renamed into place: a write that fails half-way (here a
    state entry that is not a tensor, after config.json was written) leaves the earlier model as it was and no
    hidden folder behind; one that succeeds replaces it whole."""
    import shutil

    from mutransfer.serving._artifact import ModelCard, read_model_dir, write_model_dir

    folder = tmp_path / "model"
    shutil.copytree(served["home"] / "runs" / "tiny" / "model", folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    _, card = read_model_dir(folder)
    state = served["model"].state_dict()
    with pytest.raises(AttributeError):
        write_model_dir(folder, ModelCard(**{**card.__dict__, "study": "half"}), {**state, "x": 1})
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    write_model_dir(folder, ModelCard(**{**card.__dict__, "study": "whole"}), state)
    assert read_model_dir(folder)[1].study == "whole" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
