"""The attention operators as first-class citizens of the service: studies, models, transfer, train CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
import yaml

from mutransfer._study import parse_study
from mutransfer.errors import UserInputError

ATTENTION = ("galerkin", "ono", "gnot")


def attention_mapping(operator="galerkin", problem="darcy", **top) -> dict:
    m = {
        "name": f"{operator}-width",
        "problem": {"name": problem, "n_train": 8, "n_test": 4},
        "operator": {"type": operator, "width": 8, "layers": 1, "heads": 2},
        "target_width": 32,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
    }
    if problem == "darcy":
        m["problem"]["resolution"] = 16
        m["problem"]["generated_resolution"] = 31
    m.update(top)
    return m


def study_of(mapping):
    return parse_study(mapping, "test")


def error_of(mapping) -> str:
    with pytest.raises(UserInputError) as info:
        study_of(mapping)
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- studies


@pytest.mark.parametrize("operator", ATTENTION)
@pytest.mark.parametrize("problem", ["darcy", "darcy_mesh"])
def test_attention_study_resolves_width_transfer_and_round_trips(operator, problem):
    study = study_of(attention_mapping(operator, problem))
    assert (study.operator.width, study.target_width, study.width_parametrization) == (8, 32, "mup")
    assert study.proxy_K is None and study.target_K is None and study.scales_width and not study.scales_K
    assert study.point_problem == (problem == "darcy_mesh")
    again = parse_study(yaml.safe_load(study.to_yaml()), "round trip")
    assert again == study


def test_fno_study_may_scale_width_and_K_or_width_alone():
    base = {
        "name": "fno-both",
        "problem": {"name": "burgers", "resolution": 64, "generated_resolution": 128},
        "operator": {"type": "fno", "width": 16},
        "proxy_K": 4,
        "target_K": 8,
        "target_width": 64,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
    }
    both = study_of(base)
    assert both.scales_K and both.scales_width and both.width_parametrization == "mup"
    width_only = study_of({**base, "target_K": 4})
    assert width_only.scales_width and not width_only.scales_K
    no_width = study_of({k: v for k, v in base.items() if k != "target_width"})
    assert no_width.target_width == 16 and no_width.width_parametrization == "standard"


@pytest.mark.parametrize(
    "change, fragments",
    [
        (lambda m: m.update(proxy_K=4), ["proxy_K: applies to fno only"]),
        (lambda m: m.update(parametrization="mup"), ["parametrization: applies to fno only", "width_parametrization"]),
        (lambda m: m.update(target_width=8), ["target_width:", "scales in width only"]),
        (lambda m: m.update(target_width=4), ["target_width: must be >= operator.width"]),
        (lambda m: m.update(target_width=33), ["target_width: 33 is not divisible by operator.heads 2"]),
        (lambda m: m["operator"].update(padding=2), ["operator.padding: applies to fno only"]),
        (lambda m: m["operator"].update(options={"bogus": 1}), ["operator.options", "bogus"]),
        (
            lambda m: m["operator"].update(options={"attention_type": "nope"}),
            ["operator.options", "attention_type 'nope'"],
        ),
        (
            lambda m: m["operator"].update(options={"width": 64}),
            ["operator.options.width", "set operator.width instead"],
        ),
        (
            lambda m: m["search_space"].update(init_scale={"type": "loguniform", "low": 0.1, "high": 1}),
            ["search_space.init_scale: acts on FNO's spectral weights only"],
        ),
        (
            lambda m: m.update(training={"clip_value": 0.1}),
            ["training.clip_value: acts on FNO's spectral weights only"],
        ),
        (lambda m: m.update(width_parametrization="muP"), ["width_parametrization: 'muP' is unknown"]),
    ],
)
def test_bad_attention_study_fields_give_one_line_errors(change, fragments):
    m = attention_mapping()
    change(m)
    message = error_of(m)
    for fragment in fragments:
        assert fragment in message, message


def test_fno_on_a_point_set_problem_is_refused():
    m = {
        "name": "x",
        "problem": {"name": "darcy_mesh"},
        "operator": {"type": "fno"},
        "proxy_K": 4,
        "target_K": 8,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
    }
    assert "operator.type: fno needs a grid" in error_of(m)


def test_point_set_problem_has_no_resolution():
    m = attention_mapping(problem="darcy_mesh")
    m["problem"]["resolution"] = 16
    assert "problem.resolution:" in error_of(m)


def test_sweep_flags_override_widths_and_are_reported(tmp_path):
    from mutransfer._study import load_study

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(attention_mapping()))
    study, applied = load_study(path, {"proxy_width": 4, "target_width": 16})
    assert (study.operator.width, study.target_width) == (4, 16)
    assert {o.flag for o in applied} == {"--proxy-width", "--target-width"}
    with pytest.raises(UserInputError, match=r"proxy_K: applies to fno only .*\(set by --proxy-K\)"):
        load_study(path, {"proxy_K": 4})


# --------------------------------------------------------------------------- models from studies


def _fake_data(study, n=3):
    """SplitData-like tensors with the study's layout (grid, or packed point sets with varying counts)."""
    from types import SimpleNamespace

    from operators.adapters import pack_points

    g = torch.Generator().manual_seed(0)
    if study.point_problem:
        coords = torch.rand(n, 20, 2, generator=g)
        features = torch.rand(n, 20, 1, generator=g) * 9 + 3
        mask = torch.arange(20).expand(n, 20) < torch.tensor([[20], [13], [7]])[:n]
        x = pack_points(coords, features, mask)
        y = torch.where(mask.unsqueeze(-1), torch.rand(n, 20, 1, generator=g), torch.zeros(()))
    else:
        x = torch.rand(n, 16, 16, 1, generator=g) * 9 + 3
        y = torch.rand(n, 16, 16, 1, generator=g) * 0.01
    return SimpleNamespace(train_x=x, train_y=y, test_x=x, test_y=y)


