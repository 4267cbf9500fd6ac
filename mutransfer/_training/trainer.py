"""Training loop for neural operators: Adam with muP param groups, per-iteration
LR schedules, divergence detection, callbacks and exact checkpoint/resume.

Resume is exact: the batch order of epoch e is drawn from a generator seeded
with (seed, e), and the checkpoint holds model, optimizer, scheduler and the
global torch RNG state, so an interrupted run continued with ``resume=True``
ends in the same state as an uninterrupted one.

The run's steps are the methods of :class:`_Run`: setup (``__init__``), resume,
one epoch, one optimisation step, one evaluation, checkpoint and finish. The
configuration lives in :mod:`mutransfer._training.config`, the checkpoint format
in :mod:`mutransfer._training.checkpoint`, the records in :mod:`mutransfer._training.records`.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from mutransfer._config.progress import bar_disabled
from mutransfer._training._schedule_of import schedule_for
from mutransfer._training.checkpoint import (
    CHECKPOINT_NAME,
    CHECKPOINT_VERSION,
    TRAJECTORY_FIELDS,
    ResumePoint,
    check_compatible,
    checkpoint_state,
    load_checkpoint,
    restore,
    save_checkpoint,
)
from mutransfer._training.config import TrainConfig, resolve_device
from mutransfer._training.evaluation import base_lr as _base_lr
from mutransfer._training.evaluation import evaluate
from mutransfer._training.memory import available_memory, check_fits, check_model_fits
from mutransfer._training.pino import build_loss
from mutransfer._training.precision import Precision
from mutransfer._training.precision import all_finite as _all_finite
from mutransfer._training.records import DIVERGED_METRIC, EpochRecord, TrainEnd, TrainResult
from mutransfer.data._streaming import LazySamples, iterate_batches
from mutransfer.errors import UserInputError
from operators.parametrization import clip_spectral_gradients, optimizer_param_groups

__all__ = [
    "CHECKPOINT_NAME",
    "CHECKPOINT_VERSION",
    "DIVERGED_METRIC",
    "EXPLODED_LOSS",
    "TRAJECTORY_FIELDS",
    "Callback",
    "EpochRecord",
    "StopTraining",
    "TrainConfig",
    "TrainEnd",
    "TrainResult",
    "evaluate",
    "load_checkpoint",
    "resolve_device",
    "save_checkpoint",
    "train",
]

#: A finite loss or test error above this also counts as diverged: a relative L2 of
#: 1e4 means predictions 10^4 times the size of the targets (the weights blew up).
EXPLODED_LOSS = 1e4

#: A callback gets an :class:`EpochRecord` per evaluation and a :class:`TrainEnd` at the end.
Callback = Callable[[EpochRecord | TrainEnd], Any]


class StopTraining(Exception):
    """Raised by a callback to end the run early (status "stopped")."""


# --------------------------------------------------------------------------- helpers


Samples = torch.Tensor | LazySamples


def _check_data(data) -> tuple[Samples, Samples, Samples, Samples, Samples | None, Samples | None]:
    """(train_x, train_y, test_x, test_y, val_x, val_y); the validation pair is optional (None, None)."""
    tensors: list[Samples | None] = []
    for name in ("train_x", "train_y", "test_x", "test_y", "val_x", "val_y"):
        value = getattr(data, name, None)
        if value is None and name.startswith("val_"):
            tensors.append(None)
            continue
        if not isinstance(value, (torch.Tensor, LazySamples)):
            raise UserInputError(
                f"data.{name}: expected a torch tensor of shape (n, *grid, channels), got {type(value).__name__}"
            )
        tensors.append(value)
    train_x, train_y, test_x, test_y, val_x, val_y = tensors
    assert train_x is not None and train_y is not None and test_x is not None and test_y is not None
    if (val_x is None) != (val_y is None):
        raise UserInputError("data.val_x/val_y: give both or neither")
    splits: list[tuple[str, Samples | None, Samples | None]] = [("train", train_x, train_y), ("test", test_x, test_y)]
    if val_x is not None:
        splits.append(("val", val_x, val_y))
    for split, x, y in splits:
        assert x is not None and y is not None
        if x.shape[0] != y.shape[0] or x.shape[0] == 0:
            raise UserInputError(
                f"data.{split}_x/{split}_y: need the same, non-zero number of samples (got {x.shape[0]} and {y.shape[0]})"
            )
    return train_x, train_y, test_x, test_y, val_x, val_y


def _epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """Shuffled indices (n,) for ``epoch``, a pure function of (seed, epoch)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def _notify(callbacks: Iterable[Callback], event: EpochRecord | TrainEnd) -> bool:
    """Call every callback with ``event`` (immutable); True if one raised StopTraining."""
    stop = False
    for callback in callbacks:
        try:
            callback(event)
        except StopTraining:
            stop = True
    return stop


