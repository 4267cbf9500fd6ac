"""A loaded target on a data file: the test metric per resolution, and predictions in the project's HDF5 schemas.

Every sample of the file is used (any format ``mutransfer.data._readers`` accepts;
point-set files for point-set models). Grid models run at any resolution the file
can be strided to and the operator supports (FNO: K ≤ N/2 + 1; the attention
operators see a grid as a point set at any size); point-set models take the file's
point sets as they are. The metric is the trainer's: mean relative L2 over samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mutransfer._training.losses import relative_l2
from mutransfer.data._hdf5_io import write_dataset
from mutransfer.data._loading import load_split
from mutransfer.data._point_schema import is_point_file, write_point_dataset
from mutransfer.data._pointclouds import load_point_split, point_file_header
from mutransfer.data._problem_facts import periodic_grids
from mutransfer.data._readers import open_data
from mutransfer.errors import UserInputError
from mutransfer.serving._load import LoadedModel
from operators.adapters import unpack_points
from operators.errors import OperatorConfigError

#: samples per forward pass
BATCH = 16


@dataclass
class Samples:
    """Every sample of a data file as the model takes it: x (n, *grid, C_in) or packed points, y (n, ..., C_out)."""

    x: torch.Tensor
    y: torch.Tensor
    resolution: int | None
    grid: dict
    attrs: dict


def sample_count(path: str, point_problem: bool) -> tuple[int, str | None]:
    """(samples, problem attribute) of a data file, read from its header; one-line errors for bad files."""
    if Path(path).is_dir():
        raise UserInputError(f"--data {path}: is a directory; pass the path of a data file in it")
    if Path(path).exists() and not Path(path).is_file():
        raise UserInputError(f"--data {path}: is not a regular file (a FIFO, a device or a socket); pass a data file")
    if not Path(path).is_file():
        raise UserInputError(
            f"--data {path}: file not found; pass an existing data file (mutransfer data inspect FILE)"
        )
    if point_problem:
        header = point_file_header(path)
        return int(header["n_samples"]), header.get("problem")

    if is_point_file(path):
        raise UserInputError(f"--data {path}: holds point sets, but this model was trained on grids; pass grid data")
    with open_data(path) as src:
        return int(src.n_samples), src.problem


def check_data(loaded: LoadedModel, path: str, resolutions: list[int] | None) -> int:
    """Refuse, before any compute, data or resolutions the model cannot take; returns the file's sample count."""
    card = loaded.card
    if card.point_problem and resolutions:
        raise UserInputError(
            f"--resolution: {card.operator} on point sets ({card.problem}) takes the file's points "
            "as they are; drop --resolution"
        )
    n, problem = sample_count(path, card.point_problem)
    if problem is not None and problem != card.problem:
        raise UserInputError(
            f"--data {path}: holds {problem} data, but the model was trained on {card.problem}; "
            f"pass {card.problem} data"
        )
    if n < 2:
        raise UserInputError(f"--data {path}: has {n} sample; evaluation needs at least 2")
    for resolution in resolutions or []:
        _probe(loaded, resolution)
    return n


def _probe(loaded: LoadedModel, resolution: int) -> None:
    """One forward pass on zeros at ``resolution``: the operator's own one-line refusal (e.g. K too large)."""
    card = loaded.card
    grid = (resolution,) * len(card.input_shape[:-1])
    if card.time_resolution is not None:
        grid = (resolution,) * (len(grid) - 1) + (card.input_shape[-2],)

    try:
        with torch.no_grad():
            loaded.model(torch.zeros((1, *grid, card.input_channels)))
    except OperatorConfigError as exc:
        raise UserInputError(f"--resolution {resolution}: {exc}") from None


def load_samples(loaded: LoadedModel, path: str, n: int, resolution: int | None) -> Samples:
    """Every sample of ``path`` at ``resolution`` (None: as stored), shaped for the model; channel counts checked."""
    card = loaded.card
    if card.point_problem:
        split = load_point_split(path, n_train=n - 1, n_test=1)
    else:
        split = load_split(
            path,
            n_train=n - 1,
            n_test=1,
            resolution=resolution,
            time_resolution=card.time_resolution,
            problem=card.problem,
            stream=False,
        )
    # the first n - 1 samples and the last one: every sample, in order
    x, y = torch.cat([split.train_x, split.test_x]), torch.cat([split.train_y, split.test_y])
    if x.shape[-1] != card.input_channels or y.shape[-1] != card.output_shape[-1]:
        raise UserInputError(
            f"--data {path}: gives {x.shape[-1]} input / {y.shape[-1]} output channels, the model "
            f"takes {card.input_channels} / {card.output_shape[-1]}; pass data of the model's problem"
        )
    if not card.point_problem:
        resolution = int(split.grid_shape[0])
    return Samples(x, y, resolution, dict(split.grid), dict(split.attrs))


