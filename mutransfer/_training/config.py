"""TrainConfig: the hyperparameters and run options of a training run, and their validation."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

from mutransfer._config.settings import is_int, is_number, problem_with, settings_of
from mutransfer._training.hyperparameters import Hyperparameters, consistency_problem
from mutransfer._training.pino import PINO_DEFAULT_WEIGHTS
from mutransfer.errors import UserInputError


@dataclass
class TrainConfig(Hyperparameters):
    """The hyperparameters (declared once in mutransfer._training.hyperparameters) and the run options of a training run.

    Exactly one of ``epochs`` / ``iterations`` sets the budget; ``milestones``,
    ``step_size`` and ``eval_every`` are in the budget's unit. ``checkpoint_every``
    counts evaluations. For ``schedule="step"`` with neither milestones nor
    step_size the LR halves every budget // 5 (the FNO recipe: 500 epochs, every 100).
    With ``loss="pino"`` the weights default to the paper's 5 : 1.
    """

    epochs: int | None = None
    iterations: int | None = None
    device: str = "auto"
    eval_every: int = 1
    checkpoint_dir: str | None = None
    checkpoint_every: int = 1
    progress: bool = True
    #: bytes of memory the device may use; None: what is free on it now (FNOs are checked against
    #: operators.planning before anything is moved to the device; see mutransfer._training.memory)
    device_memory: int | None = None
    #: DataLoader worker processes reading batches of streamed data (mutransfer.data._streaming);
    #: None: 2 for streamed data, none for data in memory (which is indexed directly)
    data_workers: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`UserInputError` (one line, naming the field) for a bad value."""
        if self.loss == "pino":  # the paper's ratio unless given
            self.data_weight = PINO_DEFAULT_WEIGHTS[0] if self.data_weight is None else self.data_weight
            self.physics_weight = PINO_DEFAULT_WEIGHTS[1] if self.physics_weight is None else self.physics_weight
        for name, _default, spec in settings_of(Hyperparameters):
            if spec.kind == "custom":
                continue
            problem = problem_with(spec, getattr(self, name))
            if problem:
                joiner = " " if problem.startswith("is ") else ": "
                raise UserInputError(f"{name} {getattr(self, name)!r}{joiner}{problem}{_eg(spec.example)}")
        self._check_betas_and_milestones()
        inconsistency = consistency_problem(self)
        if inconsistency:
            raise UserInputError(f"{inconsistency[0]}: {inconsistency[1]}")
        if self.loss == "pino" and self.data_weight == 0 and self.physics_weight == 0:
            raise UserInputError(
                "data_weight/physics_weight: both are 0; give at least one a positive weight, e.g. 5:1"
            )
        self._check_run_options()

    def _check_betas_and_milestones(self) -> None:
        betas = tuple(self.betas) if isinstance(self.betas, (list, tuple)) else None
        if betas is None or len(betas) != 2 or not all(is_number(b) and 0 <= b < 1 for b in betas):
            raise UserInputError(f"betas {self.betas!r}: give two Adam coefficients in [0, 1), e.g. (0.9, 0.999)")
        self.betas = (float(betas[0]), float(betas[1]))
        if self.milestones is not None:
            if not isinstance(self.milestones, (list, tuple)) or not all(is_int(m) and m >= 1 for m in self.milestones):
                raise UserInputError(
                    f"milestones {self.milestones!r}: give a list of positive integers (epochs, or iterations with an iterations budget)"
                )
            self.milestones = sorted(self.milestones)
        for name in ("lr", "gamma", "weight_decay", "data_weight", "physics_weight", "clip_value"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, float(value))

    def _check_run_options(self) -> None:
        if (self.epochs is None) == (self.iterations is None):
            raise UserInputError(
                "epochs/iterations: set exactly one training budget, e.g. epochs=500 or iterations=10000"
            )
        for name in ("epochs", "iterations", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value < 1):
                raise UserInputError(f"{name} {value!r}: must be a positive integer")
        if not isinstance(self.device, str) or not (
            self.device in ("auto", "cpu") or self.device == "cuda" or self.device.startswith("cuda:")
        ):
            raise UserInputError(f"device {self.device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'")
        if self.data_workers is not None and (not is_int(self.data_workers) or self.data_workers < 0):
            raise UserInputError(f"data_workers {self.data_workers!r}: must be an integer >= 0, or unset")
        if self.device_memory is not None and (not is_int(self.device_memory) or self.device_memory < 1):
            raise UserInputError(
                f"device_memory {self.device_memory!r}: must be a number of bytes, e.g. 80GiB, or unset"
            )
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, (str, os.PathLike)):
            raise UserInputError(f"checkpoint_dir {self.checkpoint_dir!r}: must be a directory path or unset")
        if self.checkpoint_dir is not None and os.path.isfile(self.checkpoint_dir):
            raise UserInputError(
                f"checkpoint_dir {self.checkpoint_dir}: is a file; give a folder (it is made if missing)"
            )

    def to_dict(self) -> dict:
        """Plain dict (lists, not tuples) safe for JSON and ``torch.load(weights_only=True)``."""
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        d["milestones"] = None if self.milestones is None else list(self.milestones)
        d["checkpoint_dir"] = None if self.checkpoint_dir is None else os.fspath(self.checkpoint_dir)
        return d


def _eg(example: str) -> str:
    return f", e.g. {example}" if example else ""


def resolve_device(name: str) -> torch.device:
    """'auto' → CUDA when available else CPU; 'cuda' without a GPU raises UserInputError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserInputError(f"device {name!r}: CUDA is not available on this machine; use device 'cpu' or 'auto'")
    return torch.device(name)
