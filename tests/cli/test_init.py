"""`mutransfer init`: a commented study file for the user's problem, data and operator, that runs as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mutransfer._study import load_study
from mutransfer.cli.main import main


@pytest.fixture(scope="module")
def darcy21(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "mydata.h5"
    assert (
        main(["data", "generate", "darcy", "--n", "30", "--resolution", "21", "--out", str(path), "--no-progress"]) == 0
    )
    return path


@pytest.mark.slow  # a whole study (the default suite stays under 5 min)
def test_init_writes_a_study_for_the_users_file_that_runs_as_written(darcy21, tmp_path, capsys, monkeypatch):
    """The file beside the data, its path relative; K shrunk to what the 21-point grid (+5 padding) holds; every
    field commented; `mutransfer sweep --study` runs it (smoke-sized, in process: the study's logic)."""
    (tmp_path / "mydata.h5").write_bytes(darcy21.read_bytes())
    monkeypatch.chdir(tmp_path)
    assert main(["init", "mine", "--problem", "darcy", "--data", "mydata.h5"]) == 0
    said = capsys.readouterr().out
    assert "wrote mine.yaml" in said and "mutransfer sweep --study mine.yaml" in said
    text = (tmp_path / "mine.yaml").read_text()
    mapping = yaml.safe_load(text)
    assert mapping["problem"]["data"] == "mydata.h5" and mapping["operator"]["type"] == "fno"
    assert (mapping["proxy_K"], mapping["target_K"]) == (4, 12)  # 24 does not fit (21 + 5) // 2 + 1 = 14
    assert "# training resolution, reached by striding" in text  # each field's own help
    assert sum(1 for line in text.splitlines() if line.lstrip().startswith("#")) > 40
    monkeypatch.setenv("MUTRANSFER_SMOKE", "1")
    rc = main(["sweep", "--study", "mine.yaml", "--executor", "inprocess", "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["study"] == "mine" and report["target"]["status"] == "completed"
    # the summary's next commands repeat this study's flags (smoke mode's sizes among them), the file by its path
    command = report["command"]
    assert command[:4] == ["mutransfer", "sweep", "--study", str(tmp_path / "mine.yaml")]
    assert command[-2:] == ["--executor", "inprocess"] and "--num-trials" in command


@pytest.mark.parametrize(
    "problem, operator, sizes",
    [("burgers", "fno", (6, 24)), ("darcy", "fno", (4, 16)), ("darcy_mesh", "galerkin", None), ("darcy", "ono", None)],
)
def test_init_for_generated_data_parses_for_each_kind_of_operator(tmp_path, capsys, problem, operator, sizes):
    out = tmp_path / "s.yaml"
    assert main(["init", "s", "--problem", problem, "--operator", operator, "--out", str(out)]) == 0
    study, _ = load_study(out)
    assert study.problem.name == problem and study.operator.type == operator and study.problem.data is None
    assert (study.proxy_K, study.target_K) == (sizes or (None, None))
    assert study.target_width > study.operator.width


def _refused(capsys, args, *fragments) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(f in err[0] for f in fragments), err


def test_init_refuses_in_one_line_and_writes_nothing(darcy21, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("mine.yaml").write_text("mine: kept\n")
    _refused(capsys, ["init", "mine"], "--out mine.yaml", "exists", "--force")
    assert Path("mine.yaml").read_text() == "mine: kept\n"
    _refused(capsys, ["init", "bad/name"], "name", "letters, digits")
    _refused(capsys, ["init", "x", "--problem", "burgers", "--data", str(darcy21)], "holds 'darcy' data")
    _refused(capsys, ["init", "y", "--data", "missing.h5", "--problem", "darcy"], "missing.h5", "not found")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.yaml"]
    with pytest.raises(SystemExit) as stop:  # argparse's choices: one line, exit 2
        main(["init", "z", "--operator", "nope"])
    assert stop.value.code == 2 and "--operator" in capsys.readouterr().err


def test_a_missing_study_file_points_to_its_other_suffix_or_to_init(tmp_path, capsys, monkeypatch):
    """Outside the repository there is no studies/quick.yaml to suggest: the fix is init, or the file's .yaml twin."""
    monkeypatch.chdir(tmp_path)
    _refused(capsys, ["sweep", "--study", "mystudy.yml"], "mystudy.yml", "mutransfer init mystudy")
    Path("mystudy.yaml").write_text("name: x\n")
    _refused(capsys, ["sweep", "--study", "mystudy.yml"], "did you mean mystudy.yaml?")
    import mutransfer as mt
    from mutransfer.errors import UserInputError

    with pytest.raises(UserInputError, match="did you mean mystudy.yaml"):
        mt.StudySpec.from_yaml("mystudy.yml")


@pytest.mark.parametrize("typo", ["proxy_k", "proxyK", "Proxy_K"])
def test_a_mistyped_required_key_is_named_with_its_fix(tmp_path, capsys, monkeypatch, typo):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "s"]) == 0
    text = Path("s.yaml").read_text().replace("\nproxy_K:", f"\n{typo}:")
    Path("s.yaml").write_text(text)
    capsys.readouterr()
    _refused(capsys, ["sweep", "--study", "s.yaml"], "proxy_K: is required", f"the file has {typo!r}: rename it")


def test_a_required_key_simply_missing_gets_an_example_not_a_rename(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "s"]) == 0
    Path("s.yaml").write_text(Path("s.yaml").read_text().replace("\nproxy_K:", "\n# proxy_K:"))
    capsys.readouterr()
    _refused(capsys, ["sweep", "--study", "s.yaml"], "proxy_K: is required, e.g. proxy_K:")
