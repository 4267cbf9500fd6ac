"""What a study folder keeps besides its state: the proxy trials' records and the names of its files.

- :class:`TrialRecord`: one proxy trial as the sweep reports it, stored in ``state.json``;
- :data:`HISTORY_FILE`: a trial's per-epoch history, inside the trial's folder;
- :data:`MODEL_DIR`: the trained target's model directory, inside the study's folder.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: a trial's per-epoch history (JSON), in the trial's folder
HISTORY_FILE = "history.json"
#: the trained target's model directory, in the study's folder
MODEL_DIR = "model"


@dataclass
class TrialRecord:
    """One proxy trial as the sweep reports it (from Tune's result and the trial's MLflow child run).

    ``val_error``: its last reported error on the validation split (what every selection compares); a record
    written before validation splits held its ``test_error`` there, and is read back into ``val_error`` (the
    report's ``selection.split`` says which split a study selected on).
    """

    trial_id: str
    index: int
    status: str  # completed | pruned | diverged | failed
    config: dict  # the searched hyperparameters
    hp: dict  # every hyperparameter of the trial (fixed ones included)
    val_error: float | None
    epochs: int
    trainer_seconds: float = 0.0
    wall_seconds: float = 0.0
    device_seconds: float = 0.0
    #: from Tune starting the trial to its end on the driver's clock (start-up included); 0 when not seen
    span_seconds: float = 0.0
    spectral_lr: float | None = None
    mlflow_run_id: str | None = None
    best: bool = False

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrialRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        if "val_error" not in d and "test_error" in d:  # written before validation splits
            d = dict(d, val_error=d["test_error"])
        return cls(**{k: v for k, v in d.items() if k in names})

    def summary(self) -> dict:
        """The best trial as the report and state show it (no timings)."""
        keys = ("trial_id", "index", "status", "config", "hp", "val_error", "epochs", "spectral_lr", "mlflow_run_id")
        return {k: getattr(self, k) for k in keys}
