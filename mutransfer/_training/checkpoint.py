"""The trainer's exact-resume checkpoint: its format, writing, reading, compatibility and restoring.

A checkpoint (``checkpoint.pt``, loadable with ``torch.load(weights_only=True)``)
holds model, optimizer, scheduler, loss scaler and RNG states, the iteration,
the status, the history (plain dicts, :func:`~mutransfer._training.records.dump_history`),
the best test error, the cumulative seconds and the settings it was written
under; a resumed run continues bit for bit where the interrupted one stopped.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mutransfer._atomic import atomic_path, save_torch
from mutransfer._training.config import TrainConfig
from mutransfer._training.records import EpochRecord, dump_history, load_history
from mutransfer.errors import UserInputError

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
    "warmup",
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
_FIELD_DEFAULTS = {
    "warmup": 0.0,
    "loss": "relative_l2",
    "data_weight": None,
    "physics_weight": None,
    "precision": "fp32",
}


def weights_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s state dict, tensors only. A user's model may put other things in it (neuraloperator's models add
    ``_metadata``: their constructor's arguments, functions included), which ``weights_only`` loading refuses; the
    model's config rebuilds them (operators.factory)."""
    return {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}


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
        save_torch(state, tmp)


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    """Load a checkpoint written by :func:`~mutransfer._training.train` (``weights_only=True``).

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


def checkpoint_history(state: dict) -> list[EpochRecord]:
    """The evaluations stored in a loaded checkpoint (entries of any version)."""
    return load_history(state.get("history", []))


def check_compatible(state: dict, config: TrainConfig, model_config, n_train: int, path: Path) -> None:
    """Refuse (one line) a checkpoint written under other trajectory settings, another model or training set."""
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


@dataclass
class ResumePoint:
    """The loop state a checkpoint restores (model, optimizer, scheduler, scaler and RNG are restored in place)."""

    iteration: int = 0
    history: list[EpochRecord] = field(default_factory=list)
    best: float = math.inf
    seconds: float = 0.0
    diverged: bool = False


def restore(state: dict, path: Path, *, model, optimizer, scheduler, amp, device: torch.device) -> ResumePoint:
    """Load a (compatible) checkpoint's states into the run's objects; return where the loop continues."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise UserInputError(
            f"checkpoint {path} does not fit this model ({str(exc).splitlines()[0]}); "
            "pass a new checkpoint dir or --no-resume"
        ) from None
    scheduler.load_state_dict(state["scheduler"])
    amp.load_state_dict(state.get("grad_scaler"))
    point = ResumePoint(
        iteration=int(state["iteration"]),
        history=checkpoint_history(state),
        best=float(state.get("best_test_error", math.inf)),
        seconds=float(state.get("seconds", 0.0)),
        diverged=state.get("status") == "diverged",
    )
    if state.get("rng_state") is not None:
        torch.set_rng_state(state["rng_state"].cpu())
    if device.type == "cuda" and state.get("cuda_rng_state"):
        cuda_states = [s.cpu() for s in state["cuda_rng_state"]]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
    return point


def checkpoint_state(
    *,
    model,
    optimizer,
    scheduler,
    amp,
    iteration: int,
    iters_per_epoch: int,
    status: str,
    history: list[EpochRecord],
    best: float,
    seconds: float,
    n_train: int,
    model_config,
    config: TrainConfig,
    device: torch.device,
) -> dict:
    """The dict :func:`save_checkpoint` writes (every value loadable with ``weights_only=True``)."""
    return {
        "version": CHECKPOINT_VERSION,
        "model": weights_of(model),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "grad_scaler": amp.state_dict(),
        "iteration": iteration,
        "epoch": iteration // iters_per_epoch,
        "status": status,
        "history": dump_history(history),
        "best_test_error": best,
        "seconds": seconds,
        "n_train": n_train,
        "model_config": _plain(model_config) if model_config is not None else None,
        "train_config": config.to_dict(),
        "rng_state": torch.get_rng_state(),
        "cuda_rng_state": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
    }
