"""The attention operators' memory plan (operators.planning_attention) and the checks that use it before allocation.

Parameters exact against the built models; the training peak against the measured peak of
live tensors (within 0.8-1.2 ×); growth in the right order with the width; the refusals of
`train`, of a sweep study (proxy, target, padding) and the cases where they pass.
"""

from __future__ import annotations

import pytest
import torch
import yaml

from mutransfer.errors import UserInputError
from operators.adapters import GridPointSet, point_set_config
from operators.errors import OperatorConfigError
from operators.planning_attention import plan_attention
from operators.registry import get_family

#: per family, option sets that change the parameter formula
OPTIONS = {
    "galerkin": [{}, {"coord_in_heads": False}, {"ffn_ratio": 3, "attention_type": "fourier"}],
    "ono": [
        {},
        {"nn_block": "linear", "value_projection": False},
        {"orthogonalization": "layernorm", "eigenfunctions": 5, "ffn_ratio": 3},
    ],
    "gnot": [{}, {"experts": 3, "theta_dim": 2}, {"theta_dim": 3, "theta_mode": "query"}, {"in_channels": [1, 2]}],
}
SIZES = [(8, 1, 2, 1, 1), (16, 3, 4, 2, 3), (24, 2, 3, 1, 0)]  # width, layers, heads, coord_dim, in_channels


@pytest.mark.parametrize("operator, options", [(f, o) for f, opts in OPTIONS.items() for o in opts])
def test_parameter_counts_are_exact(operator, options):
    for width, layers, heads, coord_dim, in_channels in SIZES:
        config = {
            **dict(
                coord_dim=coord_dim, in_channels=in_channels, out_channels=2, width=width, layers=layers, heads=heads
            ),
            **options,
        }
        built = sum(p.numel() for p in get_family(operator).make(config).parameters())
        assert plan_attention(operator, config, points=10).total_params == built, (width, layers, heads)


#: (width, layers, points, batch, options): activation-bound and weight-bound steps, and the n×n reference
PEAK_CASES = [(16, 2, 512, 4, {}), (64, 1, 64, 1, {}), (32, 2, 256, 2, {"attention_impl": "quadratic"})]


@pytest.mark.parametrize("operator", ["galerkin", "ono", "gnot"])
@pytest.mark.parametrize(
    "case", PEAK_CASES, ids=lambda c: f"w{c[0]}-L{c[1]}-n{c[2]}-{c[4].get('attention_impl', 'linear')}"
)
def test_estimate_is_within_20_percent_of_the_measured_peak(operator, case):
    """One real Adam step on the CPU, its peak of live tensors (mutransfer._diagnostics.peak_memory) against the plan."""
    from mutransfer._diagnostics.peak_memory import measure_training_peak

    width, layers, points, batch, options = case
    torch.manual_seed(0)
    config = dict(coord_dim=1, in_channels=1, out_channels=1, width=width, layers=layers, heads=4, **options)
    measured = measure_training_peak(GridPointSet(1, operator, config), batch, (points,))["peak_bytes"]
    planned = plan_attention(operator, config, points=points, batch=batch, device="cpu").total_bytes
    assert 0.8 <= planned / measured <= 1.2, f"planned {planned}, measured {measured}"


@pytest.mark.parametrize("operator", ["galerkin", "ono", "gnot"])
def test_the_estimate_grows_as_width_squared_in_parameters_and_linearly_in_activations(operator):
    config = dict(coord_dim=2, in_channels=1, out_channels=1, layers=4, heads=4)
    small, large = (plan_attention(operator, dict(config, width=w), points=4096, batch=8) for w in (1024, 2048))
    assert 3.9 < large.total_params / small.total_params <= 4.0  # w² (the w-linear terms fade)
    assert 1.9 < large.activations_bytes / small.activations_bytes <= 2.0  # B·n·w·L
    quadratic = dict(config, width=64, attention_impl="quadratic")
    n, n2 = (plan_attention(operator, quadratic, points=p).activations_bytes for p in (4096, 8192))
    assert n2 / n > 3.5  # the n×n matrices dominate: points²


def test_bad_sizes_are_one_line_errors():
    with pytest.raises(OperatorConfigError, match="eigenfunctions 'x': must be an integer >= 1"):
        plan_attention("ono", dict(coord_dim=1, in_channels=1, out_channels=1, eigenfunctions="x"), points=8)
    with pytest.raises(OperatorConfigError, match="unknown argument 'bogus'"):
        plan_attention("gnot", dict(coord_dim=1, in_channels=1, out_channels=1, bogus=1), points=8)
    with pytest.raises(OperatorConfigError, match="not an attention operator"):
        plan_attention("fno", {}, points=8)


