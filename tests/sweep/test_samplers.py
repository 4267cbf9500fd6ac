"""``search.algorithm`` names any seeded Optuna sampler (by its class or import path), and every training field is
searchable: ``beta1``, the schedule and its warm-up (issue "The first hour", item 5)."""

from __future__ import annotations

import json

import pytest
import yaml

from mutransfer._study import load_study
from mutransfer.errors import UserInputError
from tests.sweep_helpers import IN_PROCESS, write_tiny_study


def _study(tmp_path, tiny_data, algorithm: str, **space):
    path = write_tiny_study(tmp_path, tiny_data, name=f"s-{algorithm.lower()}", trials=4, epochs=2, grace=2)
    mapping = yaml.safe_load(path.read_text())
    mapping["search"]["algorithm"] = algorithm
    mapping["search_space"].update(space)
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return path


def _trained_with(folder, key: str) -> dict:
    """The training settings a trial's checkpoint was written with (its TrainConfig, weights-only load)."""
    import torch

    return torch.load(folder / "trials" / key / "checkpoint.pt", weights_only=True)["train_config"]


@pytest.mark.slow  # two whole studies (the default suite stays under 5 min)
def test_a_gp_search_over_beta1_schedule_and_warmup_runs_end_to_end_and_repeats_itself(
    tiny_data, tmp_path, capsys, monkeypatch
):
    """GPSampler by name, beta1, the schedule and the warm-up searched beside lr: every trial trains at its own
    values (its checkpoint's settings say so), the target at the winner's; the same study run again samples the
    same configurations (each trial's sampler is seeded)."""
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)  # the tracking store (./mlflow.db) goes here
    space = {
        "beta1": {"type": "uniform", "low": 0.5, "high": 0.95},
        "schedule": {"type": "choice", "values": ["cosine", "constant", "onecycle"]},
        "warmup": {"type": "uniform", "low": 0.0, "high": 0.3},
    }
    path = _study(tmp_path, tiny_data, "GPSampler", **space)
    tables = []
    for name in ("gp-a", "gp-b"):
        argv = ["sweep", "--study", str(path), "--name", name, "--runs-dir", str(tmp_path / "runs"), "--json"]
        assert main([*argv, *IN_PROCESS]) == 0
        report = json.loads(capsys.readouterr().out)
        tables.append([(t["trial_id"], t["config"]) for t in report["trial_table"]])
    configs = [c for _, c in tables[0]]
    assert len(configs) == 4 and all(0.5 <= c["beta1"] <= 0.95 and 0 <= c["warmup"] <= 0.3 for c in configs)
    assert len({c["beta1"] for c in configs}) == 4 and tables[0] == tables[1]
    assert {c["schedule"] for c in configs} <= {"cosine", "constant", "onecycle"}
    for key, config in tables[0]:  # what each trial trained with
        trained = _trained_with(tmp_path / "runs" / "gp-a", key)
        assert trained["schedule"] == config["schedule"] and trained["warmup"] == pytest.approx(config["warmup"])
        assert trained["betas"][0] == pytest.approx(config["beta1"])
    target, best = report["target_hyperparameters"], report["best_proxy"]["config"]
    assert {k: target[k] for k in space} == {k: best[k] for k in space}


