"""`mutransfer train`: train one operator (FNO, Galerkin Transformer, ONO, GNOT) on a PDE problem, end to end."""

from __future__ import annotations

import argparse
from typing import NamedTuple

import torch
import yaml

from mutransfer import _training as training
from mutransfer._config import smoke
from mutransfer._config.flags import add_flags
from mutransfer._config.settings import setting_of
from mutransfer._problems import PROBLEMS, Problem, default_dataset, get_problem
from mutransfer._study.models import HPARAM_KEYS
from mutransfer._study.resolve import check_operator_options
from mutransfer._study.schema import MAX_EPOCHS, TrainingSpec
from mutransfer._training import TrainConfig
from mutransfer._training.memory import check_before_building
from mutransfer._training.trainer import resolve_device
from mutransfer.cli._common import (
    memory_size,
    non_negative_int,
    positive_int,
    positive_int_at_most,
    print_json,
    unit_interval,
)
from mutransfer.cli._data_cmd import add_reader_arguments, reader_options
from mutransfer.cli._train_keep import add_keep_arguments, check_outputs, keep
from mutransfer.data._loading import SplitData, StreamingSplit, load_split
from mutransfer.data._pointclouds import is_point_file, load_point_split, point_file_header
from mutransfer.data._readers import open_data
from mutransfer.errors import UserInputError
from operators.adapters import normalization_from
from operators.factory import is_user_operator
from operators.family import OperatorFamily
from operators.parametrization import PARAMETRIZATIONS
from operators.pointset import check_heads
from operators.registry import ATTENTION_DEFAULTS, OPERATORS, ModelSpec, get_family, point_set_families
from operators.width_mup import WIDTH_PARAMETRIZATIONS


