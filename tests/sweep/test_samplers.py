"""``search.algorithm`` names any seeded Optuna sampler, and ``beta1`` is searchable (issue "The first hour", item 5)."""

from __future__ import annotations

import json

import pytest
import yaml

from mutransfer.errors import UserInputError
from mutransfer.study import load_study
from tests.sweep_helpers import IN_PROCESS, write_tiny_study


def _study(tmp_path, tiny_data, algorithm: str, **space):
    path = write_tiny_study(tmp_path, tiny_data, name=f"s-{algorithm.lower()}", trials=4, epochs=2, grace=2)
    mapping = yaml.safe_load(path.read_text())
    mapping["search"]["algorithm"] = algorithm
    mapping["search_space"].update(space)
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return path


def test_a_gp_search_over_beta1_runs_end_to_end_and_repeats_itself(tiny_data, tmp_path, capsys, monkeypatch):
    """GPSampler by name, beta1 searched beside lr: every trial trains at its own beta1, the target at the winner's;
    the same study run again samples the same configurations (each trial's sampler is seeded)."""
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)  # the tracking store (./mlflow.db) goes here
    beta1 = {"type": "uniform", "low": 0.5, "high": 0.95}
    path = _study(tmp_path, tiny_data, "GPSampler", beta1=beta1)
    tables = []
    for name in ("gp-a", "gp-b"):
        argv = ["sweep", "--study", str(path), "--name", name, "--runs-dir", str(tmp_path / "runs"), "--json"]
        assert main([*argv, *IN_PROCESS]) == 0
        report = json.loads(capsys.readouterr().out)
        tables.append([t["config"] for t in report["trial_table"]])
    configs = tables[0]
    assert len(configs) == 4 and all(0.5 <= c["beta1"] <= 0.95 for c in configs)
    assert len({c["beta1"] for c in configs}) == 4 and tables[0] == tables[1]
    assert report["target_hyperparameters"]["beta1"] == report["best_proxy"]["config"]["beta1"]


@pytest.mark.parametrize(
    "algorithm, fragment",
    [
        ("BogusSampler", "'BogusSampler' is not tpe, random, grid or a sampler of optuna.samplers"),
        ("GridSampler", "made from a seed alone"),  # needs its search space: not a name alone
        ("PartialFixedSampler", "made from a seed alone"),
    ],
)
def test_an_algorithm_that_is_not_a_seeded_sampler_is_refused_when_read(tiny_data, tmp_path, algorithm, fragment):
    with pytest.raises(UserInputError, match="search.algorithm") as err:
        load_study(_study(tmp_path, tiny_data, algorithm))
    assert fragment in str(err.value)


def test_a_sampler_whose_package_is_missing_names_the_install(tiny_data, tmp_path, monkeypatch):
    import importlib.util

    from mutransfer.study import samplers

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cmaes" else real(name, *a))
    with pytest.raises(UserInputError, match="CmaEsSampler needs cmaes; pip install cmaes"):
        load_study(_study(tmp_path, tiny_data, "CmaEsSampler"))
    assert samplers.sampler_problem("QMCSampler") is None and samplers.sampler_problem("tpe") is None


def test_beta1_out_of_range_is_refused(tiny_data, tmp_path):
    with pytest.raises(UserInputError, match=r"search_space.beta1.high: must be in \(0, 1\)"):
        load_study(_study(tmp_path, tiny_data, "tpe", beta1={"type": "uniform", "low": 0.5, "high": 1.0}))