def predict(loaded: LoadedModel, x: torch.Tensor) -> torch.Tensor:
    """The model's output for ``x`` (n, …), in batches of :data:`BATCH`, float32 on the CPU."""
    with torch.no_grad():
        return torch.cat([loaded.model(x[i : i + BATCH]).float() for i in range(0, x.shape[0], BATCH)])


def evaluate_file(loaded: LoadedModel, path: str, resolutions: list[int] | None) -> dict:
    """The metric on every sample of ``path``, one row per resolution (the stored one when none are given)."""

    n = check_data(loaded, path, resolutions)
    rows = []
    for resolution in resolutions or [None]:
        samples = load_samples(loaded, path, n, resolution)
        error = float(relative_l2(predict(loaded, samples.x), samples.y, reduction="sum")) / n
        rows.append({"resolution": samples.resolution, "samples": n, "relative_l2": error})
    card = loaded.card
    return {
        "model": loaded.source,
        "study": card.study,
        "problem": card.problem,
        "operator": card.operator,
        "trained_resolution": card.resolution,
        "trained_test_error": card.test_error,
        "data": str(path),
        "metric": "relative_l2",
        "results": rows,
    }


def format_evaluation(result: dict) -> str:
    """The evaluation as a few lines of text."""
    trained = result["trained_resolution"]
    lines = [
        f"model {result['model']} (study {result['study']}, {result['operator']} on {result['problem']}"
        f"{f', trained at resolution {trained}' if trained else ''}) on {result['data']}:"
    ]
    for row in result["results"]:
        where = f"resolution {row['resolution']}" if row["resolution"] is not None else "point sets"
        lines.append(f"  {where}: relative L2 {row['relative_l2']:.4g} over {row['samples']} samples")
    return "\n".join(lines)


def write_predictions(loaded: LoadedModel, path: str, out: str, resolution: int | None) -> dict:
    """Predict every sample of ``path`` and write inputs + predicted outputs to ``out`` in the project's schema."""
    card = loaded.card
    if Path(out).is_dir():
        raise UserInputError(f"--out {out}: is a directory; pass a file name such as {Path(out) / 'predictions.h5'}")
    n = check_data(loaded, path, [resolution] if resolution else None)
    samples = load_samples(loaded, path, n, resolution)
    pred = predict(loaded, samples.x).numpy()
    attrs = {
        "problem": samples.attrs.get("problem") or card.problem,
        "prediction.model": loaded.source,
        "prediction.study": card.study,
        "prediction.data": str(path),
    }
    if card.point_problem:
        coords, features, mask = unpack_points(samples.x, card.dim)
        write_point_dataset(
            out,
            {"coords": coords.numpy(), "input": features.numpy(), "output": pred, "mask": mask.numpy(), "attrs": attrs},
        )
    else:
        if pred.shape[-1] != 1 or samples.x.shape[-1] != 1:
            raise UserInputError(
                f"--out: the project's grid schema holds scalar fields; this model maps "
                f"{samples.x.shape[-1]} to {pred.shape[-1]} channels"
            )
        timed = card.time_resolution is not None
        inputs = samples.x[..., 0].numpy()
        inputs = inputs[..., 0] if timed else inputs  # the input is broadcast along time: keep t = 0
        write_dataset(
            out, {"input": inputs, "output": pred[..., 0], "grid": _grid(samples, inputs, pred, timed), "attrs": attrs}
        )
    return {"out": str(out), "samples": n, "resolution": samples.resolution, "model": loaded.source}


def _grid(samples: Samples, inputs: np.ndarray, pred: np.ndarray, timed: bool) -> dict:
    """Coordinates per axis: the file's, else j/N (periodic) or i/(N-1) (node grids); times 1..T if unknown."""

    problem = samples.attrs.get("problem")
    grid = {}
    for i, name in enumerate(("x", "y", "z")[: inputs.ndim - 1]):
        size = inputs.shape[i + 1]
        default = np.arange(size) / size if periodic_grids().get(problem, True) else np.linspace(0.0, 1.0, size)
        grid[name] = samples.grid.get(name, default)
    if timed:
        grid["t"] = samples.grid.get("t", np.arange(1, pred.shape[-2] + 1, dtype=np.float64))
    return grid
