"""Study files: schema, one-line validation errors, defaults, CLI overrides (light tests, no Ray)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from mutransfer._study import (
    SEARCHABLE,
    default_study_text,
    load_study,
    parse_study,
)
from mutransfer.errors import UserInputError
from operators.family import unregister_family
from tests.repo_paths import ROOT
from tests.sweep_helpers import K_ONLY_STUDY, k_only_study_text

STUDIES = ROOT / "studies"


def quick_mapping() -> dict:
    """The K-only quick study (the fixture these checks were written for; the default's proxy grid would
    refuse a large proxy K before the check a test aims at)."""
    return yaml.safe_load(k_only_study_text())


def write(tmp_path, mapping, name="study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(mapping, sort_keys=False) if not isinstance(mapping, str) else mapping)
    return path


def error_of(tmp_path, mapping) -> str:
    path = write(tmp_path, mapping)
    with pytest.raises(UserInputError) as info:
        load_study(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"study {path}: ")
    return message


# --------------------------------------------------------------------------- the shipped studies


def test_embedded_default_is_studies_quick_yaml():
    """The built-in default ships in the package and is byte-identical to studies/quick.yaml."""
    assert default_study_text() == (STUDIES / "quick.yaml").read_text()
    builtin, _ = load_study(None)
    from_file, _ = load_study(STUDIES / "quick.yaml")
    assert builtin == from_file
    assert builtin.source == "quick (built-in)"


def test_default_study_is_package_data():
    from importlib import resources

    text = resources.files("mutransfer").joinpath("studies_data", "quick.yaml").read_text()
    assert "name: quick" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "studies_data/*.yaml" in pyproject


def test_quick_study_fits_a_laptop():
    study, _ = load_study(None)
    assert study.problem.name == "burgers" and study.dim == 1
    assert (study.proxy_K, study.target_K) == (6, 24)
    assert study.grid_shape == (128,)  # K = 24 needs N >= 46 on the last axis
    assert study.search.algorithm == "tpe" and study.search.num_trials == 8
    # its window of 8 trains in this process as populations, one after the other, each on the trial's CPUs
    assert study.resources.executor == "population" and study.search.max_concurrent == 8
    assert study.resources.cpus_per_trial <= 2
    assert study.target.num_workers * study.target.cpus_per_worker <= 2


@pytest.mark.parametrize("name", ["burgers_paper.yaml", "darcy_paper.yaml"])
def test_paper_studies_validate(name):
    study, _ = load_study(STUDIES / name)
    assert study.operator.width == 64 and study.operator.layers == 4
    assert study.budget.epochs == study.target.epochs


def test_paper_study_recipes():
    burgers, _ = load_study(STUDIES / "burgers_paper.yaml")
    assert burgers.problem.resolution == 1024 and (burgers.problem.n_train, burgers.problem.n_test) == (800, 200)
    assert burgers.training.batch_size == 20 and burgers.training.step_size == 50 and burgers.target.epochs == 750
    darcy, _ = load_study(STUDIES / "darcy_paper.yaml")
    assert darcy.problem.generated_resolution == 421 and darcy.problem.resolution == 61
    assert (darcy.problem.n_train, darcy.problem.n_test) == (1000, 500)
    assert darcy.training.milestones == [100, 150, 200] and darcy.target.epochs == 300
    assert darcy.grid_shape == (66, 66)


def test_to_yaml_round_trips():
    study, _ = load_study(None)
    again = parse_study(yaml.safe_load(study.to_yaml()), "round trip")
    assert again == study


# --------------------------------------------------------------------------- defaults


def test_minimal_study_gets_problem_defaults(tmp_path):
    path = write(
        tmp_path,
        {
            "name": "mini",
            "problem": {"name": "darcy"},
            "proxy_K": 3,
            "target_K": 8,
            "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
        },
    )
    study, overrides = load_study(path)
    assert overrides == []
    assert study.problem.resolution == 31 and study.problem.generated_resolution == 61
    assert (study.problem.n_train, study.problem.n_test) == (400, 100)
    assert study.padding == 5 and study.grid_shape == (36, 36)
    assert study.search.algorithm == "tpe" and study.tracking.uri is None


def test_numeric_strings_are_accepted_for_floats(tmp_path):
    """YAML 1.1 reads 1e-4 (no dot) as a string; the schema accepts it as a number."""
    m = quick_mapping()
    m["search_space"]["lr"] = {"type": "loguniform", "low": "1e-4", "high": "1e-2"}
    study, _ = load_study(write(tmp_path, m))
    assert study.search_space["lr"].low == pytest.approx(1e-4)


# --------------------------------------------------------------------------- one-line errors


@pytest.mark.parametrize(
    "mutate, fragments",
    [
        (lambda m: m.update(colour="red"), ["colour: unknown key", "use one of: name, problem"]),
        (lambda m: m["budget"].update(epoch=3), ["budget.epoch: unknown key", "epochs"]),
        (lambda m: m["search_space"]["lr"].update(step=2), ["search_space.lr.step: unknown key"]),
        (lambda m: m.update(proxy_K="six"), ["proxy_K: must be an integer", "e.g. 6"]),
        (lambda m: m.update(proxy_K=6.5), ["proxy_K: must be an integer"]),
        (lambda m: m["search"].update(num_trials=True), ["search.num_trials: must be an integer"]),
        (lambda m: m["operator"].update(width=[32]), ["operator.width: must be an integer"]),
        (lambda m: m["training"].update(betas=0.9), ["training.betas: must be a list of two numbers"]),
        (lambda m: m["target"].update(use_gpu="yes"), ["target.use_gpu: must be auto, true or false"]),
        (lambda m: m.update(proxy_K=24), ["proxy_K: must be < target_K (24)"]),
        (
            lambda m: m.update(proxy_K=30, target_K=70),
            ["target_K: modes 70 too large for grid size 128", "resolution 128 + padding 0"],
        ),
        (lambda m: m.update(proxy_K=1), ["proxy_K: must be >= 2"]),
        (lambda m: m.update(search_space={}), ["search_space: is empty", "e.g. search_space"]),
        (lambda m: m.pop("search_space"), ["search_space: is required"]),
        (
            lambda m: m["search_space"].update(momentum={"type": "uniform", "low": 0.1, "high": 0.9}),
            ["search_space.momentum: cannot be searched", "use one of: lr"],
        ),
        (
            lambda m: m["search_space"].update(lr={"type": "loguniform", "low": 0, "high": 1e-2}),
            ["search_space.lr.low: must be > 0, e.g. 1e-4"],
        ),
        (
            lambda m: m["search_space"].update(lr={"type": "loguniform", "low": 1e-2, "high": 1e-3}),
            ["search_space.lr.high: must be > low"],
        ),
        (
            lambda m: m["search_space"].update(lr={"type": "normal", "low": 1e-4, "high": 1e-2}),
            ["search_space.lr.type: 'normal' is unknown"],
        ),
        (
            lambda m: m["search_space"].update(batch_size={"type": "uniform", "low": 1, "high": 4}),
            ["search_space.batch_size.type: 'uniform' is unknown", "choice"],
        ),
        (
            lambda m: m["search_space"].update(batch_size={"type": "choice", "values": [10, 0]}),
            ["search_space.batch_size.values[1]: must be a positive integer"],
        ),
        (
            lambda m: m["search_space"].update(batch_size={"type": "choice", "values": []}),
            ["search_space.batch_size.values: must be a non-empty list"],
        ),
        (
            lambda m: m["search_space"].update(beta2={"type": "uniform", "low": 0.9, "high": 1.0}),
            ["search_space.beta2.high: must be in (0, 1)"],
        ),
        (lambda m: m["problem"].update(name="heat"), ["problem.name: 'heat' is unknown", "burgers"]),
        (
            lambda m: m["problem"].update(resolution=100),
            ["problem.resolution: 100 cannot be strided from data at resolution 1024", "e.g. 128"],
        ),
        (
            lambda m: m["problem"].update(data="missing.h5", generated_resolution=None),
            ["problem.data: file ", "missing.h5 not found"],  # the path beside the study file
        ),
        (
            lambda m: m["search"].update(algorithm="grid"),
            ["search_space.lr.type: search.algorithm grid needs choice distributions"],
        ),
        (lambda m: m["budget"].update(reduction_factor=1), ["budget.reduction_factor: must be >= 2"]),
        (lambda m: m["training"].update(milestones=[10], step_size=5), ["training.step_size: set at most one"]),
        (lambda m: m.update(name="my study/x"), ["name: 'my study/x' must be 1 to 100 letters"]),
        (lambda m: m.update(parametrization="ntk"), ["parametrization: 'ntk' is unknown"]),
    ],
)
def test_bad_fields_give_one_line_errors(tmp_path, mutate, fragments):
    m = quick_mapping()
    mutate(m)
    message = error_of(tmp_path, m)
    for fragment in fragments:
        assert fragment in message, message


def test_k_too_large_for_a_2d_grid(tmp_path):
    m = quick_mapping()
    m["problem"] = {"name": "darcy", "resolution": 31}
    m["proxy_K"], m["target_K"] = 6, 24
    message = error_of(tmp_path, m)
    assert "target_K: modes 24 too large for grid size 36 on axis 0" in message
    assert "resolution 31 + padding 5" in message


def test_yaml_syntax_and_top_level_errors(tmp_path):
    path = write(tmp_path, "name: [unclosed\n")
    with pytest.raises(UserInputError, match=r"not valid YAML \(line \d+, column \d+"):
        load_study(path)
    with pytest.raises(UserInputError, match="must be a YAML mapping"):
        load_study(write(tmp_path, "- a\n- b\n", "list.yaml"))
    with pytest.raises(UserInputError, match="file not found"):
        load_study(tmp_path / "nope.yaml")


def test_every_searchable_parameter_is_accepted(tmp_path):
    """Every training field declared with setting() is searchable (SEARCHABLE is derived from them); the rules
    between fields decide which can be searched together, so four studies cover them all."""
    spaces = [
        {  # the optimiser, the schedule and its warm-up, the precision
            "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
            "batch_size": {"type": "int", "low": 10, "high": 20},
            "beta1": {"type": "uniform", "low": 0.8, "high": 0.95},
            "beta2": {"type": "uniform", "low": 0.9, "high": 0.999},
            "weight_decay": {"type": "loguniform", "low": 1e-6, "high": 1e-3},
            "clip_value": {"type": "choice", "values": [0.01, 0.1]},
            "init_scale": {"type": "uniform", "low": 0.5, "high": 2.0},
            "schedule": {"type": "choice", "values": ["cosine", "constant"]},
            "warmup": {"type": "uniform", "low": 0.0, "high": 0.2},
            "precision": {"type": "choice", "values": ["fp32", "bf16"]},
        },
        {"step_size": {"type": "int", "low": 2, "high": 5}, "gamma": {"type": "uniform", "low": 0.3, "high": 0.9}},
        {
            "data_weight": {"type": "uniform", "low": 1, "high": 5},
            "physics_weight": {"type": "choice", "values": [0.5]},
        },
        {"loss": {"type": "choice", "values": ["relative_l2", "pino"]}},
    ]
    searched = set()
    for i, space in enumerate(spaces):
        m = quick_mapping()
        m["search_space"] = space
        m["training"] = dict(m.get("training") or {}, schedule="step") if i == 1 else m.get("training") or {}
        if i >= 2:  # the PINO loss: Darcy's
            m["problem"] = {"name": "darcy", "resolution": 31, "n_train": 40, "n_test": 8}
            m["proxy_K"], m["target_K"] = 4, 12
            m["training"] = dict(m["training"], **({"loss": "pino"} if i == 2 else {}))
        study, _ = load_study(write(tmp_path, m, f"study{i}.yaml"))
        searched |= set(study.search_space)
    assert searched == set(SEARCHABLE)
    assert {"schedule", "warmup", "beta1", "precision", "loss", "step_size"} <= searched


@pytest.mark.parametrize(
    "space, training, expected",
    [
        (
            {"step_size": {"type": "int", "low": 2, "high": 5}},
            {"schedule": "cosine"},
            "search_space.step_size: the search can draw step_size 2, which the training rules refuse: "
            "milestones/step_size only apply to schedule step",
        ),
        (  # two searched fields that clash with each other
            {
                "schedule": {"type": "choice", "values": ["step", "cosine"]},
                "step_size": {"type": "choice", "values": [3]},
            },
            {},
            "the search can draw schedule cosine, step_size 3",
        ),
        ({"seed": {"type": "choice", "values": [0, 1]}}, {}, "search_space.seed: cannot be searched: the seed is not"),
        ({"milestones": {"type": "choice", "values": [1]}}, {}, "search step_size or gamma instead"),
        ({"step_size": {"type": "int", "low": 1.5, "high": 4}}, {"schedule": "step"}, "low: must be an integer"),
        ({"schedule": {"type": "choice", "values": ["cosine", "warm"]}}, {}, "values[1]: is unknown; use one of"),
        ({"schedule": {"type": "uniform", "low": 0, "high": 1}}, {}, "search_space.schedule.type"),
        ({"warmup": {"type": "uniform", "low": 0.0, "high": 1.0}}, {}, "search_space.warmup.high: must be in [0, 1)"),
        ({"loss": {"type": "choice", "values": ["relative_l2", "pino"]}}, {}, "values[1]: pino is not a loss of"),
    ],
)
def test_a_search_the_training_would_refuse_is_refused_when_read(tmp_path, space, training, expected):
    m = quick_mapping()
    m["search_space"] = space
    m["training"] = dict(m.get("training") or {}, **training)
    assert expected in error_of(tmp_path, m)


# --------------------------------------------------------------------------- overrides


def test_cli_overrides_take_precedence_and_are_reported(tmp_path):
    path = write(tmp_path, quick_mapping())
    study, applied = load_study(
        path,
        {
            "proxy_K": 4,
            "target_K": 16,
            "num_trials": 3,
            "epochs": 2,
            "target_epochs": 5,
            "name": "other",
            "tracking_uri": None,
        },
    )
    assert (study.proxy_K, study.target_K, study.search.num_trials) == (4, 16, 3)
    assert (study.budget.epochs, study.target.epochs, study.name) == (2, 5, "other")
    flags = {o.flag for o in applied}
    assert flags == {"--proxy-K", "--target-K", "--num-trials", "--epochs", "--target-epochs", "--name"}
    described = {o.flag: o.describe() for o in applied}
    assert described["--proxy-K"] == "--proxy-K 4 overrides proxy_K (study file: 6)"
    # the file value is used where no flag is given, the schema default where the file is silent
    assert study.search.seed == 0 and study.training.lr == pytest.approx(3e-3)


def test_override_equal_to_the_file_is_not_reported():
    study, applied = load_study(None, {"proxy_K": 6, "target_K": 24})
    assert applied == [] and study.proxy_K == 6


def test_override_errors_name_the_flag():
    with pytest.raises(UserInputError) as info:
        load_study(None, {"proxy_K": 30})
    assert "proxy_K: must be < target_K (24)" in str(info.value) and "(set by --proxy-K)" in str(info.value)
    with pytest.raises(UserInputError, match=r"target_K: modes 80 too large .*\(set by --target-K\)"):
        load_study(None, {"target_K": 80})


def test_override_creates_missing_sections(tmp_path):
    m = {
        "name": "mini",
        "problem": {"name": "burgers", "resolution": 128},
        "proxy_K": 4,
        "target_K": 8,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
    }
    study, applied = load_study(write(tmp_path, m), {"num_trials": 5, "tracking_uri": "sqlite:///x.db"})
    assert study.search.num_trials == 5 and study.tracking.uri == "sqlite:///x.db"
    assert [o.describe() for o in applied][0] == "--num-trials 5 overrides search.num_trials (study file: unset)"


def test_hyperparameter_merge_and_transfer_of_the_best():
    from mutransfer._study.models import merge_hyperparameters
    from mutransfer._sweep.runner import transfer

    study, _ = load_study(K_ONLY_STUDY)
    hp = merge_hyperparameters(study, {"lr": 2e-3, "batch_size": 10})
    assert hp["lr"] == 2e-3 and hp["batch_size"] == 10 and hp["beta2"] == 0.999
    record, target_hp = transfer(study, {"hp": hp})
    assert target_hp == hp  # muP: the master LR and everything else carry over
    assert record["lr_factor"] == pytest.approx(math.sqrt(math.log(6) / math.log(24)))
    rows = {q["name"]: q for q in record["quantities"]}
    assert rows["spectral_lr"]["target"] == pytest.approx(rows["spectral_lr"]["proxy"] * record["lr_factor"])
    assert record["target_spectral_init_std"] == pytest.approx(record["proxy_spectral_init_std"] * record["lr_factor"])


def test_space_time_problem_grid_includes_the_time_axis(tmp_path):
    from mutransfer._problems import PROBLEMS

    if "navier_stokes" not in PROBLEMS:
        pytest.skip("no space-time problem registered")
    m = {
        "name": "ns",
        "problem": {"name": "navier_stokes"},
        "proxy_K": 3,
        "target_K": 8,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
    }
    study, _ = load_study(write(tmp_path, m))
    res, t, pad = study.problem.resolution, study.problem.time_resolution, study.padding
    assert study.grid_shape == (res + pad, res + pad, t + pad)
    m["target_K"] = (t + pad) // 2 + 2
    assert f"time_resolution {t} + padding {pad}" in error_of(tmp_path, m)
    m["problem"] = {"name": "burgers", "time_resolution": 4}
    assert "problem.time_resolution: only applies to space-time problems" in error_of(tmp_path, m)


def test_pino_loss_is_selectable_in_studies_for_darcy_only(tmp_path):
    import yaml as _yaml

    from mutransfer._study import load_study
    from mutransfer._study.models import fixed_hyperparameters, train_config
    from mutransfer.errors import UserInputError

    base = {
        "name": "pino",
        "problem": {"name": "darcy", "resolution": 31},
        "proxy_K": 3,
        "target_K": 6,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
        "training": {"loss": "pino", "data_weight": 5, "physics_weight": 1},
    }
    path = tmp_path / "pino.yaml"
    path.write_text(_yaml.safe_dump(base))
    study, _ = load_study(path)
    config = train_config(study, fixed_hyperparameters(study), epochs=1)
    assert (config.loss, config.data_weight, config.physics_weight) == ("pino", 5.0, 1.0)

    path.write_text(_yaml.safe_dump({**base, "problem": {"name": "burgers", "resolution": 64}}))
    with pytest.raises(UserInputError, match="training.loss") as info:
        load_study(path)
    assert "\n" not in str(info.value)
    path.write_text(_yaml.safe_dump({**base, "training": {"physics_weight": 1}}))
    with pytest.raises(UserInputError, match="apply to loss 'pino' only"):
        load_study(path)


@pytest.mark.parametrize("path", sorted(STUDIES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_study_validates_and_round_trips(path):
    """Users copy these files: each must load as shipped, and its canonical YAML must load to the same study."""
    study, _ = load_study(path)
    try:
        assert study.scale_text()
        assert parse_study(yaml.safe_load(study.to_yaml()), "round trip") == study
    finally:
        if study.family.facts_on_parameters:  # a factory's family (studies/neuralop_darcy.yaml): this test's only
            unregister_family(study.operator.type)


# --------------------------------------------------------------------------- the K rule's exponent


def test_k_exponent_defaults_to_the_papers_rule_and_reads_a_number_or_data(tmp_path):
    study, _ = load_study(K_ONLY_STUDY)
    assert study.operator.k_exponent == 1.0 and study.k_exponent == 1.0
    m = quick_mapping()
    m["operator"]["k_exponent"] = 0.5
    assert load_study(write(tmp_path, m))[0].k_exponent == 0.5
    study, applied = load_study(None, {"k_exponent": "data"})
    assert study.operator.k_exponent == "data" and applied[0].flag == "--k-exponent"
    assert study.to_dict()["operator"]["k_exponent"] == "data"  # the file keeps the request, the state the value
    assert parse_study(study.to_dict(), "again") == study


def test_a_model_built_before_the_data_k_rule_is_measured_is_refused_in_one_line():
    from mutransfer._study.models import model_spec

    study, _ = load_study(None, {"k_exponent": "data"})
    with pytest.raises(UserInputError, match=r"^operator.k_exponent: 'data' is estimated .* give a number"):
        model_spec(study)


def test_the_data_k_rule_is_measured_on_the_training_inputs_or_taken_from_the_study_folder():
    """Measured: ρ from the proxy's Fourier-layer inputs on the first 64 training inputs (smooth here: near 0;
    white noise: larger). Stored (a resumed study): taken as it is, nothing measured (the data are not read)."""
    from types import SimpleNamespace

    from mutransfer._diagnostics.k_exponent import resolve_k_exponent
    from mutransfer._study.models import model_spec

    study, _ = load_study(None, {"k_exponent": "data"})
    x = torch.linspace(0, 1, 128)
    wave = torch.sin(2 * math.pi * x)[None, :, None].repeat(8, 1, 1)
    smooth = SimpleNamespace(train_x=wave, train_y=wave)
    torch.manual_seed(1)
    noise = torch.randn(8, 128, 1)
    rough = SimpleNamespace(train_x=noise, train_y=noise)
    lo = resolve_k_exponent(study, smooth)
    assert lo is not None and study.k_exponent == lo.exponent and lo.modes == (6, 24) and lo.samples == 8
    assert model_spec(study).options["k_exponent"] == lo.exponent
    hi = resolve_k_exponent(study, rough)
    assert hi is not None and hi.exponent > lo.exponent
    stored = dict(hi.as_dict(), exponent=0.123)
    assert resolve_k_exponent(study, None, stored).exponent == 0.123 and study.k_exponent == 0.123
    assert resolve_k_exponent(load_study(K_ONLY_STUDY)[0], rough) is None  # a number: nothing to measure


@pytest.mark.parametrize(
    "space, expected",
    [
        ({"operator.heads": {"type": "choice", "values": [2, 4]}}, None),
        ({"operator.options.attention_type": {"type": "choice", "values": ["galerkin", "fourier"]}}, None),
        (
            {"operator.heads": {"type": "choice", "values": [4, 3]}},
            "search_space.operator.heads.values[1]: heads 3 does not divide the widths 16 and 64",
        ),
        (
            {"operator.options.attention_type": {"type": "choice", "values": ["galerkin", "softmaxish"]}},
            "search_space.operator.options.attention_type.values[1]: 'softmaxish'",
        ),
        ({"operator.projection_channels": {"type": "choice", "values": [8]}}, "is not a field galerkin searches"),
    ],
)
def test_an_attention_operators_heads_and_options_are_searched_as_fixed_ones_are_checked(tmp_path, space, expected):
    """Each searched value of operator.heads / operator.options.<key> passes the checks a fixed one would: a head
    count that does not divide both widths, or an option the family refuses, is one line naming the value."""
    m = yaml.safe_load((ROOT / "studies" / "galerkin_darcy_width.yaml").read_text())
    m["search_space"].update(space)
    if expected is None:
        study, _ = load_study(write(tmp_path, m))
        assert set(space) <= set(study.search_space)
    else:
        assert expected in error_of(tmp_path, m)
