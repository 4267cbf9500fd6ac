"""Training loop for neural operators: Adam with muP param groups, per-iteration
LR schedules, divergence detection, callbacks and exact checkpoint/resume.

Resume is exact: the batch order of epoch e is drawn from a generator seeded
with (seed, e), and the checkpoint holds model, optimizer, scheduler and the
global torch RNG state, so an interrupted run continued with ``resume=True``
ends in the same state as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import nn
from tqdm.auto import tqdm

from mutransfer.atomic import atomic_path
from mutransfer.errors import UserInputError
from mutransfer.data.streaming import LazySamples, iterate_batches, iterate_chunks
from mutransfer.training.losses import relative_l2
from mutransfer.training.memory import check_model_fits
from mutransfer.training.pino import LOSSES, PINO_DEFAULT_WEIGHTS, build_loss
from mutransfer.training.precision import PRECISIONS, Precision
from mutransfer.training.schedules import SCHEDULES, build_scheduler
from operators.parametrization import clip_spectral_gradients, optimizer_param_groups

#: Finite test error reported for a diverged run (worse than any sane relative L2).
DIVERGED_METRIC = 10.0

#: A finite loss or test error above this also counts as diverged: a relative L2 of
#: 1e4 means predictions 10^4 times the size of the targets (the weights blew up).
EXPLODED_LOSS = 1e4

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_VERSION = 1

#: TrainConfig fields that change the optimisation trajectory; a checkpoint
#: written under different values is refused on resume.
TRAJECTORY_FIELDS = (
    "lr",
    "batch_size",
    "epochs",
    "iterations",
    "betas",
    "weight_decay",
    "schedule",
    "milestones",
    "step_size",
    "gamma",
    "clip_value",
    "seed",
    "loss",
    "data_weight",
    "physics_weight",
    "precision",
)
#: Values of trajectory fields added after checkpoint version 1 was written, for older checkpoints.
_FIELD_DEFAULTS = {"loss": "relative_l2", "data_weight": None, "physics_weight": None, "precision": "fp32"}

Callback = Callable[[dict], Any]


class StopTraining(Exception):
    """Raised by a callback to end the run early (status "stopped")."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class TrainConfig:
    """Hyperparameters and run options of :func:`train`.

    Exactly one of ``epochs`` / ``iterations`` sets the budget; ``milestones``,
    ``step_size`` and ``eval_every`` are in the budget's unit. ``checkpoint_every``
    counts evaluations. For ``schedule="step"`` with neither milestones nor
    step_size the LR halves every budget // 5 (the FNO recipe: 500 epochs, every 100).
    """

    lr: float
    batch_size: int = 20
    epochs: int | None = None
    iterations: int | None = None
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    schedule: str = "step"
    milestones: list[int] | None = None
    step_size: int | None = None
    gamma: float = 0.5
    clip_value: float | None = None
    seed: int = 0
    device: str = "auto"
    eval_every: int = 1
    checkpoint_dir: str | None = None
    checkpoint_every: int = 1
    progress: bool = True
    #: training loss: "relative_l2", or "pino" (Darcy: data_weight * relative L2 + physics_weight *
    #: relative PDE residual; weights default to the paper's 5 : 1). Evaluation is always relative L2.
    loss: str = "relative_l2"
    data_weight: float | None = None
    physics_weight: float | None = None
    #: "fp32", or "bf16"/"fp16" mixed precision (autocast for the real-valued layers; FFTs and the
    #: spectral contraction stay float32; fp16 adds loss scaling). See mutransfer.training.precision.
    precision: str = "fp32"
    #: bytes of memory the device may use; None: what is free on it now (FNOs are checked against
    #: operators.planning before anything is moved to the device; see mutransfer.training.memory)
    device_memory: int | None = None
    #: DataLoader worker processes reading batches of streamed data (mutransfer.data.streaming);
    #: None: 2 for streamed data, none for data in memory (which is indexed directly)
    data_workers: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`UserInputError` (one line, naming the field) for a bad value."""
        if not _is_number(self.lr) or not math.isfinite(self.lr) or self.lr <= 0:
            raise UserInputError(f"lr {self.lr!r}: the learning rate must be a positive number, e.g. 1e-3")
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise UserInputError(f"batch_size {self.batch_size!r}: must be an integer >= 1, e.g. 20")
        if (self.epochs is None) == (self.iterations is None):
            raise UserInputError("epochs/iterations: set exactly one training budget, e.g. epochs=500 or iterations=10000")
        for name in ("epochs", "iterations", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise UserInputError(f"{name} {value!r}: must be a positive integer")
        betas = tuple(self.betas) if isinstance(self.betas, (list, tuple)) else None
        if betas is None or len(betas) != 2 or not all(_is_number(b) and 0 <= b < 1 for b in betas):
            raise UserInputError(f"betas {self.betas!r}: give two Adam coefficients in [0, 1), e.g. (0.9, 0.999)")
        self.betas = (float(betas[0]), float(betas[1]))
        if not _is_number(self.weight_decay) or not self.weight_decay >= 0:
            raise UserInputError(f"weight_decay {self.weight_decay!r}: must be a number >= 0")
        if self.schedule not in SCHEDULES:
            raise UserInputError(f"schedule {self.schedule!r} is unknown; use one of: {', '.join(SCHEDULES)}")
        if self.milestones is not None:
            if not isinstance(self.milestones, (list, tuple)) or not all(
                _is_int(m) and m >= 1 for m in self.milestones
            ):
                raise UserInputError(
                    f"milestones {self.milestones!r}: give a list of positive integers (epochs, or iterations with an iterations budget)"
                )
            self.milestones = sorted(self.milestones)
        if self.step_size is not None and (not _is_int(self.step_size) or self.step_size < 1):
            raise UserInputError(f"step_size {self.step_size!r}: must be a positive integer")
        if self.milestones is not None and self.step_size is not None:
            raise UserInputError("milestones/step_size: set at most one of them for the step schedule")
        if (self.milestones is not None or self.step_size is not None) and self.schedule != "step":
            raise UserInputError(
                f"milestones/step_size only apply to schedule 'step', not {self.schedule!r}; drop them or use schedule 'step'"
            )
        if not _is_number(self.gamma) or not 0 < self.gamma <= 1:
            raise UserInputError(f"gamma {self.gamma!r}: must be in (0, 1], e.g. 0.5 to halve the LR")
        if self.clip_value is not None and (
            not _is_number(self.clip_value) or not math.isfinite(self.clip_value) or self.clip_value <= 0
        ):
            raise UserInputError(f"clip_value {self.clip_value!r}: must be a positive number, or unset to turn clipping off")
        if not _is_int(self.seed) or self.seed < 0:
            raise UserInputError(f"seed {self.seed!r}: must be a non-negative integer")
        if not isinstance(self.device, str) or not (
            self.device in ("auto", "cpu") or self.device == "cuda" or self.device.startswith("cuda:")
        ):
            raise UserInputError(f"device {self.device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'")
        if self.precision not in PRECISIONS:
            raise UserInputError(f"precision {self.precision!r} is unknown; use one of: {', '.join(PRECISIONS)}")
        if self.loss not in LOSSES:
            raise UserInputError(f"loss {self.loss!r} is unknown; use one of: {', '.join(LOSSES)}")
        if self.loss == "pino":
            if self.data_weight is None:
                self.data_weight = PINO_DEFAULT_WEIGHTS[0]
            if self.physics_weight is None:
                self.physics_weight = PINO_DEFAULT_WEIGHTS[1]
            for name in ("data_weight", "physics_weight"):
                value = getattr(self, name)
                if not _is_number(value) or not math.isfinite(value) or value < 0:
                    raise UserInputError(f"{name} {value!r}: must be a number >= 0, e.g. 5 (data) and 1 (physics)")
                setattr(self, name, float(value))
            if self.data_weight == 0 and self.physics_weight == 0:
                raise UserInputError("data_weight/physics_weight: both are 0; give at least one a positive weight, e.g. 5:1")
        elif self.data_weight is not None or self.physics_weight is not None:
            raise UserInputError(
                f"data_weight/physics_weight apply to loss 'pino' only, not {self.loss!r}; drop them or set loss 'pino'"
            )
        if self.data_workers is not None and (not _is_int(self.data_workers) or self.data_workers < 0):
            raise UserInputError(f"data_workers {self.data_workers!r}: must be an integer >= 0, or unset")
        if self.device_memory is not None and (not _is_int(self.device_memory) or self.device_memory < 1):
            raise UserInputError(f"device_memory {self.device_memory!r}: must be a number of bytes, e.g. 80GiB, or unset")
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, (str, os.PathLike)):
            raise UserInputError(f"checkpoint_dir {self.checkpoint_dir!r}: must be a directory path or unset")

    def to_dict(self) -> dict:
        """Plain dict (lists, not tuples) safe for JSON and ``torch.load(weights_only=True)``."""
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        d["milestones"] = None if self.milestones is None else list(self.milestones)
        d["checkpoint_dir"] = None if self.checkpoint_dir is None else os.fspath(self.checkpoint_dir)
        return d


@dataclass
class TrainResult:
    """Outcome of :func:`train`.

    ``test_error`` is the final mean relative L2 on the test set, or
    :data:`DIVERGED_METRIC` when diverged. ``history`` holds one dict per
    evaluation (cumulative "seconds" across resumed sessions); ``seconds`` is
    this call's wall time. ``resumed_from`` is the checkpoint's iteration.
    """

    status: str
    test_error: float
    best_test_error: float
    train_loss: float
    epochs_completed: int
    iterations_completed: int
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    device: str = "cpu"
    resumed_from: int | None = None


def resolve_device(name: str) -> torch.device:
    """'auto' → CUDA when available else CPU; 'cuda' without a GPU raises UserInputError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserInputError(f"device {name!r}: CUDA is not available on this machine; use device 'cpu' or 'auto'")
    return torch.device(name)


