"""`MUTRANSFER_SMOKE=1 mutransfer sweep …` then the real command in the same folder: the refusal says the folder is
the smoke run's and how to run the study for real (issue "The first hour", item 6)."""

from __future__ import annotations

from tests.sweep_helpers import IN_PROCESS, write_tiny_study


def test_a_smoke_folder_is_named_as_such_when_the_real_run_meets_it(tiny_data, tmp_path, capsys, monkeypatch):
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)  # the tracking store (./mlflow.db) goes here
    study = write_tiny_study(tmp_path, tiny_data, name="smoky", trials=3, epochs=2)
    argv = ["sweep", "--study", str(study), "--runs-dir", str(tmp_path / "runs"), "--json", *IN_PROCESS]
    monkeypatch.setenv("MUTRANSFER_SMOKE", "1")
    assert main(argv) == 0
    monkeypatch.delenv("MUTRANSFER_SMOKE")
    capsys.readouterr()
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "was made by a smoke run (MUTRANSFER_SMOKE=1" in line and f"rm -r {tmp_path / 'runs' / 'smoky'}" in line
    assert "--name NEW" in line


def test_a_real_folder_met_with_other_settings_keeps_its_own_words(tiny_data, tmp_path, capsys, monkeypatch):
    """The control: a folder of a real run, met by a run with other settings, is not called a smoke run."""
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    study = write_tiny_study(tmp_path, tiny_data, name="real", trials=2, epochs=1)
    argv = ["sweep", "--study", str(study), "--runs-dir", str(tmp_path / "runs"), "--json", *IN_PROCESS]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--epochs", "2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "smoke" not in line and "ran to the end here with other settings" in line