@pytest.mark.parametrize("operator", ATTENTION)
@pytest.mark.parametrize("problem", ["darcy", "darcy_mesh"])
def test_study_models_rebuild_from_config_and_apply_width_mup(operator, problem):
    from mutransfer._study.models import model_for
    from operators import optimizer_param_groups
    from operators.adapters import GridPointSet, PackedPointSet

    study = study_of(attention_mapping(operator, problem))
    data = _fake_data(study)
    torch.manual_seed(0)
    proxy = model_for(study, data, target=False)
    target = model_for(study, data, target=True)
    assert isinstance(proxy, PackedPointSet if study.point_problem else GridPointSet)
    assert proxy.operator.config["width"] == 8 and target.operator.config["width"] == 32
    assert target.operator.config["base_width"] == 8
    out = target(data.train_x)
    assert out.shape == data.train_y.shape and torch.isfinite(out).all()
    if study.point_problem:  # zero at padded points
        assert (out[~(data.train_x[..., -1] > 0.5)] == 0).all()
    rebuilt = type(target)(**json.loads(json.dumps(target.config)))
    rebuilt.load_state_dict(target.state_dict())
    target.eval(), rebuilt.eval()
    torch.testing.assert_close(rebuilt(data.train_x), target(data.train_x))
    lrs = {g["name"]: g["lr"] for g in optimizer_param_groups(target, 1e-3)}
    assert lrs["hidden"] == pytest.approx(1e-3 * 8 / 32) and lrs["other"] == pytest.approx(1e-3)


@pytest.mark.parametrize("operator", ATTENTION)
def test_normalization_keeps_physical_units(operator):
    """The adapter standardises with the training statistics: same as feeding the operator standardised data."""
    from operators.adapters import GridPointSet, normalization_from

    study = study_of(attention_mapping(operator))
    data = _fake_data(study)
    norm = normalization_from(data.train_x, data.train_y)
    assert norm["in_mean"][0] == pytest.approx(float(data.train_x.double().mean()), rel=1e-6)
    assert norm["out_std"][0] == pytest.approx(float(data.train_y.double().std(unbiased=False)), rel=1e-6)
    config = dict(coord_dim=2, in_channels=1, out_channels=1, width=8, layers=1, heads=2)
    torch.manual_seed(0)
    plain = GridPointSet(2, operator, config)
    torch.manual_seed(0)
    normed = GridPointSet(2, operator, config, norm)
    x = data.train_x
    plain.eval(), normed.eval()
    expected = plain((x - norm["in_mean"][0]) / norm["in_std"][0]) * norm["out_std"][0] + norm["out_mean"][0]
    torch.testing.assert_close(normed(x), expected)


