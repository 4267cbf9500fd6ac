"""The typed records of a training run: one :class:`EpochRecord` per evaluation, the end event, the result.

An :class:`EpochRecord` is the one shape an evaluation takes from the trainer
to the report: the trainer's history, the callbacks' evaluation events, the
checkpoint's ``history``, a proxy trial's ``history.json`` and the target's
summary all hold it. :func:`dump_history` / :func:`load_history` are its one
serialisation (plain dicts, for JSON and ``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

#: Finite test error reported for a diverged run (worse than any sane relative L2).
DIVERGED_METRIC = 10.0


@dataclass(frozen=True)
class EpochRecord:
    """One evaluation of a run: where it was taken and what it measured.

    ``epoch`` counts completed epochs at the evaluation, ``iteration`` the optimizer
    steps; ``train_loss`` is the mean training loss since the previous evaluation,
    ``test_error`` the mean relative L2 on the test split, ``lr`` the schedule's
    master LR (the multiplier-1 parameter group), ``seconds`` the run's cumulative
    training time (across resumed sessions): steps and evaluations, without setup, checkpoint
    writes or the callbacks.
    """

    #: the ``event`` tag of evaluations (callbacks get :class:`EpochRecord` and :class:`TrainEnd` events)
    event: ClassVar[str] = "eval"

    epoch: int
    iteration: int
    train_loss: float
    test_error: float
    lr: float
    seconds: float
    #: mean relative L2 on the validation split, when the run was given one (else None)
    val_error: float | None = None

    def as_dict(self) -> dict:
        """Plain dict, tagged ``"event": "eval"`` (the shape checkpoints and ``--json`` have always held)."""
        return {"event": self.event, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> EpochRecord:
        """From :meth:`as_dict` output or an older checkpoint's history entry (extra keys are ignored)."""
        return cls(
            epoch=int(d["epoch"]),
            iteration=int(d["iteration"]),
            train_loss=float(d["train_loss"]),
            test_error=float(d["test_error"]),
            lr=float(d["lr"]),
            seconds=float(d["seconds"]),
            val_error=None if d.get("val_error") is None else float(d["val_error"]),
        )


_EPOCH_FIELDS = frozenset(f.name for f in dataclasses.fields(EpochRecord))


def dump_history(records: Iterable[EpochRecord]) -> list[dict]:
    """Records → plain dicts (JSON, checkpoints). The one serialisation of a history."""
    return [r.as_dict() for r in records]


def load_history(items: Iterable[dict]) -> list[EpochRecord]:
    """Plain dicts (from :func:`dump_history`, or an older checkpoint) → records."""
    return [EpochRecord.from_dict(d) for d in items]


@dataclass(frozen=True)
class TrainEnd:
    """The last callback event of a run (after the last evaluation, or at divergence/stop); ``seconds`` is the run's
    cumulative training time, as :class:`EpochRecord`'s."""

    event: ClassVar[str] = "end"

    status: str
    epoch: int
    iteration: int
    train_loss: float
    test_error: float
    best_test_error: float
    lr: float
    seconds: float

    def as_dict(self) -> dict:
        return {"event": self.event, **dataclasses.asdict(self)}


@dataclass
class TrainResult:
    """Outcome of :func:`~mutransfer._training.train`.

    ``test_error`` is the final mean relative L2 on the test set, or
    :data:`DIVERGED_METRIC` when diverged. ``history`` holds one
    :class:`EpochRecord` per evaluation (cumulative ``seconds`` across resumed
    sessions); ``seconds`` is this call's wall time (setup, checkpoints and callbacks
    included), ``trainer_seconds`` the run's cumulative training time at its end (the
    history's clock, steps after the last evaluation included). ``resumed_from`` is the
    checkpoint's iteration.
    """

    status: str
    test_error: float
    best_test_error: float
    train_loss: float
    epochs_completed: int
    iterations_completed: int
    history: list[EpochRecord] = field(default_factory=list)
    seconds: float = 0.0
    device: str = "cpu"
    resumed_from: int | None = None
    #: the final validation error when the run was given a validation split
    val_error: float | None = None
    trainer_seconds: float = 0.0

    def as_dict(self) -> dict:
        """Plain dict for JSON (the history through :func:`dump_history`)."""
        d = dataclasses.asdict(self)
        d["history"] = dump_history(self.history)
        return d
