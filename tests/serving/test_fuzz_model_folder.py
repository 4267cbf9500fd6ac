"""Property-based fuzzing of a model folder (issue "Nothing lost", item 5: generated model folders).

A real model folder (`mutransfer train --out`: ``MLmodel``, ``config.json``, ``state_dict.pt`` of a 1-D FNO trained one
epoch on a 12-sample Burgers file) is copied and one of its files is changed: fields of ``config.json`` or of its
``model_config`` replaced by arbitrary JSON values, the ``mutransfer`` flavor of ``MLmodel`` pointed at other files
(another file of the folder, the data file, ``../``, an absolute path) or given other values, a whole file replaced by an
arbitrary document or bytes, ``state_dict.pt`` cut short or holding other tensors. ``evaluate`` and ``predict`` must
then be refused in one line (exit 2, no traceback, nothing written: tests/fuzz_harness.py) or work (exit 0: an edit
that changes nothing the model needs). Never a traceback, several lines, a file written by a refusal, or a change
to the model folder.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_harness import folder_fuzz_settings, record, run_cli
from tests.fuzz_harness import json_values as fuzz_json_values

pytestmark = pytest.mark.slow  # a model trained first, then a CLI command per case (about 15 s)

SETTINGS = folder_fuzz_settings(60)

json_values = fuzz_json_values(0, 1, 2, 3, 64, 10**6, text=12, leaves=8)
#: what the flavor's file names may be changed to: the folder's other files, the data, outside the folder, nothing
names = st.sampled_from(
    ["config.json", "state_dict.pt", "MLmodel", "nope.json", "../d.h5", "../m/config.json", "/etc/passwd", "", "."]
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A folder holding ``d.h5`` (12 Burgers samples at resolution 64) and ``m/``, a model trained on it one epoch."""
    from mutransfer.cli.main import main

    root = tmp_path_factory.mktemp("model-fuzz")
    with contextlib.chdir(root), pytest.MonkeyPatch.context() as mp:
        mp.setenv("MUTRANSFER_CACHE", str(root / "cache"))
        assert main(["data", "generate", "burgers", "--n", "12", "--resolution", "64", "--out", "d.h5"]) == 0
        train = ["train", "--problem", "burgers", "--data", "d.h5", "--epochs", "1", "--width", "8", "--out", "m"]
        assert main([*train, "--layers", "2", "--no-progress"]) == 0
    return root


def _replaced_whole(draw, path: Path, how: str, dumps) -> bool:
    """``how`` "bytes" or "document": the whole file replaced by arbitrary bytes or an arbitrary document (written by
    ``dumps``); False for the file's own edits."""
    if how == "bytes":
        path.write_bytes(draw(st.binary(max_size=64)))
    elif how == "document":
        path.write_text(dumps(draw(json_values)))
    return how in ("bytes", "document")


def _edit_config(draw, folder: Path) -> str:
    path = folder / "config.json"
    how = draw(st.sampled_from(["field", "model_config", "model_config", "document", "bytes"]))
    if not _replaced_whole(draw, path, how, json.dumps):
        card = json.loads(path.read_text())
        section = card if how == "field" else card["model_config"]
        for key in draw(st.lists(st.sampled_from(sorted(section) + ["x"]), min_size=1, max_size=3, unique=True)):
            section[key] = draw(json_values)
        path.write_text(json.dumps(card))
    return f"config.json/{how}"


def _edit_mlmodel(draw, folder: Path) -> str:
    path = folder / "MLmodel"
    how = draw(st.sampled_from(["file names", "file names", "flavor", "document", "bytes"]))
    if not _replaced_whole(draw, path, how, yaml.safe_dump):
        mlmodel = yaml.safe_load(path.read_text())
        flavor = mlmodel["flavors"]["mutransfer"]
        if how == "file names":
            for key in draw(st.lists(st.sampled_from(["config", "weights"]), min_size=1, max_size=2, unique=True)):
                flavor[key] = draw(names)
        else:
            for key in draw(st.lists(st.sampled_from([*sorted(flavor), "x"]), min_size=1, max_size=2, unique=True)):
                flavor[key] = draw(json_values)
            if draw(st.booleans()):
                mlmodel["flavors"] = draw(json_values)
        path.write_text(yaml.safe_dump(mlmodel))
    return f"MLmodel/{how}"


def _edit_weights(draw, folder: Path) -> str:
    import torch

    path = folder / "state_dict.pt"
    how = draw(st.sampled_from(["truncated", "bytes", "tensors", "tensors"]))
    if how == "bytes":
        path.write_bytes(draw(st.binary(max_size=64)))
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: draw(st.integers(0, len(data) - 1))])
    else:
        state = torch.load(path, weights_only=True)
        for key in draw(st.lists(st.sampled_from([*sorted(state), "x"]), min_size=1, max_size=3, unique=True)):
            value = draw(st.sampled_from(["shape", "dtype", "scalar", "gone"]))
            if value == "gone":
                state.pop(key, None)
            elif value == "scalar":
                state[key] = draw(st.integers(-5, 5) | st.text(max_size=4) | st.none())
            elif value == "dtype":
                state[key] = torch.zeros(state.get(key, torch.zeros(2)).shape, dtype=torch.int64)
            else:
                state[key] = torch.zeros(draw(st.lists(st.integers(0, 3), max_size=3)))
        torch.save(state, path)
    return f"state_dict.pt/{how}"


EDITS = {"config.json": _edit_config, "MLmodel": _edit_mlmodel, "state_dict.pt": _edit_weights}


@given(data=st.data(), which=st.sampled_from(sorted(EDITS)), command=st.sampled_from(["evaluate", "predict"]))
@SETTINGS
def test_a_generated_model_folder_is_refused_in_one_line_or_used(trained, tmp_path_factory, data, which, command):
    folder = tmp_path_factory.mktemp("edited") / "m"
    shutil.copytree(trained / "m", folder)
    edit = EDITS[which](data.draw, folder)
    argv = [command, str(folder), "--data", str(trained / "d.h5")]
    if command == "predict":
        argv += ["--out", "predictions.h5"]  # in the harness's fresh working directory
    outcome = record("model folder", run_cli(argv, watch=(folder, trained / "d.h5")), edit)
    assert outcome.kind in ("refused", "accepted"), outcome.describe()
    if outcome.kind == "accepted":  # what an accepted edit may change: nothing in the model folder or the data
        assert not [p for p in outcome.changed if not p.endswith("predictions.h5")], outcome.describe()


def test_the_folder_as_trained_is_used(trained):
    """The property's other side: the unedited folder evaluates and predicts (so 'accepted' is reachable)."""
    for argv in (["evaluate"], ["predict"]):
        args = [*argv, str(trained / "m"), "--data", str(trained / "d.h5")]
        outcome = run_cli(args + (["--out", "p.h5"] if argv == ["predict"] else []))
        assert outcome.kind == "accepted", outcome.describe()