def test_a_sampler_by_import_path_runs(tiny_data, tmp_path, capsys, monkeypatch):
    """``optuna.samplers.QMCSampler`` by its import path: read, seeded and sampled as a named one."""
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    path = _study(tmp_path, tiny_data, "optuna.samplers.QMCSampler")
    argv = ["sweep", "--study", str(path), "--runs-dir", str(tmp_path / "runs"), "--json", "--num-trials", "2"]
    assert main([*argv, *IN_PROCESS, "--epochs", "1", "--target-epochs", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["trial_table"]) == 2


@pytest.mark.parametrize(
    "algorithm, fragment",
    [
        ("BogusSampler", "'BogusSampler' is not tpe, random, grid, or an Optuna sampler class"),
        ("optuna.samplers.Nope", "named by its class in optuna.samplers or by an installed module's import path"),
        ("no_such_package.Sampler", "is not tpe, random, grid, or an Optuna sampler class"),
        ("json.JSONDecoder", "is not tpe, random, grid"),  # a class, but no sampler
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

    from mutransfer._study import samplers

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cmaes" else real(name, *a))
    with pytest.raises(UserInputError, match="CmaEsSampler needs cmaes; pip install cmaes"):
        load_study(_study(tmp_path, tiny_data, "CmaEsSampler"))
    assert samplers.sampler_problem("QMCSampler") is None and samplers.sampler_problem("tpe") is None


def test_beta1_out_of_range_is_refused(tiny_data, tmp_path):
    with pytest.raises(UserInputError, match=r"search_space.beta1.high: must be in \(0, 1\)"):
        load_study(_study(tmp_path, tiny_data, "tpe", beta1={"type": "uniform", "low": 0.5, "high": 1.0}))


def _each_trial_builds_its_own(tmp_path, path, capsys, fields: dict[str, str]):
    """Sweep ``path`` in process: (report, study folder), each trial's checkpoint holding a model built with its own
    searched values (``fields``: model config field -> searched key), which differ between trials."""
    import torch

    from mutransfer.cli.main import main

    assert main(["sweep", "--study", str(path), "--runs-dir", str(tmp_path / "runs"), "--json", *IN_PROCESS]) == 0
    report = json.loads(capsys.readouterr().out)
    folder = tmp_path / "runs" / "s-random"
    configs = {t["trial_id"]: t["config"] for t in report["trial_table"]}
    assert len({tuple(c[k] for k in fields.values()) for c in configs.values()}) > 1
    for key, config in configs.items():
        model = torch.load(folder / "trials" / key / "checkpoint.pt", weights_only=True)["model_config"]
        assert {f: model[f] for f in fields} == {f: config[k] for f, k in fields.items()}, key
    return report, folder


def test_the_operators_own_fields_are_searched_and_carried_to_the_target(tiny_data, tmp_path, capsys, monkeypatch):
    """``operator.layers`` and ``operator.projection_channels`` searched: each trial builds its own model (its
    checkpoint's model config says so), the target the winner's (the model folder's config.json), and the transfer
    table carries them over unchanged."""

    monkeypatch.chdir(tmp_path)
    space = {
        "operator.layers": {"type": "int", "low": 1, "high": 3},
        "operator.projection_channels": {"type": "choice", "values": [16, 48]},
    }
    path = _study(tmp_path, tiny_data, "random", **space)
    fields = {"layers": "operator.layers", "projection_channels": "operator.projection_channels"}
    report, folder = _each_trial_builds_its_own(tmp_path, path, capsys, fields)
    best = report["best_proxy"]["config"]
    target = json.loads((folder / "model" / "config.json").read_text())["model_config"]
    assert (target["layers"], target["projection_channels"]) == (
        best["operator.layers"],
        best["operator.projection_channels"],
    )
    rows = {q["name"]: q for q in report["transfer"]["quantities"]}
    assert rows["operator.layers"]["proxy"] == rows["operator.layers"]["target"] == best["operator.layers"]


@pytest.mark.parametrize(
    "key, dist, fragment",
    [
        (  # no width rule: the study does not scale the width
            "operator.width",
            {"type": "int", "low": 8, "high": 16},
            "the width rule covers the proxy's width under width-muP: set target_width > operator.width",
        ),
        (
            "proxy_K",
            {"type": "choice", "values": [6, 24]},
            "search_space.proxy_K: can draw 24: a proxy must have fewer",
        ),
        ("proxy_K", {"type": "choice", "values": [1, 6]}, "search_space.proxy_K.values[0]: must be >= 2"),
        ("operator.padding", {"type": "choice", "values": [0, 2]}, "cannot be searched: the padding sets the grid"),
        (
            "operator.heads",
            {"type": "choice", "values": [2]},
            "is not a field fno searches; use one of: operator.layers",
        ),
        ("operator.options.foo", {"type": "choice", "values": [1]}, "names no key of operator.options"),
        (
            "operator.layers",
            {"type": "int", "low": 0, "high": 3},
            "search_space.operator.layers.low: must be a positive",
        ),
    ],
)
def test_an_operator_field_that_cannot_be_searched_is_refused(tiny_data, tmp_path, key, dist, fragment):
    with pytest.raises(UserInputError) as err:
        load_study(_study(tmp_path, tiny_data, "tpe", **{key: dist}))
    assert fragment in str(err.value) and f"search_space.{key}" in str(err.value), str(err.value)


def test_the_proxys_size_is_searched_where_the_rules_cover_it_and_the_target_transfers_from_the_winners(
    tiny_data, tmp_path, capsys, monkeypatch
):
    """``proxy_K`` and ``operator.width`` searched in a study that scales both under muP: each trial trains a proxy
    of its own K and width (its checkpoint's model config), the transfer record starts from the winner's, and the
    target is the study's size with the winner's width as its muP base width."""

    monkeypatch.chdir(tmp_path)
    space = {
        "proxy_K": {"type": "choice", "values": [4, 8]},
        "operator.width": {"type": "choice", "values": [8, 16]},
    }
    path = _study(tmp_path, tiny_data, "random", **space)
    mapping = yaml.safe_load(path.read_text())
    mapping["target_width"] = 32
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    report, folder = _each_trial_builds_its_own(tmp_path, path, capsys, {"modes": "proxy_K", "width": "operator.width"})
    best = report["best_proxy"]["config"]
    record = report["transfer"]
    assert (record["proxy_modes"], record["proxy_width"]) == (best["proxy_K"], best["operator.width"])
    assert (record["target_modes"], record["target_width"]) == (24, 32)
    assert "proxy_K" not in {q["name"] for q in record["quantities"]}  # a size, in the header, not an unchanged row
    target = json.loads((folder / "model" / "config.json").read_text())["model_config"]
    assert (target["modes"], target["width"], target["base_width"]) == (24, 32, best["operator.width"])


def test_a_searched_size_needs_the_rule_that_covers_it(tiny_data, tmp_path):
    """Width-muP off (standard width parametrization): no rule transfers the width, so it is not searched; a
    ladder sizes the proxies itself."""
    path = _study(tmp_path, tiny_data, "tpe", **{"operator.width": {"type": "choice", "values": [8, 16]}})
    mapping = yaml.safe_load(path.read_text())
    mapping.update(target_width=32, width_parametrization="standard")
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    with pytest.raises(UserInputError, match="search_space.operator.width: the width rule covers"):
        load_study(path)
    mapping.update(width_parametrization="mup")  # the width scales: an equal K is fine, a larger one is not
    mapping["search_space"] = {"lr": mapping["search_space"]["lr"], "proxy_K": {"type": "choice", "values": [24, 30]}}
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    with pytest.raises(UserInputError, match="search_space.proxy_K: can draw 30: a proxy must have fewer modes"):
        load_study(path)
    for key in ("target_width", "width_parametrization"):
        mapping.pop(key)
    mapping["ladder"] = [6, 12, 24]
    mapping["search_space"] = {"lr": mapping["search_space"]["lr"], "proxy_K": {"type": "choice", "values": [4, 6]}}
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    with pytest.raises(UserInputError, match="search_space.proxy_K: a ladder sizes the proxies itself"):
        load_study(path)


def test_a_flag_that_sets_a_searched_field_is_refused_not_lost(tiny_data, tmp_path):
    """--precision with precision searched: every trial would draw its own, so the flag would be silently lost."""
    from mutransfer._study.files import load_study as load_with_flags

    path = _study(tmp_path, tiny_data, "tpe", precision={"type": "choice", "values": ["fp32", "bf16"]})
    with pytest.raises(UserInputError, match=r"search_space.precision: searched, so --precision .* drop --precision"):
        load_with_flags(path, {"precision": "bf16"})
    study, _ = load_with_flags(path, {"epochs": 1})  # a flag on a field not searched: fine
    assert study.budget.epochs == 1
