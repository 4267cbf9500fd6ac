"""TQDM_DISABLE hides every progress bar (found by the attack re-run: `train` and `data generate` drew theirs anyway,
since they give tqdm ``disable`` and tqdm reads the variable only for arguments not given)."""

from __future__ import annotations

from mutransfer._config.progress import bar_disabled
from mutransfer.cli.main import main


def test_tqdm_disable_hides_the_bars_of_data_generate_and_train(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    generate = ["data", "generate", "burgers", "--n", "12", "--resolution", "32", "--out"]
    train = ["train", "--problem", "burgers", "--data", "a.h5", "--epochs", "1", "--width", "8", "--layers", "1"]
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert main([*generate, "a.h5"]) == 0
    assert "burgers:" in capsys.readouterr().err  # the bar is drawn (the check can fail)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert main([*generate, "b.h5"]) == 0 and main(train) == 0
    err = capsys.readouterr().err
    assert "burgers:" not in err and "it/s" not in err and "step/s" not in err, err


def test_the_rule(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert bar_disabled(False) and not bar_disabled(True)
    monkeypatch.setenv("TQDM_DISABLE", "true")
    assert bar_disabled(True)