def _check_memory(model: nn.Module, train_x, config: TrainConfig, device: torch.device, plan=None) -> None:
    """Refuse (one line) a model whose training step does not fit the device, before moving it there.

    ``plan``: the model's plan when the caller already made it (``mutransfer train``), held
    against the device as it is; else the model's family plans it here.
    """
    limit, where = config.device_memory, None
    if limit is None and device.type == "cpu" and not os.environ.get("MUTRANSFER_DEVICE_MEMORY"):
        # the model's weights already sit in RAM, so they are not part of what is still available

        limit = available_memory("cpu")[0] + sum(p.numel() * p.element_size() for p in model.parameters())
        where = "the available RAM (with the model's weights)"
    if plan is not None:
        check_fits(plan, device, limit=limit, where=where)
        return
    check_model_fits(
        model,
        tuple(train_x.shape[1:-1]),
        config.batch_size,
        device,
        precision=config.precision,
        weight_decay=config.weight_decay,
        limit=limit,
        where=where,
    )


def _finite_or_sentinel(value: float) -> float:
    return value if math.isfinite(value) else DIVERGED_METRIC


# --------------------------------------------------------------------------- the run


class _Run:
    """One call of :func:`train`: what setup builds, the loop's state, and the loop's steps."""

    def __init__(self, model: nn.Module, data, config: TrainConfig, callbacks: Iterable[Callback], plan=None):
        config.validate()
        self.call_start = time.perf_counter()
        #: when training starts (:meth:`loop`): the run's clock leaves out setup, whose first optimizer of a
        #: process imports torch._dynamo (1.1-1.5 s, once per process: docs/results.md)
        self.clock_start: float | None = None
        #: seconds since clock_start spent writing checkpoints and in the callbacks (a trial's report to Tune, the
        #: target's to Ray Train): overhead, left out of the clock like setup
        self.off_clock = 0.0
        self.config = config
        self.callbacks = list(callbacks)
        self.device = device = resolve_device(config.device)
        if device.type == "cpu":
            # Denormal floats (e.g. in Adam's squared-gradient state) made CPU steps up to
            # 100x slower in benchmarks/bench_fno_step.py; flushing them costs no accuracy that matters.
            torch.set_flush_denormal(True)
        self.train_x, self.train_y, self.test_x, self.test_y, self.val_x, self.val_y = _check_data(data)
        self.n_train = self.train_x.shape[0]
        self.iters_per_epoch = math.ceil(self.n_train / config.batch_size)
        unit = self.iters_per_epoch if config.epochs is not None else 1
        self.total_iterations = config.epochs * self.iters_per_epoch if config.epochs is not None else config.iterations
        self.eval_interval = config.eval_every * unit

        _check_memory(model, self.train_x, config, device, plan)
        torch.manual_seed(config.seed)
        self.model = model
        model.to(device)
        model.train()
        self.optimizer, self.scheduler = self._optimizer(unit)
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.model_config = getattr(model, "config", None)
        self.loss_fn = build_loss(config.loss, data_weight=config.data_weight, physics_weight=config.physics_weight)
        self.amp = Precision(config.precision, device)
        streamed = isinstance(self.train_x, LazySamples)
        self.workers = config.data_workers if config.data_workers is not None else (2 if streamed else 0)

        # loop state (resume() may restore it)
        self.iteration = 0
        self.history: list[EpochRecord] = []
        self.best = math.inf
        self.prior_seconds = 0.0
        self.resumed_from: int | None = None
        self.status = "running"
        self.stopped = False
        self.loss_sum, self.loss_count = 0.0, 0
        self.last_loss = math.nan
        self.checkpoint_path = (
            Path(config.checkpoint_dir) / CHECKPOINT_NAME if config.checkpoint_dir is not None else None
        )
        if (
            self.checkpoint_path is not None
            and self.checkpoint_path.parent.exists()
            and not self.checkpoint_path.parent.is_dir()
        ):
            raise UserInputError(
                f"checkpoint_dir {config.checkpoint_dir}: exists and is not a directory; pass a directory path"
            )

    def _optimizer(self, unit: int):
        """Adam over the model's muP parameter groups, and the per-iteration LR schedule (``unit``: iterations per budget unit)."""
        config = self.config
        groups = [g for g in optimizer_param_groups(self.model, config.lr, config.weight_decay) if g["params"]]
        if not groups:
            raise UserInputError("model: has no trainable parameters; check requires_grad on its parameters")
        optimizer = torch.optim.Adam(groups, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
        assert self.total_iterations is not None  # config.validate(): epochs or iterations
        return optimizer, schedule_for(optimizer, config, self.total_iterations, unit)

    # ---- resume / checkpoint -----------------------------------------------------------
    def resume(self) -> None:
        """Continue from the checkpoint in ``checkpoint_dir``, if there is one (refused if it does not fit)."""
        path = self.checkpoint_path
        if path is None or not path.exists():
            return
        state = load_checkpoint(path, map_location=self.device)
        check_compatible(state, self.config, self.model_config, self.n_train, path)
        point: ResumePoint = restore(
            state,
            path,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            amp=self.amp,
            device=self.device,
        )
        self.iteration = self.resumed_from = point.iteration
        self.history = point.history
        self.best = point.best
        self.prior_seconds = point.seconds
        if point.diverged:
            self.status = "diverged"
        if self.history:
            self.last_loss = self.history[-1].train_loss

    def elapsed(self) -> float:
        """Training seconds of the run so far, across resumed sessions: from the start of :meth:`loop` (setup, resume
        and imports left out) to now."""
        if self.clock_start is None:
            return self.prior_seconds
        return self.prior_seconds + time.perf_counter() - self.clock_start - self.off_clock

    @contextlib.contextmanager
    def _clock_stopped(self) -> Iterator[None]:
        """The clock stands still inside: checkpoints and callbacks are overhead, not training."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.off_clock += time.perf_counter() - start

    def write_checkpoint(self) -> None:
        """The exact-resume state to ``checkpoint_dir`` (off the clock: writing it is overhead)."""
        if self.checkpoint_path is None:
            return
        with self._clock_stopped():
            state = checkpoint_state(
                model=self.model,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                amp=self.amp,
                iteration=self.iteration,
                iters_per_epoch=self.iters_per_epoch,
                status=self.status,
                history=self.history,
                best=self.best,
                seconds=self.elapsed(),
                n_train=self.n_train,
                model_config=self.model_config,
                config=self.config,
                device=self.device,
            )
            save_checkpoint(state, self.checkpoint_path)

    # ---- the loop ------------------------------------------------------------------------
    def loop(self) -> None:
        """Epochs until the budget is spent, the run diverges or a callback stops it."""
        self.clock_start = time.perf_counter()
        bar = tqdm(
            total=self.total_iterations,
            initial=self.iteration,
            disable=bar_disabled(self.config.progress),
            unit="it",
            leave=False,
            dynamic_ncols=True,
        )
        try:
            while self.status == "running" and self.iteration < self.total_iterations and not self.stopped:
                self.run_epoch(bar)
        finally:
            bar.close()

    def run_epoch(self, bar) -> None:
        """Train from the current iteration to the end of its epoch (or of the budget), evaluating on schedule."""
        config, ipe = self.config, self.iters_per_epoch
        order = _epoch_permutation(self.n_train, config.seed, self.iteration // ipe)
        batches = iterate_batches(
            self.train_x,
            self.train_y,
            order,
            config.batch_size,
            self.iteration % ipe,
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
        )
        for xb, yb in batches:
            if self.iteration >= self.total_iterations:
                break
            if not self.step(xb, yb):
                break
            bar.update(1)
            if not _all_finite(self.params):
                self.status = "diverged"
                break
            if self.iteration % self.eval_interval == 0 or self.iteration == self.total_iterations:
                record = self.evaluate()
                if record is None:
                    break
                bar.set_postfix(train=f"{record.train_loss:.4g}", test=f"{record.test_error:.4g}")
                if len(self.history) % config.checkpoint_every == 0 and self.iteration < self.total_iterations:
                    self.write_checkpoint()
                with self._clock_stopped():
                    stop = _notify(self.callbacks, record)
                if stop:
                    self.stopped = True
                    break

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> bool:
        """One optimisation step; False (status "diverged", no step taken) for a non-finite or exploded loss."""
        model, optimizer, amp = self.model, self.optimizer, self.amp
        xb = xb.to(self.device, non_blocking=True)
        yb = yb.to(self.device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with amp.autocast():
            pred = model(xb)
        loss, data_loss = self.loss_fn(pred.float(), yb, xb)  # data_loss: the relative L2 part
        loss_value = float(loss.detach())
        if not math.isfinite(loss_value) or float(data_loss.detach()) > EXPLODED_LOSS:
            self.status = "diverged"
            return False
        amp.backward(loss)
        amp.unscale(optimizer)  # fp16: clip the true gradients, not the scaled ones
        clip_spectral_gradients(model, self.config.clip_value)
        amp.step(optimizer)
        with warnings.catch_warnings():
            # fp16 skips a step whose gradients overflowed; the schedule still advances (as with GradScaler)
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
            self.scheduler.step()
        self.iteration += 1
        self.loss_sum += loss_value
        self.loss_count += 1
        return True

    def evaluate(self) -> EpochRecord | None:
        """Measure the test (and validation) error, append the record to the history; None (status "diverged") if
        it blew up."""
        test_error = evaluate(self.model, self.test_x, self.test_y, self.config.batch_size, self.device, self.amp)
        if not math.isfinite(test_error) or test_error > EXPLODED_LOSS:
            self.status = "diverged"
            return None
        val_error = None
        if self.val_x is not None and self.val_y is not None:
            val_error = evaluate(self.model, self.val_x, self.val_y, self.config.batch_size, self.device, self.amp)
        self.last_loss = self.loss_sum / self.loss_count
        self.loss_sum, self.loss_count = 0.0, 0
        self.best = min(self.best, test_error)
        record = EpochRecord(
            epoch=self.iteration // self.iters_per_epoch,
            iteration=self.iteration,
            train_loss=self.last_loss,
            test_error=test_error,
            lr=_base_lr(self.optimizer),
            seconds=self.elapsed(),
            val_error=val_error,
        )
        self.history.append(record)
        return record

    # ---- the end -------------------------------------------------------------------------
    def finish(self) -> TrainResult:
        """Final status and errors, the last checkpoint, the result, and the end event to the callbacks."""
        val_error: float | None = None
        if self.status == "diverged":
            test_error = train_loss = DIVERGED_METRIC
            val_error = DIVERGED_METRIC if self.val_x is not None else None
        else:
            self.status = "stopped" if self.stopped else "completed"
            test_error = self.history[-1].test_error if self.history else DIVERGED_METRIC
            if self.val_x is not None:
                val_error = self.history[-1].val_error if self.history else DIVERGED_METRIC
            train_loss = _finite_or_sentinel(self.last_loss)
        if self.checkpoint_path is not None and self.iteration != self.resumed_from:
            self.write_checkpoint()
        best_test_error = self.best if math.isfinite(self.best) else DIVERGED_METRIC
        result = TrainResult(
            status=self.status,
            test_error=test_error,
            best_test_error=best_test_error,
            train_loss=train_loss,
            epochs_completed=self.iteration // self.iters_per_epoch,
            iterations_completed=self.iteration,
            history=self.history,
            seconds=time.perf_counter() - self.call_start,
            device=str(self.device),
            resumed_from=self.resumed_from,
            val_error=val_error,
            trainer_seconds=self.elapsed(),
        )
        end = TrainEnd(
            status=self.status,
            epoch=result.epochs_completed,
            iteration=self.iteration,
            train_loss=train_loss,
            test_error=test_error,
            best_test_error=best_test_error,
            lr=_base_lr(self.optimizer),
            seconds=self.elapsed(),
        )
        _notify(self.callbacks, end)
        return result


def train(
    model: nn.Module,
    data,
    config: TrainConfig,
    *,
    callbacks: Iterable[Callback] = (),
    resume: bool = True,
    plan=None,
) -> TrainResult:
    """Train ``model`` on ``data`` and return a :class:`TrainResult`.

    ``data`` has ``train_x, train_y, test_x, test_y``: tensors of shape
    (n, *grid, C) (channel-last), and optionally ``val_x, val_y`` (a validation split, evaluated beside the
    test split at every evaluation: ``EpochRecord.val_error``). ``test_x``/``test_y`` is the split the
    run is judged by; a selection run is handed the validation samples there and no test samples at all
    (mutransfer.data._validation.SelectionSplit). Loss: ``config.loss`` (mean relative L2 over the
    batch, or the PINO Darcy loss of mutransfer._training.pino); the test metric
    is always the mean relative L2.
    Each callback gets one :class:`EpochRecord` per evaluation (``event`` "eval")
    and a final :class:`TrainEnd` (``event`` "end", with the status); raising
    :class:`StopTraining` ends the run with status "stopped". Divergence
    (non-finite loss or parameters) ends the run with status "diverged" and
    ``test_error = DIVERGED_METRIC``; no exception. ``plan``: the model's memory plan when the
    caller made it already (its family's ``plan``), so it is not planned twice.
    """
    run = _Run(model, data, config, callbacks, plan)
    if resume:
        run.resume()
    run.loop()
    return run.finish()