# --------------------------------------------------------------------------- checkpoints


def _plain(value):
    """Tuples → lists recursively, so configs compare equal after a JSON/pickle round trip."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def save_checkpoint(state: dict, path: str | os.PathLike) -> None:
    """Write ``state`` to ``path`` atomically (temp file in the same directory, then os.replace)."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    """Load a checkpoint written by :func:`train` (``weights_only=True``).

    Raises :class:`UserInputError` for a missing or unreadable file.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"checkpoint {path}: file not found; check the path or start without resuming")
    try:
        state = torch.load(path, weights_only=True, map_location=map_location)
    except Exception as exc:  # corrupt / truncated / foreign file
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserInputError(
            f"checkpoint {path}: cannot be read ({reason}); delete it or pass a new checkpoint dir / --no-resume"
        ) from None
    required = ("model", "optimizer", "scheduler", "iteration", "train_config")
    if not isinstance(state, dict) or any(k not in state for k in required):
        raise UserInputError(
            f"checkpoint {path}: not a mutransfer training checkpoint; pass a new checkpoint dir or --no-resume"
        )
    return state


def _check_compatible(state: dict, config: TrainConfig, model_config, n_train: int, path: Path) -> None:
    saved = _plain(state["train_config"])
    current = _plain(config.to_dict())
    changed = [f for f in TRAJECTORY_FIELDS if saved.get(f, _FIELD_DEFAULTS.get(f)) != current.get(f)]
    if changed:
        detail = ", ".join(f"{f} {saved.get(f)!r} -> {current.get(f)!r}" for f in changed)
        raise UserInputError(
            f"checkpoint {path} was written with different settings ({detail}); pass a new checkpoint dir or --no-resume"
        )
    saved_model = state.get("model_config")
    if saved_model is not None and model_config is not None and _plain(saved_model) != _plain(model_config):
        raise UserInputError(
            f"checkpoint {path} was written for a different model config; pass a new checkpoint dir or --no-resume"
        )
    if state.get("n_train") is not None and state["n_train"] != n_train:
        raise UserInputError(
            f"checkpoint {path} was written for {state['n_train']} training samples, not {n_train}; "
            "pass a new checkpoint dir or --no-resume"
        )


