"""The validation split (mutransfer.data._validation) and its place in the study and the trainer."""

from __future__ import annotations

import pytest
import torch

from mutransfer.data._loading import SplitData
from mutransfer.data._validation import SelectionSplit, carve_validation


def _split(n_train: int = 10, n_test: int = 4) -> SplitData:
    x = torch.arange(n_train + n_test, dtype=torch.float32).reshape(-1, 1, 1).expand(-1, 8, 1).contiguous()
    return SplitData(x[:n_train], x[:n_train] * 2, x[n_train:], x[n_train:] * 2, (8,), "burgers")


def _ids(t) -> list[int]:
    return [int(v) for v in t[:, 0, 0]]


def test_carve_keeps_the_last_training_samples_apart_and_holds_no_test_rows():
    fit, select = carve_validation(_split(), 3)
    assert _ids(fit.train_x) == list(range(7)) and _ids(fit.val_x) == [7, 8, 9] and _ids(fit.test_x) == [10, 11, 12, 13]
    assert isinstance(select, SelectionSplit) and select.split == "validation"
    assert _ids(select.train_x) == list(range(7))
    assert _ids(select.test_x) == [7, 8, 9]  # the held-out slot holds the validation samples
    everything = {id(v) for v in vars(select).values()}
    assert id(fit.test_x) not in everything and id(fit.test_y) not in everything
    assert not {7, 8, 9} & set(_ids(fit.train_x)), "a validation sample is also trained on"


def test_a_study_made_before_validation_splits_selects_on_its_test_split_as_it_did():
    split = _split()
    fit, select = carve_validation(split, 0)
    assert fit is split and fit.val_x is None
    assert select.split == "test" and select.test_x is split.test_x


@pytest.mark.parametrize("n_val", [-1, 10, 11])
def test_carve_refuses_a_validation_split_that_leaves_nothing_to_train_on(n_val):
    with pytest.raises(ValueError, match="n_val"):
        carve_validation(_split(), n_val)


def test_streamed_samples_are_carved_without_reading(tmp_path):
    from mutransfer.data._burgers import generate_burgers
    from mutransfer.data._hdf5_io import write_dataset
    from mutransfer.data._loading import load_split

    path = write_dataset(tmp_path / "b.h5", generate_burgers(12, 64, seed=0, progress=False))
    loaded = load_split(path, n_train=8, n_test=4, problem="burgers", stream=False)
    streamed = load_split(path, n_train=8, n_test=4, problem="burgers", stream=True)
    (fit_l, sel_l), (fit_s, sel_s) = carve_validation(loaded, 2), carve_validation(streamed, 2)
    assert fit_s.train_x.shape[0] == 6 and fit_s.val_x.shape[0] == 2
    assert torch.equal(fit_s.val_x[:], fit_l.val_x) and torch.equal(sel_s.test_y[:], sel_l.test_y)


def test_the_trainer_measures_the_validation_split_when_given_one():
    from mutransfer._training import TrainConfig, train
    from operators import FNO

    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 8, 1, generator=g)
    y = torch.cumsum(x, dim=1) + 0.1  # a smooth, nonzero target
    fit, select = carve_validation(SplitData(x[:12], y[:12], x[12:], y[12:], (8,), "burgers"), 4)
    config = TrainConfig(epochs=2, batch_size=4, lr=1e-3, device="cpu", progress=False)
    torch.manual_seed(0)
    with_val = train(
        FNO(1, 1, 1, modes=2, width=4, layers=1, parametrization="mup", projection_channels=4), fit, config
    )
    assert with_val.val_error is not None and all(r.val_error is not None for r in with_val.history)
    torch.manual_seed(0)
    selection = train(
        FNO(1, 1, 1, modes=2, width=4, layers=1, parametrization="mup", projection_channels=4), select, config
    )
    assert selection.val_error is None and all(r.val_error is None for r in selection.history)
    # the selection run's held-out error is the fit run's validation error (same samples, same init and order)
    assert selection.test_error == pytest.approx(with_val.val_error, rel=1e-6)
    assert with_val.test_error != pytest.approx(with_val.val_error, rel=1e-3)


def test_the_study_defaults_the_validation_split_to_a_fifth_of_the_training_samples():
    import yaml

    from mutransfer._study import default_study_text, study_from_yaml_text

    study = study_from_yaml_text(default_study_text(), "quick.yaml")
    assert study.problem.n_val == 400 // 5 and study.problem.n_fit == 320
    m = yaml.safe_load(default_study_text())
    m["problem"]["n_val"] = 50
    assert study_from_yaml_text(yaml.safe_dump(m), "s.yaml").problem.n_fit == 350


def test_a_validation_split_as_large_as_the_training_data_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    import yaml

    from mutransfer._study import default_study_text
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    m = yaml.safe_load(default_study_text())
    m["problem"]["n_val"] = m["problem"]["n_train"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(m))
    rc = main(["sweep", "--study", str(tmp_path / "s.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "problem.n_val" in err[0] and "n_val: 80" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"], "something was created before the refusal"


def test_a_study_folder_written_before_validation_splits_resumes_selecting_as_it_started(tmp_path):
    import yaml

    from mutransfer._study import default_study_text, study_from_yaml_text
    from mutransfer._study_folder.portable import read_study_file, write_study_file
    from mutransfer._study_folder.state import StudyDir

    sdir = StudyDir(tmp_path / "old")
    sdir.root.mkdir()
    write_study_file(sdir, study_from_yaml_text(default_study_text(), "quick.yaml"))
    assert read_study_file(sdir).problem.n_val == 80  # written now: the split is stored
    m = yaml.safe_load(sdir.study_file.read_text())
    del m["problem"]["n_val"]  # what an older version wrote
    sdir.study_file.write_text(yaml.safe_dump(m, sort_keys=False))
    old = read_study_file(sdir)
    assert old.problem.n_val == 0 and old.problem.n_fit == 400