@pytest.mark.parametrize("operator", ATTENTION)
def test_packed_padding_gives_each_sample_its_own_result(operator):
    """A padded packed batch gives, at real points, what each sample gives alone (normalization included)."""
    from operators.adapters import PackedPointSet, normalization_from

    study = study_of(attention_mapping(operator, "darcy_mesh"))
    data = _fake_data(study)
    norm = normalization_from(data.train_x, data.train_y, packed_coord_dim=2)
    torch.manual_seed(0)
    model = PackedPointSet(
        2, operator, dict(coord_dim=2, in_channels=1, out_channels=1, width=8, layers=2, heads=2), norm
    )
    model.eval()
    batch = model(data.train_x)
    for i in range(3):
        mask = data.train_x[i, :, -1] > 0.5
        alone = model(data.train_x[i : i + 1, mask])
        torch.testing.assert_close(batch[i, mask], alone[0], rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- transfer rows


def test_width_transfer_rows_follow_tensor_programs_v():
    from mutransfer._sweep.runner import transfer

    study = study_of(attention_mapping("galerkin"))
    record, hp = transfer(
        study,
        {
            "hp": {
                "lr": 2e-3,
                "batch_size": 20,
                "beta1": 0.9,
                "beta2": 0.999,
                "weight_decay": 0.0,
                "clip_value": None,
                "init_scale": 1.0,
            }
        },
    )
    rows = {q["name"]: q for q in record["quantities"]}
    assert rows["master_lr"]["target"] == 2e-3 and hp["lr"] == 2e-3
    assert rows["hidden_lr"]["target"] == pytest.approx(2e-3 * 8 / 32) and rows["hidden_lr"]["factor"] == pytest.approx(
        0.25
    )
    assert rows["output_multiplier"]["target"] == pytest.approx(0.25)
    assert rows["attention_scale"]["factor"] == pytest.approx(0.5)
    assert "init_scale" not in rows and "spectral_lr" not in rows  # FNO-only quantities are left out
    assert (
        record["proxy_width"] == 8
        and record["target_width"] == 32
        and "width_proxy=8 -> width_target=32" in record["table"]
    )


def test_fno_k_and_width_transfer_compose():
    from mutransfer._sweep.runner import transfer
    from operators.parametrization import transfer_lr_factor

    study = study_of(
        {
            "name": "fno-both",
            "problem": {"name": "burgers", "resolution": 64, "generated_resolution": 128},
            "operator": {"type": "fno", "width": 16},
            "proxy_K": 4,
            "target_K": 16,
            "target_width": 64,
            "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
        }
    )
    record, _ = transfer(
        study,
        {
            "hp": {
                "lr": 1e-3,
                "batch_size": 20,
                "beta1": 0.9,
                "beta2": 0.999,
                "weight_decay": 0.0,
                "clip_value": None,
                "init_scale": 1.0,
            }
        },
    )
    rows = {q["name"]: q for q in record["quantities"]}
    assert rows["spectral_lr"]["factor"] == pytest.approx(transfer_lr_factor(4, 16) * 16 / 64)
    assert rows["spectral_init_variance"]["factor"] == pytest.approx(math.log(4) / math.log(16) * 16 / 64)
    assert rows["hidden_lr"]["factor"] == pytest.approx(0.25)


# --------------------------------------------------------------------------- train CLI


def _cli(*args, cwd, env_cache):
    import os

    env = {**os.environ, "MUTRANSFER_CACHE": str(env_cache)}
    return subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def _refused(capsys, monkeypatch, *args, cwd, env_cache) -> tuple[int, str]:
    """(exit code, stderr) of a `mutransfer` call that is refused before any work, run in this process (a
    subprocess costs ~5 s of imports; the refusals are the same)."""
    from mutransfer.cli.main import main

    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(env_cache))
    capsys.readouterr()
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def mesh_file(tmp_path_factory):
    from mutransfer.data._pointclouds import generate_darcy_mesh, write_point_dataset

    path = tmp_path_factory.mktemp("mesh") / "mesh.h5"
    write_point_dataset(path, generate_darcy_mesh(24, 17, seed=0, progress=False, points_min=40, points_max=80))
    return path