# --------------------------------------------------------------------------- helpers


def _check_data(data) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    tensors = []
    for name in ("train_x", "train_y", "test_x", "test_y"):
        value = getattr(data, name, None)
        if not isinstance(value, (torch.Tensor, LazySamples)):
            raise UserInputError(f"data.{name}: expected a torch tensor of shape (n, *grid, channels), got {type(value).__name__}")
        tensors.append(value)
    train_x, train_y, test_x, test_y = tensors
    for split, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
        if x.shape[0] != y.shape[0] or x.shape[0] == 0:
            raise UserInputError(
                f"data.{split}_x/{split}_y: need the same, non-zero number of samples (got {x.shape[0]} and {y.shape[0]})"
            )
    return train_x, train_y, test_x, test_y


def _epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """Shuffled indices (n,) for ``epoch``, a pure function of (seed, epoch)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def _all_finite(params: list[torch.Tensor]) -> bool:
    if not params:
        return True
    return bool(torch.stack([torch.isfinite(p).all() for p in params]).all())


@torch.no_grad()
def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, device: torch.device, amp: Precision | None = None
) -> float:
    """Mean relative L2 of ``model`` over (x, y), shapes (n, *grid, C), in batches (the metric in float32)."""
    was_training = model.training
    model.eval()
    amp = amp or Precision("fp32", device)
    total = 0.0
    for xb, yb in iterate_chunks(x, y, batch_size):
        xb = xb.to(device, non_blocking=True)
        yb = yb.to(device, non_blocking=True)
        with amp.autocast():
            pred = model(xb)
        total += float(relative_l2(pred.float(), yb, reduction="sum"))
    model.train(was_training)
    return total / x.shape[0]


def _base_lr(optimizer: torch.optim.Optimizer) -> float:
    """Current LR of the multiplier-1 ("other") group, i.e. the schedule's master LR."""
    for group in optimizer.param_groups:
        if group.get("name") == "other":
            return float(group["lr"])
    group = optimizer.param_groups[0]
    return float(group["lr"]) / float(group.get("lr_multiplier", 1.0))


