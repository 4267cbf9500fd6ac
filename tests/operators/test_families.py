"""A new operator family is one ``register_family`` call: studies, the one model builder, the plan and `train` follow.

The toy family (a pointwise MLP on grids, width axis only) is registered from inside
the test through operators.family's public API and removed afterwards.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from itertools import pairwise

import pytest
import torch
from torch import nn

from mutransfer._study import parse_study
from mutransfer._study.memory import check_study_memory
from mutransfer._study.models import build_model, model_spec
from mutransfer.cli.main import main
from mutransfer.errors import UserInputError
from mutransfer.serving._artifact import ModelCard, read_model_dir, write_model_dir
from operators.family import (
    OPERATORS,
    ModelSpec,
    OperatorFamily,
    family_of_config,
    get_family,
    register_family,
    unregister_family,
)
from operators.planning import FLOAT_BYTES
from operators.transfer import transfer


class PointwiseMLP(nn.Module):
    """(B, *grid, C_in) -> (B, *grid, C_out): the same MLP at every grid point."""

    def __init__(self, in_channels: int, out_channels: int, width: int, layers: int):
        super().__init__()
        sizes = [in_channels] + [width] * layers + [out_channels]
        self.net = nn.Sequential(*[m for a, b in pairwise(sizes) for m in (nn.Linear(a, b), nn.GELU())][:-1])
        self.config = {
            "operator": "toy",
            "in_channels": in_channels,
            "out_channels": out_channels,
            "width": width,
            "layers": layers,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass(frozen=True)
class ToyPlan:
    """What mutransfer._training.memory.check_fits reads from a plan."""

    config: dict
    batch: int
    points: int
    precision: str = "fp32"

    @property
    def total_params(self) -> int:
        c = self.config
        sizes = [c["in_channels"]] + [c["width"]] * c["layers"] + [c["out_channels"]]
        return sum(a * b + b for a, b in pairwise(sizes))

    @property
    def activations_bytes(self) -> int:
        return 2 * self.batch * self.points * self.config["width"] * (self.config["layers"] + 1) * FLOAT_BYTES

    @property
    def total_bytes(self) -> int:
        return 4 * self.total_params * FLOAT_BYTES + self.activations_bytes

    label = "toy MLP"
    smaller = "a smaller width"

    def fits(self, memory: int) -> bool:
        return self.total_bytes <= memory

    def replan(self, **changes) -> ToyPlan:
        return replace(self, **changes)


def _configure(spec: ModelSpec) -> dict:
    return {
        "operator": "toy",
        "in_channels": spec.input_channels,
        "out_channels": spec.output_channels,
        "width": spec.width,
        "layers": spec.layers,
    }


TOY = OperatorFamily(
    "toy",
    "Toy MLP",
    PointwiseMLP,
    axes=("width",),
    inputs=("grid",),
    configure=_configure,
    construct=lambda c: PointwiseMLP(c["in_channels"], c["out_channels"], c["width"], c["layers"]),
    planner=lambda c, *, grid, batch, precision, weight_decay, device: ToyPlan(c, batch, math.prod(grid), precision),
    owns=lambda c: isinstance(c, dict) and c.get("operator") == "toy",
)


@pytest.fixture
def toy():
    register_family(TOY)
    yield TOY
    unregister_family("toy")


def _study(**top):
    mapping = {
        "name": "toy-width",
        "problem": {"name": "darcy", "n_train": 8, "n_test": 4, "resolution": 16, "generated_resolution": 31},
        "operator": {"type": "toy", "width": 8, "layers": 2},
        "target_width": 32,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
        **top,
    }
    return parse_study(mapping, "test")


def test_a_registered_family_resolves_builds_plans_and_transfers(toy, monkeypatch):
    study = _study()
    assert study.family is toy and study.proxy_modes is None and study.scales_width and not study.scales_K
    assert study.model_text(True) == "toy width 32"
    model = build_model(study, input_channels=1, output_channels=1)
    assert isinstance(model, PointwiseMLP) and model.config["width"] == 8
    plan = study.family.plan(model_spec(study), grid=(16, 16), batch=2)
    assert plan.total_params == sum(p.numel() for p in model.parameters())
    monkeypatch.setenv("MUTRANSFER_DEVICE_MEMORY", "1GiB")
    check_study_memory(study, 1, gpus=0)  # the driver's memory check plans it through the family
    record = transfer(study.transfer_scaling(), 1e-3)
    assert record.lr_factor == pytest.approx(8 / 32)  # width-muP's hidden LR rule, from the family's axes
    with pytest.raises(Exception, match="acts on FNO's spectral weights only"):
        _study(training={"clip_value": 0.1})  # clip_value does not apply: no K axis


def test_train_runs_a_registered_family_one_epoch(toy, tmp_path, capsys):
    data = tmp_path / "darcy.h5"
    assert (
        main(["data", "generate", "darcy", "--n", "12", "--resolution", "13", "--out", str(data), "--no-progress"]) == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "--operator",
                "toy",
                "--problem",
                "darcy",
                "--data",
                str(data),
                "--width",
                "8",
                "--layers",
                "2",
                "--epochs",
                "1",
                "--batch-size",
                "4",
                "--n-train",
                "8",
                "--n-test",
                "4",
                "--device",
                "cpu",
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"]["operator"] == "toy" and summary["result"]["epochs_completed"] == 1
    assert main(["train", "--operator", "toy", "--problem", "darcy", "--data", str(data), "--heads", "2"]) == 2
    assert "--heads applies to the attention operators" in capsys.readouterr().err


def _grid_card(model: nn.Module, operator: str) -> ModelCard:
    """The card of a Darcy model of ``operator`` on a 16 x 16 grid, one channel in and out."""
    return ModelCard(
        model_class=type(model).__name__,
        model_config=model.config,
        problem="darcy",
        dim=2,
        point_problem=False,
        operator=operator,
        resolution=16,
        time_resolution=None,
        input_shape=[16, 16, 1],
        output_shape=[16, 16, 1],
        study=operator,
    )


def test_a_saved_model_of_a_registered_family_loads_back(toy, tmp_path):
    """`evaluate`/`predict` rebuild a saved model from the classes the families declare (no table to edit)."""
    study = _study()
    model = build_model(study, input_channels=1, output_channels=1)
    write_model_dir(tmp_path / "model", _grid_card(model, "toy"), model.state_dict())
    loaded, _ = read_model_dir(tmp_path / "model")
    x = torch.randn(2, 16, 16, 1)
    assert isinstance(loaded, PointwiseMLP) and torch.equal(loaded(x), model.eval()(x))
    unregister_family("toy")  # a model of a family this process does not know: one line naming the class
    with pytest.raises(UserInputError, match="no registered operator family owns its model_config"):
        read_model_dir(tmp_path / "model")
    register_family(TOY)


def test_unregistered_after_the_test():
    assert "toy" not in OPERATORS


@pytest.mark.parametrize(
    "name, packed",
    [("fno", False), ("galerkin", False), ("galerkin", True), ("ono", True), ("gnot", False), ("gnot", True)],
)
def test_a_models_own_config_rebuilds_it_through_its_family(name, packed):
    """What `evaluate` relies on: family_of_config(model.config).build(model.config) is the same model class and config."""

    model = get_family(name).build(
        ModelSpec(dim=2, input_channels=5, output_channels=1, width=16, layers=2, packed=packed, modes=4)
    )
    rebuilt = family_of_config(model.config).build(model.config)
    assert type(rebuilt) is type(model) and rebuilt.config == model.config


@pytest.mark.parametrize(
    "name, packed",
    [("fno", False), ("galerkin", False), ("galerkin", True), ("ono", True), ("gnot", False), ("gnot", True)],
)
def test_a_model_folder_of_every_family_loads_back(name, packed, tmp_path):
    """read_model_dir runs the rebuilt model once on a zero sample of the card's input_shape, which must give its
    output_shape: for a packed point set (P, d + C + 1) the sample's points are all real (a mask of zeros is refused by
    the operators). Each family's folder, grid or points, loads and predicts as the model it was written from."""
    sample = [12, 2 + 1 + 1] if packed else [8, 8, 1]  # points: d=2 coords, 1 feature, the mask; grids: one field
    model = get_family(name).build(
        ModelSpec(dim=2, input_channels=sample[-1], output_channels=1, width=16, layers=2, packed=packed, modes=4)
    )
    card = ModelCard(
        model_class=type(model).__name__,
        model_config=model.config,
        problem="darcy_mesh" if packed else "darcy",
        dim=2,
        point_problem=packed,
        operator=name,
        resolution=None if packed else 8,
        time_resolution=None,
        input_shape=sample,
        output_shape=[sample[0], 1] if packed else [8, 8, 1],
        study="families",
    )
    write_model_dir(tmp_path / "model", card, model.state_dict())
    loaded, _ = read_model_dir(tmp_path / "model")
    x = torch.rand(2, *sample)
    if packed:
        x[..., -1] = 1.0
    with torch.no_grad():
        assert torch.equal(loaded(x), model.eval()(x))