@pytest.mark.parametrize("operator", ATTENTION)
def test_train_cli_runs_attention_operators_on_an_irregular_mesh(operator, mesh_file, tmp_path):
    proc = _cli(
        "train",
        "--problem",
        "darcy_mesh",
        "--data",
        str(mesh_file),
        "--operator",
        operator,
        "--width",
        "8",
        "--layers",
        "1",
        "--heads",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--json",
        "--no-progress",
        "--width-parametrization",
        "mup",
        "--base-width",
        "4",
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        cwd=tmp_path,
        env_cache=tmp_path / "cache",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["result"]["status"] == "completed" and math.isfinite(summary["result"]["test_error"])
    assert summary["model"]["operator"] == operator and summary["model"]["operator_config"]["base_width"] == 4
    assert summary["source"]["format"] == "mutransfer-points"
    # the checkpoint holds the adapter's config; it loads with weights_only=True and rebuilds the model
    from operators.adapters import PackedPointSet

    state = torch.load(tmp_path / "ck" / "checkpoint.pt", weights_only=True)
    model = PackedPointSet(**state["model_config"])
    model.load_state_dict(state["model"])


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--problem", "darcy_mesh", "--data", "MESH", "--operator", "fno"], "--operator fno needs a grid"),
        (
            ["--problem", "darcy_mesh", "--data", "MESH", "--operator", "ono", "--resolution", "16"],
            "--resolution: darcy_mesh is a point-set problem",
        ),
        (
            ["--problem", "darcy", "--data", "MESH", "--operator", "ono"],
            "holds point sets (an irregular mesh); pass --problem darcy_mesh",
        ),
        (["--operator", "galerkin", "--modes", "8"], "--modes applies to fno only"),
        (["--operator", "ono", "--clip-value", "0.1"], "--clip-value applies to fno only"),
        (["--operator", "fno", "--heads", "2"], "--heads applies to the attention operators"),
        (["--operator", "galerkin", "--option", "bogus=1"], "bogus"),
        (["--operator", "galerkin", "--option", "nonsense"], "--option 'nonsense': write KEY=VALUE"),
        (["--operator", "galerkin", "--option", "width=64"], "--option width: has its own flag"),
        (["--operator", "galerkin", "--width-parametrization", "mup"], "needs --base-width"),
        (["--operator", "galerkin", "--base-width", "16"], "--base-width applies to --width-parametrization mup only"),
        (["--operator", "galerkin", "--heads", "3"], "width 32 is not divisible by heads 3"),
    ],
)
def test_train_cli_bad_operator_flags_exit_2_with_one_line(args, fragment, mesh_file, tmp_path, capsys, monkeypatch):
    args = [str(mesh_file) if a == "MESH" else a for a in args]
    cache = tmp_path / "cache"
    code, err = _refused(
        capsys, monkeypatch, "train", *args, "--epochs", "1", "--no-progress", cwd=tmp_path, env_cache=cache
    )
    assert code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], err


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--modes", "8"], "--modes applies to fno only"),
        (["--option", "bogus=1"], "bogus"),
        (["--heads", "3"], "width 32 is not divisible by heads 3"),
    ],
)
def test_a_flag_that_does_not_apply_is_refused_before_any_data_is_made(tmp_path, capsys, monkeypatch, flags, fragment):
    """`train --operator galerkin --modes 8` (or an option the operator does not take, or heads that do not divide
    the width) with no --data: refused before the default dataset is generated (it was generated first, 500 Darcy
    solves, then refused)."""
    cache = tmp_path / "cache"
    code, err = _refused(capsys, monkeypatch, "train", "--operator", "galerkin", *flags, cwd=tmp_path, env_cache=cache)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    assert not list(cache.rglob("*.h5")), "data was made before the flag was refused"


def _attention_study_file(tmp_path, operator="ono"):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(attention_mapping(operator)))
    return path


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["landscape", "--modes", "4", "8", "--lrs", "1e-3", "1e-2", "1e-1"],
            "has no Fourier modes; vary the width with --widths",
        ),
        (
            ["landscape", "--widths", "8", "9", "--lrs", "1e-3", "1e-2", "1e-1"],
            "--widths: 9 is not divisible by operator.heads 2",
        ),
        (["landscape", "--widths", "8", "--lrs", "1e-3", "1e-2", "1e-1"], "give at least two values of widths"),
        (["sweep", "--coord-check"], "--coord-check measures the spectral layers' update across K"),
        (["sweep", "--proxy-K", "4"], "proxy_K: applies to fno only"),
    ],
)
def test_sweep_and_landscape_refuse_what_attention_studies_cannot_do(args, fragment, tmp_path, capsys, monkeypatch):
    study = _attention_study_file(tmp_path)
    code, err = _refused(capsys, monkeypatch, *args, "--study", study, cwd=tmp_path, env_cache=tmp_path / "cache")
    assert code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "cache").exists()  # refused before any work


@pytest.mark.slow
@pytest.mark.parametrize("operator", ATTENTION)
def test_attention_operators_learn_darcy_on_random_point_sets(operator, tmp_path):
    """30 epochs on 120 irregular-mesh samples (150-250 nodes of a 29x29 grid): relative L2 below 0.2 (from ~1)."""
    from mutransfer._study.models import model_for
    from mutransfer._training import TrainConfig, train
    from mutransfer.data._pointclouds import generate_darcy_mesh, load_point_split, write_point_dataset

    path = write_point_dataset(
        tmp_path / "mesh.h5", generate_darcy_mesh(150, 29, seed=0, progress=False, points_min=150, points_max=250)
    )
    data = load_point_split(path, n_train=120, n_test=30)
    m = attention_mapping(operator, "darcy_mesh")
    m["problem"] = {"name": "darcy_mesh", "data": str(path), "n_train": 120, "n_test": 30}
    m["operator"].update(width=32, layers=2, heads=4)
    m["target_width"] = 64
    study = parse_study(m, "learning")
    torch.manual_seed(0)
    model = model_for(study, data, target=False)
    result = train(model, data, TrainConfig(lr=3e-3, batch_size=10, epochs=30, schedule="onecycle", progress=False))
    assert result.status == "completed"
    assert result.history[0].test_error > 0.3 and result.test_error < 0.2, result.test_error