def _notify(callbacks: Iterable[Callback], event: dict) -> bool:
    """Call every callback with a copy of ``event``; True if one raised StopTraining."""
    stop = False
    for callback in callbacks:
        try:
            callback(dict(event))
        except StopTraining:
            stop = True
    return stop


def _check_memory(model: nn.Module, train_x, config: TrainConfig, device: torch.device) -> None:
    """Refuse (one line) an FNO whose training step does not fit the device, before moving it there."""
    limit, where = config.device_memory, None
    if limit is None and device.type == "cpu" and not os.environ.get("MUTRANSFER_DEVICE_MEMORY"):
        # the model's weights already sit in RAM, so they are not part of what is still available
        from mutransfer.training.memory import available_memory

        limit = available_memory("cpu")[0] + sum(p.numel() * p.element_size() for p in model.parameters())
        where = "the available RAM (with the model's weights)"
    check_model_fits(model, tuple(train_x.shape[1:-1]), config.batch_size, device, precision=config.precision,
                     weight_decay=config.weight_decay, limit=limit, where=where)


def _finite_or_sentinel(value: float) -> float:
    return value if math.isfinite(value) else DIVERGED_METRIC


# --------------------------------------------------------------------------- train


def train(
    model: nn.Module,
    data,
    config: TrainConfig,
    *,
    callbacks: Iterable[Callback] = (),
    resume: bool = True,
) -> TrainResult:
    """Train ``model`` on ``data`` and return a :class:`TrainResult`.

    ``data`` has ``train_x, train_y, test_x, test_y``: tensors of shape
    (n, *grid, C) (channel-last). Loss: ``config.loss`` (mean relative L2 over the
    batch, or the PINO Darcy loss of mutransfer.training.pino); the test metric
    is always the mean relative L2.
    Each callback gets one dict per evaluation ({"event": "eval", "epoch",
    "iteration", "train_loss", "test_error", "lr", "seconds"}) and a final
    {"event": "end", "status", ...}; raising :class:`StopTraining` ends the run
    with status "stopped". Divergence (non-finite loss or parameters) ends the
    run with status "diverged" and ``test_error = DIVERGED_METRIC``; no exception.
    """
    config.validate()
    call_start = time.perf_counter()
    callbacks = list(callbacks)
    device = resolve_device(config.device)
    if device.type == "cpu":
        # Denormal floats (e.g. in Adam's squared-gradient state) made CPU steps up to
        # 100x slower in benchmarks/bench_fno_step.py; flushing them costs no accuracy that matters.
        torch.set_flush_denormal(True)
    train_x, train_y, test_x, test_y = _check_data(data)
    n_train = train_x.shape[0]
    iters_per_epoch = math.ceil(n_train / config.batch_size)
    by_epochs = config.epochs is not None
    unit = iters_per_epoch if by_epochs else 1
    total_iterations = config.epochs * iters_per_epoch if by_epochs else config.iterations
    eval_interval = config.eval_every * unit

    step_size = config.step_size
    if config.schedule == "step" and step_size is None and config.milestones is None:
        step_size = max(1, (config.epochs or config.iterations) // 5)  # FNO recipe: halve every budget/5

    _check_memory(model, train_x, config, device)
    torch.manual_seed(config.seed)
    model.to(device)
    model.train()
    groups = [g for g in optimizer_param_groups(model, config.lr, config.weight_decay) if g["params"]]
    if not groups:
        raise UserInputError("model: has no trainable parameters; check requires_grad on its parameters")
    optimizer = torch.optim.Adam(groups, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
    scheduler = build_scheduler(
        optimizer,
        config.schedule,
        total_iterations,
        milestones=None if config.milestones is None else [m * unit for m in config.milestones],
        step_size=None if step_size is None else step_size * unit,
        gamma=config.gamma,
    )
    params = [p for g in optimizer.param_groups for p in g["params"]]
    model_config = getattr(model, "config", None)
    loss_fn = build_loss(config.loss, data_weight=config.data_weight, physics_weight=config.physics_weight)
    amp = Precision(config.precision, device)
    streamed = isinstance(train_x, LazySamples)
    workers = config.data_workers if config.data_workers is not None else (2 if streamed else 0)

    # ---- state (possibly restored) ------------------------------------------------
    iteration = 0
    history: list[dict] = []
    best = math.inf
    prior_seconds = 0.0
    resumed_from = None
    status = "running"
    checkpoint_path = Path(config.checkpoint_dir) / CHECKPOINT_NAME if config.checkpoint_dir is not None else None
    if checkpoint_path is not None and checkpoint_path.parent.exists() and not checkpoint_path.parent.is_dir():
        raise UserInputError(f"checkpoint_dir {config.checkpoint_dir}: exists and is not a directory; pass a directory path")
    if resume and checkpoint_path is not None and checkpoint_path.exists():
        state = load_checkpoint(checkpoint_path, map_location=device)
        _check_compatible(state, config, model_config, n_train, checkpoint_path)
        try:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise UserInputError(
                f"checkpoint {checkpoint_path} does not fit this model ({str(exc).splitlines()[0]}); "
                "pass a new checkpoint dir or --no-resume"
            ) from None
        scheduler.load_state_dict(state["scheduler"])
        amp.load_state_dict(state.get("grad_scaler"))
        iteration = int(state["iteration"])
        history = list(state.get("history", []))
        best = float(state.get("best_test_error", math.inf))
        prior_seconds = float(state.get("seconds", 0.0))
        resumed_from = iteration
        if state.get("rng_state") is not None:
            torch.set_rng_state(state["rng_state"].cpu())
        if device.type == "cuda" and state.get("cuda_rng_state"):
            cuda_states = [s.cpu() for s in state["cuda_rng_state"]]
            if len(cuda_states) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(cuda_states)
        if state.get("status") == "diverged":
            status = "diverged"

    def elapsed() -> float:
        return prior_seconds + time.perf_counter() - call_start

    def write_checkpoint() -> None:
        if checkpoint_path is None:
            return
        save_checkpoint(
            {
                "version": CHECKPOINT_VERSION,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "grad_scaler": amp.state_dict(),
                "iteration": iteration,
                "epoch": iteration // iters_per_epoch,
                "status": status,
                "history": history,
                "best_test_error": best,
                "seconds": elapsed(),
                "n_train": n_train,
                "model_config": _plain(model_config) if model_config is not None else None,
                "train_config": config.to_dict(),
                "rng_state": torch.get_rng_state(),
                "cuda_rng_state": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
            },
            checkpoint_path,
        )

    # ---- loop -----------------------------------------------------------------------
    loss_sum, loss_count = 0.0, 0
    last_loss = float(history[-1]["train_loss"]) if history else math.nan
    stopped = False
    bar = tqdm(
        total=total_iterations, initial=iteration, disable=not config.progress, unit="it", leave=False, dynamic_ncols=True
    )
    try:
        while status == "running" and iteration < total_iterations and not stopped:
            epoch = iteration // iters_per_epoch
            order = _epoch_permutation(n_train, config.seed, epoch)
            batches = iterate_batches(train_x, train_y, order, config.batch_size, iteration % iters_per_epoch,
                                      num_workers=workers, pin_memory=device.type == "cuda")
            for xb, yb in batches:
                if iteration >= total_iterations:
                    break
                xb = xb.to(device, non_blocking=True)
                yb = yb.to(device, non_blocking=True)
                optimizer.zero_grad(set_to_none=True)
                with amp.autocast():
                    pred = model(xb)
                loss, data_loss = loss_fn(pred.float(), yb, xb)  # data_loss: the relative L2 part
                loss_value = float(loss.detach())
                if not math.isfinite(loss_value) or float(data_loss.detach()) > EXPLODED_LOSS:
                    status = "diverged"
                    break
                amp.backward(loss)
                amp.unscale(optimizer)  # fp16: clip the true gradients, not the scaled ones
                clip_spectral_gradients(model, config.clip_value)
                amp.step(optimizer)
                with warnings.catch_warnings():
                    # fp16 skips a step whose gradients overflowed; the schedule still advances (as with GradScaler)
                    warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
                    scheduler.step()
                iteration += 1
                bar.update(1)
                if not _all_finite(params):
                    status = "diverged"
                    break
                loss_sum += loss_value
                loss_count += 1
                if iteration % eval_interval == 0 or iteration == total_iterations:
                    test_error = evaluate(model, test_x, test_y, config.batch_size, device, amp)
                    if not math.isfinite(test_error) or test_error > EXPLODED_LOSS:
                        status = "diverged"
                        break
                    last_loss = loss_sum / loss_count
                    loss_sum, loss_count = 0.0, 0
                    best = min(best, test_error)
                    event = {
                        "event": "eval",
                        "epoch": iteration // iters_per_epoch,
                        "iteration": iteration,
                        "train_loss": last_loss,
                        "test_error": test_error,
                        "lr": _base_lr(optimizer),
                        "seconds": elapsed(),
                    }
                    history.append(event)
                    bar.set_postfix(train=f"{last_loss:.4g}", test=f"{test_error:.4g}")
                    if len(history) % config.checkpoint_every == 0 and iteration < total_iterations:
                        write_checkpoint()
                    if _notify(callbacks, event):
                        stopped = True
                        break
    finally:
        bar.close()

    # ---- finish ---------------------------------------------------------------------
    if status == "diverged":
        test_error = DIVERGED_METRIC
        train_loss = DIVERGED_METRIC
    else:
        status = "stopped" if stopped else "completed"
        test_error = float(history[-1]["test_error"]) if history else DIVERGED_METRIC
        train_loss = _finite_or_sentinel(last_loss)
    if checkpoint_path is not None and iteration != resumed_from:
        write_checkpoint()
    best_test_error = best if math.isfinite(best) else DIVERGED_METRIC
    result = TrainResult(
        status=status,
        test_error=test_error,
        best_test_error=best_test_error,
        train_loss=train_loss,
        epochs_completed=iteration // iters_per_epoch,
        iterations_completed=iteration,
        history=history,
        seconds=time.perf_counter() - call_start,
        device=str(device),
        resumed_from=resumed_from,
    )
    end = {
        "event": "end",
        "status": status,
        "epoch": result.epochs_completed,
        "iteration": iteration,
        "train_loss": train_loss,
        "test_error": test_error,
        "best_test_error": best_test_error,
        "lr": _base_lr(optimizer),
        "seconds": elapsed(),
    }
    _notify(callbacks, end)
    return result