def test_check_before_building_refuses_an_attention_model_over_the_limit_and_passes_one_under_it():
    from mutransfer._training.memory import check_before_building

    config = point_set_config(
        "galerkin", coord_dim=1, input_channels=1, output_channels=1, packed=False, width=64, layers=2, heads=4
    )
    plan = check_before_building(config, (256,), 8, "cpu", limit=2**30)
    assert plan.total_params == sum(
        p.numel() for p in GridPointSet(1, "galerkin", config["operator_config"]).parameters()
    )
    with pytest.raises(
        UserInputError,
        match=r"Galerkin Transformer width 64, 2 layers, 4 heads, 256 points, batch 8, "
        r"fp32 needs .* but the memory limit set \(--device-memory\) is .*; use a "
        r"batch size of at most \d+, .*a smaller width or fewer layers",
    ):
        check_before_building(config, (256,), 8, "cpu", limit=plan.total_bytes - 1)


def test_the_trainer_checks_a_built_attention_model_too(monkeypatch):
    from mutransfer._training.memory import check_model_fits

    model = GridPointSet(1, "ono", dict(coord_dim=1, in_channels=1, out_channels=1, width=16, layers=1, heads=4))
    assert check_model_fits(model, (64,), 4, "cpu", limit=2**30).operator == "ono"
    with pytest.raises(UserInputError, match="one Adam step of ONO width 16"):
        check_model_fits(model, (64,), 4, "cpu", limit=2**16)


def _attention_study(tmp_path, width: int, target_width: int):
    from mutransfer._study import load_study

    study = {
        "name": "attn",
        "problem": {"name": "burgers", "resolution": 64, "n_train": 16, "n_test": 4},
        "operator": {"type": "galerkin", "width": width, "layers": 2, "heads": 4},
        "target_width": target_width,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-3, "high": 1e-2}},
    }
    path = tmp_path / "attn.yaml"
    path.write_text(yaml.safe_dump(study))
    return load_study(path)[0]


def test_a_sweep_study_with_an_attention_operator_is_planned(tmp_path, monkeypatch):
    """The proxy and the target of a Galerkin study against the memory; a width of 10**5 is loaded without building it."""
    from mutransfer._study.memory import check_study_memory

    monkeypatch.setenv("MUTRANSFER_DEVICE_MEMORY", "1GiB")
    check_study_memory(_attention_study(tmp_path, 16, 64), 2, gpus=0)  # a few MiB each
    with pytest.raises(UserInputError, match="target .*Galerkin Transformer width 2048"):
        check_study_memory(_attention_study(tmp_path, 16, 2048), 2, gpus=0)  # the proxy fits, the target does not
    huge = _attention_study(tmp_path, 100_000, 200_000)  # its proxy holds 8·10^10 weights: never built
    with pytest.raises(UserInputError, match=r"proxy trial .*Galerkin Transformer width 100000.* needs .* TiB"):
        check_study_memory(huge, 2, gpus=0)


def _quick_study_file(tmp_path, padding: int):
    from mutransfer._study import default_study_text

    study = yaml.safe_load(default_study_text())
    study["operator"]["padding"] = padding
    path = tmp_path / "pad.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def test_sweep_padding_is_checked_against_the_grid(tmp_path):
    from mutransfer._study import load_study
    from mutransfer._study.memory import check_study_padding

    study = load_study(_quick_study_file(tmp_path, 128))[0]
    assert study.problem.resolution == 128
    check_study_padding(study)  # padding up to the grid itself is accepted
    with pytest.raises(
        UserInputError, match=r"operator.padding: padding 129 is more than the grid \(128,\); use padding <= 128"
    ):
        check_study_padding(load_study(_quick_study_file(tmp_path, 129))[0])


def test_sweep_cli_refuses_a_study_with_too_much_padding_before_anything_exists(tmp_path, monkeypatch, capsys):
    from mutransfer.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    _quick_study_file(tmp_path, 100_000)
    rc = main(["sweep", "--study", "pad.yaml"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "operator.padding: padding 100000 is more than the grid" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pad.yaml"]  # no runs folder, store or data
