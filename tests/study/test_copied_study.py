"""A shipped study copied elsewhere and pointed at the user's data file runs unchanged: ``problem.data`` relative to
the study file (then the working directory), and ``problem.generated_resolution`` ignored with a note, not refused."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import yaml

from mutransfer._study import load_study
from tests.repo_paths import ROOT
from tests.sweep_helpers import write_tiny_data


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_data(tmp_path_factory.mktemp("data") / "burgers_tiny.h5")


def _copy_quick(folder: Path, data: str) -> Path:
    """studies/quick.yaml as a user copies it: only problem.data changed (and samples the tiny file holds)."""
    mapping = yaml.safe_load((ROOT / "studies" / "quick.yaml").read_text())
    assert mapping["problem"]["generated_resolution"] == 1024  # the field a copy used to be refused for
    mapping["problem"].update(data=data, n_train=32, n_test=16, resolution=64)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "my_study.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return path


def test_a_copied_study_finds_its_data_beside_it_from_any_directory(tiny, tmp_path):
    home = tmp_path / "project"
    home.mkdir()
    (home / "burgers.h5").write_bytes(tiny.read_bytes())
    path = _copy_quick(home, "burgers.h5")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with contextlib.chdir(elsewhere):
        study, _ = load_study(os.path.relpath(path, elsewhere))
    assert study.problem.data == str(home / "burgers.h5")
    assert study.problem.generated_resolution is None
    (note,) = study.notes
    assert note.startswith("problem.generated_resolution 1024 applies to generated data only") and "ignored" in note
    assert "notes" not in study.to_dict()  # not part of the file: the copy kept in the study folder parses again


def test_a_relative_path_not_beside_the_study_is_read_from_the_working_directory(tiny, tmp_path):
    path = _copy_quick(tmp_path / "studies", "data/burgers.h5")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "burgers.h5").write_bytes(tiny.read_bytes())
    with contextlib.chdir(tmp_path):
        study, _ = load_study(path)
    assert Path(study.problem.data).resolve() == (tmp_path / "data" / "burgers.h5").resolve()


def test_a_missing_file_is_named_where_the_study_looked_for_it(tmp_path):
    from mutransfer.errors import UserInputError

    path = _copy_quick(tmp_path / "studies", "missing.h5")
    with contextlib.chdir(tmp_path), pytest.raises(UserInputError) as err:
        load_study(path)
    assert "problem.data" in str(err.value) and str(tmp_path / "studies" / "missing.h5") in str(err.value)


def test_generated_data_keeps_its_resolution_and_says_nothing(tmp_path):
    study, _ = load_study(ROOT / "studies" / "quick.yaml")
    assert study.problem.generated_resolution == 1024 and study.notes == ()


def test_the_sweep_says_the_note_before_it_trains(tiny, tmp_path, capsys):
    """The note reaches the user; the copied study then runs (in process: the study's logic, not Ray's)."""
    from mutransfer.cli.main import main

    home = tmp_path / "project"
    home.mkdir()
    (home / "burgers.h5").write_bytes(tiny.read_bytes())
    mapping = yaml.safe_load(_copy_quick(home, "burgers.h5").read_text())
    mapping["operator"].update(width=8, layers=1, projection_channels=16)
    mapping.update(target_width=8, proxy_K=4, target_K=8)
    mapping["search"].update(num_trials=1, max_concurrent=1)
    mapping["budget"].update(epochs=1, grace_period=1)
    mapping["target"].update(epochs=1)
    (home / "my_study.yaml").write_text(yaml.safe_dump(mapping, sort_keys=False))
    with contextlib.chdir(tmp_path):
        rc = main(
            ["sweep", "--study", "project/my_study.yaml", "--executor", "inprocess", "--runs-dir", "runs", "--json"]
        )
    assert rc == 0
    err = capsys.readouterr().err
    assert "note: problem.generated_resolution 1024 applies to generated data only" in err, err[-2000:]