def pino_ratio(text: str) -> tuple[float, float]:
    """argparse type: 'DATA:PHYSICS' loss weights, e.g. 5:1."""
    parts = text.split(":")
    try:
        weights = tuple(float(p) for p in parts)
    except ValueError:
        weights = ()
    if len(weights) != 2 or not all(w >= 0 and w != float("inf") for w in weights) or sum(weights) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not DATA:PHYSICS with two weights >= 0, e.g. 5:1")
    return weights


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="train an operator (FNO, Galerkin Transformer, ONO, GNOT) on a PDE problem "
        "(generates and caches a small dataset on first use)",
        description="Train an FNO (standard or muP in K) or an attention operator (galerkin, ono, gnot; grids are "
        "presented as point sets) with an optional muP in the width. Without --data a small default dataset for the "
        "problem is generated once and cached ($MUTRANSFER_CACHE or ~/.cache/mutransfer).",
    )
    p.add_argument("--problem", choices=sorted(PROBLEMS), default="darcy", help="PDE problem (default: darcy)")
    p.add_argument(
        "--data",
        help="data file: mutransfer HDF5, .mat (v5/v7.3), PDEBench or The Well HDF5, or .pt (default: the "
        "problem's cached dataset); see --input-key and friends below",
    )
    p.add_argument(
        "--operator",
        type=_operator_name,
        default="fno",
        help=f"operator: {', '.join(OPERATORS)}, or your factory module:function (docs/byo.md) (default: fno)",
    )
    p.add_argument("--modes", type=positive_int, help="FNO: K, Fourier modes per sign per dimension (default 8)")
    p.add_argument("--parametrization", choices=PARAMETRIZATIONS, help="FNO: parametrization in K (default: mup)")
    p.add_argument("--width", type=positive_int, default=32, help="hidden channels / model width m (default 32)")
    p.add_argument("--layers", type=positive_int, default=4, help="layers L (default 4)")
    p.add_argument(
        "--projection-channels",
        type=positive_int,
        help="FNO: hidden size of the projection MLP Q (default 128; a study's operator.projection_channels)",
    )
    p.add_argument("--heads", type=positive_int, help="attention operators: heads (default 4; must divide --width)")
    p.add_argument(
        "--option",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="attention operators: a further constructor argument, e.g. --option attention_type=fourier (repeatable)",
    )
    p.add_argument(
        "--width-parametrization",
        choices=WIDTH_PARAMETRIZATIONS,
        default="standard",
        help="muP in the width (Tensor Programs V) or standard (default); mup needs --base-width",
    )
    p.add_argument("--base-width", type=positive_int, help="width-muP: the width the hyperparameters were tuned at")
    p.add_argument(
        "--padding", type=non_negative_int, help="FNO: grid points of domain padding (default: the problem's)"
    )
    add_flags(p, TrainingSpec, ["init_scale"], suppress_default=True)
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--epochs", type=positive_int_at_most(MAX_EPOCHS), help="training epochs (default 20)")
    budget.add_argument(
        "--iterations", type=positive_int_at_most(MAX_EPOCHS * 1000), help="optimizer steps instead of epochs"
    )
    # the training hyperparameters: declared once in mutransfer._training.hyperparameters (train's own default LR)
    add_flags(p, TrainingSpec, ["lr", "batch_size"], defaults={"lr": 3e-3})
    p.add_argument("--beta1", type=unit_interval, default=0.9, help="Adam beta1 (default: 0.9)")
    p.add_argument("--beta2", type=unit_interval, default=0.999, help="Adam beta2 (default: 0.999)")
    add_flags(p, TrainingSpec, ["weight_decay", "clip_value"])
    add_flags(
        p,
        TrainingSpec,
        ["schedule"],
        suppress_default=True,
        note="default: cosine, to 0 at the end of the budget, as the shipped studies train; step where --milestones "
        "or --step-size is given",
    )
    p.add_argument(
        "--milestones",
        type=positive_int,
        nargs="+",
        help=f"{setting_of(TrainingSpec, 'milestones').help} (default: off)",
    )
    add_flags(p, TrainingSpec, ["warmup", "step_size", "gamma"])
    p.add_argument(
        "--n-train", type=positive_int, help="training samples (default: the problem's, or 80%% of the file)"
    )
    p.add_argument("--n-test", type=positive_int, help="test samples, taken from the end of the file")
    p.add_argument("--resolution", type=positive_int, help="training resolution (downsampled from the file's)")
    p.add_argument(
        "--time-resolution",
        type=positive_int,
        help="output times used (strided back from the last; default: the problem's, or all in the file)",
    )
    add_flags(p, TrainingSpec, ["loss"])
    p.add_argument(
        "--pino-ratio",
        type=pino_ratio,
        metavar="DATA:PHYSICS",
        help="loss weights for --loss pino (default 5:1, the paper's)",
    )
    add_flags(p, TrainingSpec, ["seed"])
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N (default auto)")
    add_flags(p, TrainingSpec, ["precision"])
    stream = p.add_mutually_exclusive_group()
    stream.add_argument(
        "--stream",
        dest="stream",
        action="store_const",
        const=True,
        help="read the data file lazily in batches (default: only when the split would take more than --max-memory)",
    )
    stream.add_argument(
        "--no-stream", dest="stream", action="store_const", const=False, help="load the whole split into memory"
    )
    p.add_argument(
        "--max-memory",
        type=memory_size,
        metavar="SIZE",
        help="the most memory the loaded split may take before it is streamed instead, e.g. 8GiB "
        "(default: half of the available RAM)",
    )
    p.add_argument(
        "--data-workers",
        type=non_negative_int,
        metavar="N",
        help="processes reading streamed batches (default 2; in-memory data needs none)",
    )
    p.add_argument(
        "--device-memory",
        type=memory_size,
        metavar="SIZE",
        help="memory the device may use, e.g. 80GiB (default: what is free on it); an FNO whose training "
        "step does not fit is refused before it is built",
    )
    add_keep_arguments(p)
    p.add_argument("--checkpoint-dir", help="write checkpoints here; an existing checkpoint is resumed")
    p.add_argument("--no-resume", dest="resume", action="store_false", help="ignore an existing checkpoint")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_reader_arguments(p)
    p.set_defaults(run=run)


class TrainData(NamedTuple):
    """What the train command's flags select: the problem, its split, the data file, the output times kept."""

    problem: Problem
    data: SplitData | StreamingSplit
    path: str
    time_resolution: int | None