class NoMetaMLP(PointwiseMLP):
    """A user's model whose construction reads a weight's value (an operation the meta device has no value for)."""

    def __init__(self, in_channels: int, out_channels: int, width: int, layers: int):
        super().__init__(in_channels, out_channels, width, layers)
        self.config["operator"] = "nometa"
        self.scale = float(next(self.parameters()).detach().abs().max())  # fails on the meta device


def _no_plan(c, **kwargs):
    raise NotImplementedError("a user's family without a planner")


NO_META = OperatorFamily(
    "nometa",
    "a user's MLP without meta kernels or planner",
    NoMetaMLP,
    axes=("width",),
    inputs=("grid",),
    configure=_configure,
    construct=lambda c: NoMetaMLP(c["in_channels"], c["out_channels"], c["width"], c["layers"]),
    planner=_no_plan,
    owns=lambda c: isinstance(c, dict) and c.get("operator") == "nometa",
)


def test_a_model_that_cannot_be_planned_is_built_within_a_budget(tmp_path):
    """A model neither its family's planner nor the meta device can size (a user's) was built as its config.json said:
    `width: 10^6` asked terabytes. It is now built under an address-space budget (4x its weights file + 1 GiB,
    mutransfer.serving._artifact._address_space_budget): the edited folder is one line; the folder as written loads."""
    import json

    register_family(NO_META)
    try:
        model = NoMetaMLP(1, 1, 8, 2)
        write_model_dir(tmp_path / "model", _grid_card(model, "nometa"), model.state_dict())
        loaded, _ = read_model_dir(tmp_path / "model")
        assert isinstance(loaded, NoMetaMLP)
        config = json.loads((tmp_path / "model" / "config.json").read_text())
        config["model_config"]["width"] = 10**6  # 10^12 weights: 4 TB
        (tmp_path / "model" / "config.json").write_text(json.dumps(config))
        with pytest.raises(UserInputError, match="describes a model that needs more than 1,024 MiB to build"):
            read_model_dir(tmp_path / "model")
    finally:
        unregister_family("nometa")
