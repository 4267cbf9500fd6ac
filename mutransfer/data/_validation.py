"""The validation split: carved from the end of the training samples, read by every selection.

A study's data file holds ``n_train`` training samples (the first ones) and ``n_test`` test samples
(the last ones). :func:`carve_validation` keeps the last ``n_val`` training samples apart:

- the **fit** split trains on the first ``n_train - n_val`` samples and evaluates the validation *and*
  the test split (the final models: the target, the direct arm's retrained winner, top-k's candidates);
- the **selection** split (:class:`SelectionSplit`) trains on the same samples and holds the validation
  rows in its held-out slot (``test_x``/``test_y``, the slot the trainer evaluates) and **no test rows at
  all**: the proxies, ASHA, a ladder's rungs, the direct arm's search and ``--verify``'s trainings get it, so
  nothing they choose can have read the test split.

Rows are views (tensors) or row subsets (streamed ``LazySamples``): nothing is copied or read here.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import torch

from mutransfer.data._loading import SplitData, stride
from mutransfer.data._streaming import LazySamples, StreamingSplit
from mutransfer.errors import UserInputError

__all__ = ["SelectionSplit", "carve_validation", "coarsen", "rows"]

Split = TypeVar("Split", SplitData, StreamingSplit)


def rows(samples: torch.Tensor | LazySamples, start: int, stop: int) -> torch.Tensor | LazySamples:
    """Samples ``[start, stop)`` of a tensor (a view) or of streamed samples (reads nothing)."""
    if isinstance(samples, LazySamples):
        return samples.subset(range(start, stop))
    return samples[start:stop]


@dataclasses.dataclass
class SelectionSplit:
    """What a selection run trains and evaluates on: the fit rows, and the validation rows as its held-out split.

    The trainer reads ``train_x, train_y, test_x, test_y``; here ``test_x``/``test_y`` **are the validation
    samples** (the trainer's one held-out slot), so every error a selection run records is a validation error.
    ``split`` names what the held-out slot holds ("validation"; "test" only for a study made before validation
    splits, which resumes as it started). The other attributes are the full split's (grid, source, ...).
    """

    train_x: torch.Tensor | LazySamples
    train_y: torch.Tensor | LazySamples
    test_x: torch.Tensor | LazySamples
    test_y: torch.Tensor | LazySamples
    grid_shape: tuple[int, ...]
    problem: str | None
    split: str = "validation"
    attrs: dict = dataclasses.field(default_factory=dict)
    grid: dict = dataclasses.field(default_factory=dict)
    source: dict = dataclasses.field(default_factory=dict)
    streaming: bool = False

    @property
    def resolution(self) -> int:
        return self.grid_shape[0]


def carve_validation(split: Split, n_val: int) -> tuple[Split, SelectionSplit]:
    """(fit split, selection split) of ``split`` with its last ``n_val`` training samples as the validation split.

    ``n_val = 0`` (a study made before validation splits): the fit split is ``split`` and the selection split's
    held-out slot is the test split (``split = "test"``), as that study selected.
    """
    n_train = int(split.train_x.shape[0])
    n_val = int(n_val)
    if not 0 <= n_val < n_train:
        raise ValueError(f"n_val {n_val}: need 0 <= n_val < n_train ({n_train})")

    def selection(train_x, train_y, held_x, held_y, name: str) -> SelectionSplit:
        return SelectionSplit(
            train_x,
            train_y,
            held_x,
            held_y,
            grid_shape=split.grid_shape,
            problem=split.problem,
            split=name,
            attrs=split.attrs,
            grid=split.grid,
            source=split.source,
            streaming=bool(split.streaming),
        )

    if n_val == 0:
        return split, selection(split.train_x, split.train_y, split.test_x, split.test_y, "test")
    n_fit = n_train - n_val
    train_x, train_y = rows(split.train_x, 0, n_fit), rows(split.train_y, 0, n_fit)
    val_x, val_y = rows(split.train_x, n_fit, n_train), rows(split.train_y, n_fit, n_train)
    fit = dataclasses.replace(split, train_x=train_x, train_y=train_y, val_x=val_x, val_y=val_y)  # type: ignore[arg-type]
    return fit, selection(train_x, train_y, val_x, val_y, "validation")


def coarsen(split: SelectionSplit, resolution: int, *, periodic: bool, space_axes: int) -> SelectionSplit:
    """``split`` strided to ``resolution`` points on each of its first ``space_axes`` grid axes (a time axis after
    them and the channel axis are kept): the data a proxy on a coarser grid trains and is selected on.

    The samples are (n, *grid, C) tensors; periodic data keep points 0, s, …, N − s, node grids (Darcy) keep both
    boundaries, 0, s, …, N − 1, as the loader strides (mutransfer.data._loading.downsample). Views, no copy.
    """
    full = int(split.grid_shape[0])
    if resolution == full:
        return split
    step = stride(full, resolution, periodic)
    if split.streaming or any(isinstance(t, LazySamples) for t in (split.train_x, split.test_x)):
        raise UserInputError(
            "proxy_resolution: a proxy on a coarser grid needs the data in memory, and this study streams them; "
            "set problem.stream: false, or drop proxy_resolution"
        )
    index = (slice(None),) + (slice(0, full, step),) * space_axes

    def strided(t):
        return t[index]

    shape = tuple(int(n) for n in strided(split.train_x).shape[1:-1])
    return dataclasses.replace(
        split,
        train_x=strided(split.train_x),
        train_y=strided(split.train_y),
        test_x=strided(split.test_x),
        test_y=strided(split.test_y),
        grid_shape=shape,
        grid={},  # the coordinates of the full grid no longer apply
    )