def resolve_data(args: argparse.Namespace) -> TrainData:
    """The problem, split, data file and output times for the train command's flags."""

    problem = get_problem(args.problem)
    options = reader_options(args)
    if problem.kind == "points":
        points, path = _resolve_point_data(args, problem, options)
        return TrainData(problem, points, path, None)
    if args.data is not None and _is_point_file(args.data):
        raise UserInputError(f"--data {args.data} holds point sets (an irregular mesh); pass --problem darcy_mesh")
    if args.data is None:
        path = default_dataset(problem, progress=args.progress)
        n_train = args.n_train or problem.n_train
        n_test = args.n_test or problem.n_test
        resolution = args.resolution or problem.resolution
        time_resolution = getattr(args, "time_resolution", None) or problem.time_resolution
    else:
        path = args.data
        with open_data(path, **options) as source:
            if source.problem not in (None, problem.name):
                raise UserInputError(
                    f"--data {path} holds {source.problem!r} data but --problem is {problem.name!r}; "
                    f"pass --problem {source.problem}"
                )
            n = source.n_samples
        n_test = args.n_test or max(1, n // 5)
        n_train = args.n_train or n - n_test
        resolution = args.resolution
        time_resolution = getattr(args, "time_resolution", None)
    data = load_split(
        path,
        n_train=n_train,
        n_test=n_test,
        resolution=resolution,
        time_resolution=time_resolution,
        problem=problem.name,
        stream=getattr(args, "stream", None),
        max_memory=getattr(args, "max_memory", None),
        **options,
    )
    return TrainData(problem, data, str(path), time_resolution)


def _is_point_file(path) -> bool:
    return is_point_file(path)


def _resolve_point_data(args: argparse.Namespace, problem, options: dict):
    """(SplitData packed as point sets, path) for a point-set problem."""

    for flag, value in (
        ("--resolution", args.resolution),
        ("--time-resolution", getattr(args, "time_resolution", None)),
    ):
        if value is not None:
            raise UserInputError(f"{flag}: {problem.name} is a point-set problem with no grid to stride; drop it")
    if any(v is not None for v in options.values()):
        raise UserInputError(
            f"--input-key and friends apply to grid data files, not to {problem.name} point sets; drop them"
        )
    if args.data is None:
        path = default_dataset(problem, progress=args.progress)
        n_train = args.n_train or problem.n_train
        n_test = args.n_test or problem.n_test
    else:
        path = args.data
        if not _is_point_file(path):
            raise UserInputError(
                f"--data {path} is not a point-set file; generate one with `mutransfer data generate {problem.name} --out {path}`"
            )
        header = point_file_header(path)
        if header.get("problem") not in (None, problem.name):
            raise UserInputError(f"--data {path} holds {header['problem']!r} data but --problem is {problem.name!r}")
        n = int(header["n_samples"])
        n_test = args.n_test or max(1, n // 5)
        n_train = args.n_train or n - n_test
    return load_point_split(path, n_train=n_train, n_test=n_test), str(path)


#: flags that only some families take: (args name, flag, what the family must have: an axis, a field or a hyperparameter)
_FAMILY_FLAGS = (
    ("modes", "--modes", "K"),
    ("parametrization", "--parametrization", "K"),
    ("projection_channels", "--projection-channels", "projection_channels"),
    ("padding", "--padding", "padding"),
    ("init_scale", "--init-scale", "init_scale"),
    ("clip_value", "--clip-value", "clip_value"),
    ("heads", "--heads", "heads"),
    ("options", "--option", "options"),
)


def _operator_name(text: str) -> str:
    """--operator: a registered family, or a factory path (imported when the command runs, from this directory)."""
    if text in OPERATORS or is_user_operator(text):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is unknown; use one of: {', '.join(OPERATORS)}, or a factory module:function (docs/byo.md)"
    )


def _takes(family, need: str) -> bool:
    """Whether ``family`` has the axis, field or hyperparameter ``need``."""
    return (
        family.scales(need) if need == "K" else need in family.fields or (need in HPARAM_KEYS and family.applies(need))
    )


def _owners(need: str) -> str:
    """Who takes ``need``: "fno only" or "the attention operators (galerkin, ono, gnot)"."""
    owners = [f.name for f in OPERATORS.values() if _takes(f, need)]
    return f"{owners[0]} only" if len(owners) == 1 else f"the attention operators ({', '.join(owners)})"


def _parse_options(items: list[str]) -> dict:
    """--option KEY=VALUE items → {key: value}, values read as YAML scalars (1e-2, true, fourier)."""

    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise UserInputError(f"--option {item!r}: write KEY=VALUE, e.g. --option attention_type=fourier")
        try:
            out[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise UserInputError(
                f"--option {item!r}: the value is not a number, boolean or word; e.g. ffn_ratio=2"
            ) from None
    return out


def check_model_flags(args: argparse.Namespace, problem: Problem):
    """(family, --option values) the train flags name; one line for a flag the family does not take (reads no data:
    :func:`run` calls it before any data is made or read)."""

    if args.width_parametrization == "mup" and args.base_width is None:
        raise UserInputError(
            "--width-parametrization mup needs --base-width (the width the hyperparameters were tuned at)"
        )
    if args.width_parametrization == "standard" and args.base_width is not None:
        raise UserInputError("--base-width applies to --width-parametrization mup only; drop it or add that flag")
    family = get_family(args.operator)
    if not family.takes(problem.kind):
        names = point_set_families()
        raise UserInputError(
            f"--operator {args.operator} needs a grid; {problem.name} is a point-set problem: use "
            f"{', '.join(names[:-1])} or {names[-1]}"
        )
    for name, flag, need in _FAMILY_FLAGS:
        if getattr(args, name) not in (None, []) and not _takes(family, need):
            raise UserInputError(f"{flag} applies to {_owners(need)}, not {args.operator}; drop it")
    options = _parse_options(args.options)
    reserved = {"coord_dim", "in_channels", "out_channels", "width", "layers", "heads"}
    reserved |= {"width_parametrization", "base_width"}  # each has its own flag or comes from the data
    if family.facts_on_parameters:  # a user's factory: only what the command sets itself (operators.factory)
        reserved = {"K", "width", "in_channels", "out_channels"}
    clash = sorted(reserved & set(options))
    if clash:
        raise UserInputError(f"--option {clash[0]}: has its own flag or comes from the data; drop it")
    if family.attention_formula is not None:  # --option and --heads, checked without data (it comes later)
        heads = ATTENTION_DEFAULTS["heads"] if args.heads is None else args.heads
        check_heads(args.width, heads, args.base_width, args.width_parametrization == "mup")
        check_operator_options(family, problem.dim, heads, options)
    return family, options


def train_model_spec(args: argparse.Namespace, problem, data, family: OperatorFamily, options: dict) -> ModelSpec:
    """The ModelSpec the train flags describe, for ``family`` and ``options`` (:func:`check_model_flags`'s); the
    family's ``defaults`` fill what is not given (operators.registry); ``family.build`` builds it, as for studies."""
    points = problem.kind == "points"
    x, y = data.train_x, data.train_y
    return ModelSpec(
        dim=problem.dim,
        input_channels=int(x.shape[-1]),
        output_channels=int(y.shape[-1]),
        width=args.width,
        layers=args.layers,
        modes=args.modes,
        parametrization=args.parametrization,
        width_parametrization=args.width_parametrization,
        base_width=args.base_width if args.width_parametrization == "mup" else None,
        init_scale=1.0 if args.init_scale is None else args.init_scale,
        packed=points,
        normalization=normalization_from(x, y, problem.dim if points else None) if family.standardizes else None,
        options={
            "padding": problem.padding if args.padding is None else args.padding,
            "projection_channels": args.projection_channels,
            "heads": args.heads,
            "options": options,
        },
    )


def _plan_before_building(family, config: dict, data, train_config):
    """Check K against the grid and plan the model config (nothing built); refuse it, one line, if a step cannot fit."""

    return check_before_building(
        config,
        tuple(data.train_x.shape[1:-1]),
        min(train_config.batch_size, int(data.train_x.shape[0])),
        resolve_device(train_config.device),
        precision=train_config.precision,
        weight_decay=train_config.weight_decay,
        limit=train_config.device_memory,
    )


def run(args: argparse.Namespace) -> int:
    epochs, iterations = args.epochs, args.iterations
    if epochs is None and iterations is None:
        epochs = 20
    if smoke.smoke():
        epochs, iterations = (None, smoke.EPOCHS) if iterations is not None else (smoke.EPOCHS, None)
        smoke.say("train", f"{smoke.EPOCHS} {'iteration' if iterations else 'epoch'}")
    loss = getattr(args, "loss", "relative_l2")
    ratio = getattr(args, "pino_ratio", None)
    if ratio is not None and loss != "pino":
        raise UserInputError("--pino-ratio applies to --loss pino only; drop it or add --loss pino")
    config = TrainConfig(
        lr=args.lr,
        batch_size=args.batch_size,
        epochs=epochs,
        iterations=iterations,
        betas=(args.beta1, args.beta2),
        weight_decay=args.weight_decay,
        schedule=args.schedule or ("step" if args.milestones or args.step_size else "cosine"),
        milestones=args.milestones,
        warmup=args.warmup,
        step_size=args.step_size,
        gamma=args.gamma,
        clip_value=args.clip_value,
        seed=args.seed,
        device=args.device,
        checkpoint_dir=args.checkpoint_dir,
        progress=args.progress,
        loss=loss,
        data_weight=None if ratio is None else ratio[0],
        physics_weight=None if ratio is None else ratio[1],
        precision=args.precision,
        device_memory=args.device_memory,
        data_workers=args.data_workers,
    )
    out = check_outputs(args)
    family, options = check_model_flags(args, get_problem(args.problem))  # before any data is made or read
    problem, data, path, time_resolution = resolve_data(args)
    spec = train_model_spec(args, problem, data, family, options)
    model_config = family.configure(spec)
    plan = _plan_before_building(family, model_config, data, config)  # every family is planned before it is built

    torch.manual_seed(config.seed)  # the init depends on --seed only, as a sweep's trials and target do
    model = family.build(model_config)
    result = training.train(
        model, data, config, resume=args.resume, plan=plan
    )  # looked up at call time (tests patch it)
    summary = {
        "problem": problem.name,
        "data": path,
        "source": data.source,
        "grid": list(data.train_x.shape[1:-1]),
        "n_train": int(data.train_x.shape[0]),
        "n_test": int(data.test_x.shape[0]),
        "streamed": bool(getattr(data, "streaming", False)),
        "model": model.config,
        "train": config.to_dict(),
        "result": result.as_dict(),
    }
    if out is not None:
        summary.update(keep(args, out, model, problem, data, time_resolution, config, result))
    if args.json:
        print_json(summary)
        return 0
    grid = "x".join(str(n) for n in summary["grid"])
    modes = model.config.get("modes", model.config.get("K"))  # a factory's config names K as K (operators.factory)
    layers = "" if family.facts_on_parameters else f", {args.layers} layers"  # a factory's depth is its own option
    what = f"{family.describe(problem.dim, modes, args.width)}{layers}"
    if args.width_parametrization == "mup":
        what += f", width-muP from base width {args.base_width}"
    where = f"{grid} points per sample (padded)" if problem.kind == "points" else f"grid {grid}"
    streamed = " (streamed from the file)" if getattr(data, "streaming", False) else ""
    print(f"{problem.name}: {what}, {where}, {summary['n_train']} train / {summary['n_test']} test{streamed}")
    print(
        f"status {result.status}: test rel. L2 {result.test_error:.4g} (best {result.best_test_error:.4g}), "
        f"train loss {result.train_loss:.4g}, {result.epochs_completed} epochs / {result.iterations_completed} steps, "
        f"{result.seconds:.1f} s on {result.device}"
    )
    if args.checkpoint_dir:
        print(f"checkpoint: {args.checkpoint_dir}")
    if out is not None:
        logged = f" (MLflow {summary['run_uri']})" if "run_uri" in summary else ""
        print(f"model: {out}{logged}; use it with `mutransfer evaluate {out} --data FILE`")
    return 0
