"""`mutransfer train`: train one FNO on a PDE problem, end to end."""

from __future__ import annotations

import argparse
import dataclasses

from mutransfer.cli.common import (
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    print_json,
    unit_interval,
)


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
    from mutransfer.cli.data_cmd import add_reader_arguments
    from operators.parametrization import PARAMETRIZATIONS
    from mutransfer.problems import PROBLEMS
    from mutransfer.training.schedules import SCHEDULES

    p = subparsers.add_parser(
        "train",
        help="train an FNO on a PDE problem (generates and caches a small dataset on first use)",
        description="Train an FNO under standard or muP parametrization. Without --data a small default dataset "
        "for the problem is generated once and cached ($MUTRANSFER_CACHE or ~/.cache/mutransfer).",
    )
    p.add_argument("--problem", choices=sorted(PROBLEMS), default="darcy", help="PDE problem (default: darcy)")
    p.add_argument(
        "--data",
        help="data file: mutransfer HDF5, .mat (v5/v7.3), PDEBench or The Well HDF5, or .pt (default: the "
        "problem's cached dataset); see --input-key and friends below",
    )
    p.add_argument("--modes", type=positive_int, default=8, help="K, Fourier modes per sign per dimension (default 8)")
    p.add_argument("--parametrization", choices=PARAMETRIZATIONS, default="mup", help="default: mup")
    p.add_argument("--width", type=positive_int, default=32, help="hidden channels m (default 32)")
    p.add_argument("--layers", type=positive_int, default=4, help="Fourier layers L (default 4)")
    p.add_argument("--padding", type=non_negative_int, help="grid points of domain padding (default: the problem's)")
    p.add_argument("--init-scale", type=positive_float, default=1.0, help="multiplies the spectral init std")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--epochs", type=positive_int, help="training epochs (default 20)")
    budget.add_argument("--iterations", type=positive_int, help="optimizer steps instead of epochs")
    p.add_argument("--lr", type=positive_float, default=3e-3, help="master learning rate (default 3e-3)")
    p.add_argument("--batch-size", type=positive_int, default=20)
    p.add_argument("--beta1", type=unit_interval, default=0.9)
    p.add_argument("--beta2", type=unit_interval, default=0.999)
    p.add_argument("--weight-decay", type=non_negative_float, default=0.0)
    p.add_argument("--clip-value", type=positive_float, help="element-wise clip of spectral gradients (default: off)")
    p.add_argument("--schedule", choices=SCHEDULES, default="step", help="LR schedule (default: step)")
    p.add_argument("--milestones", type=positive_int, nargs="+", help="step schedule: halve at these epochs/iterations")
    p.add_argument("--step-size", type=positive_int, help="step schedule: halve every this many epochs/iterations")
    p.add_argument("--gamma", type=positive_float, default=0.5, help="step schedule factor (default 0.5)")
    p.add_argument("--n-train", type=positive_int, help="training samples (default: the problem's, or 80%% of the file)")
    p.add_argument("--n-test", type=positive_int, help="test samples, taken from the end of the file")
    p.add_argument("--resolution", type=positive_int, help="training resolution (downsampled from the file's)")
    p.add_argument(
        "--time-resolution", type=positive_int,
        help="output times used (strided back from the last; default: the problem's, or all in the file)",
    )
    p.add_argument("--loss", choices=("relative_l2", "pino"), default="relative_l2",
                   help="training loss; pino adds the Darcy PDE residual (evaluation stays relative L2)")
    p.add_argument("--pino-ratio", type=pino_ratio, metavar="DATA:PHYSICS",
                   help="loss weights for --loss pino (default 5:1, the paper's)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--checkpoint-dir", help="write checkpoints here; an existing checkpoint is resumed")
    p.add_argument("--no-resume", dest="resume", action="store_false", help="ignore an existing checkpoint")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_reader_arguments(p)
    p.set_defaults(run=run)


def resolve_data(args: argparse.Namespace):
    """(problem, SplitData, data path) for the train command's flags."""
    from mutransfer.cli.data_cmd import reader_options
    from mutransfer.data.loading import load_split
    from mutransfer.data.readers import open_data
    from mutransfer.errors import UserInputError
    from mutransfer.problems import default_dataset, get_problem

    problem = get_problem(args.problem)
    options = reader_options(args)
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
        path, n_train=n_train, n_test=n_test, resolution=resolution, time_resolution=time_resolution,
        problem=problem.name, **options,
    )
    return problem, data, str(path)


def run(args: argparse.Namespace) -> int:
    from operators.fno import FNO
    from mutransfer.errors import UserInputError
    from mutransfer.training import TrainConfig, train

    epochs, iterations = args.epochs, args.iterations
    if epochs is None and iterations is None:
        epochs = 20
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
        schedule=args.schedule,
        milestones=args.milestones,
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
    )
    problem, data, path = resolve_data(args)
    model = FNO(
        problem.dim,
        data.train_x.shape[-1],
        data.train_y.shape[-1],
        modes=args.modes,
        width=args.width,
        layers=args.layers,
        parametrization=args.parametrization,
        padding=problem.padding if args.padding is None else args.padding,
        init_scale=args.init_scale,
    )
    model.check_input(tuple(data.train_x.shape[1:-1]))
    result = train(model, data, config, resume=args.resume)
    summary = {
        "problem": problem.name,
        "data": path,
        "source": data.source,
        "grid": list(data.train_x.shape[1:-1]),
        "n_train": int(data.train_x.shape[0]),
        "n_test": int(data.test_x.shape[0]),
        "model": model.config,
        "train": config.to_dict(),
        "result": dataclasses.asdict(result),
    }
    if args.json:
        print_json(summary)
        return 0
    grid = "x".join(str(n) for n in summary["grid"])
    print(
        f"{problem.name}: FNO-{problem.dim}D K={args.modes} width={args.width} layers={args.layers} "
        f"({args.parametrization}), grid {grid}, {summary['n_train']} train / {summary['n_test']} test"
    )
    print(
        f"status {result.status}: test rel. L2 {result.test_error:.4g} (best {result.best_test_error:.4g}), "
        f"train loss {result.train_loss:.4g}, {result.epochs_completed} epochs / {result.iterations_completed} steps, "
        f"{result.seconds:.1f} s on {result.device}"
    )
    if args.checkpoint_dir:
        print(f"checkpoint: {args.checkpoint_dir}")
    return 0
