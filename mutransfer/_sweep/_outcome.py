"""A proxy trial's key (``t0003``) and how it ended (:class:`Outcome`): what the search's journal holds of a finished
trial (mutransfer._sweep._trial_journal), and what a plan tells its sampler."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mutransfer._sweep.sampling import PRUNED, Told

#: the last result's metrics an outcome keeps (mutransfer._sweep.trial.TrialReport, and Tune's wall time)
OUTCOME_METRICS = (
    "epoch",
    "val_error",
    "train_loss",
    "lr",
    "trainer_seconds",
    "spectral_lr0",
    "diverged",
    "time_total_s",
)


def trial_key(index: int) -> str:
    """``t0000`` for index 0: the stable name of a trial (directory, MLflow tag, report)."""
    return f"t{index:04d}"


def key_index(key: str) -> int:
    """The index of a key made by :func:`trial_key` (ValueError for anything else)."""
    if not (key.startswith("t") and key[1:].isdigit()):
        raise ValueError(f"not a trial key: {key!r}")
    return int(key[1:])


def trial_status(metrics: dict, failed: bool, budget_epochs: int) -> str:
    """completed | pruned | diverged | failed, from a trial's last reported metrics."""
    if failed:
        return "failed"
    if metrics.get("diverged"):
        return "diverged"
    if int(metrics.get("epoch", 0) or 0) < budget_epochs:
        return "pruned"
    return "completed"


@dataclass
class Outcome:
    """How a trial ended: ``status`` (completed | pruned | diverged | failed), its last reported ``metrics``, a failed
    one's ``error`` (the journal's user attributes ``mutransfer.status``, ``.metrics``, ``.error``). ``rungs``: its
    validation error at the ASHA rungs it reached, as an ``outcome.json`` written before the journal held its
    intermediate values kept them (epoch -> value; {} since then)."""

    status: str
    metrics: dict = field(default_factory=dict)
    error: str | None = None
    rungs: dict[int, float] = field(default_factory=dict)

    @property
    def value(self) -> float | None:
        """The result the sampler is told: the last reported validation error (None for a failed trial); an
        outcome written before validation splits holds its ``test_error``."""
        value = self.metrics.get("val_error", self.metrics.get("test_error"))
        if self.status == "failed" or value is None:
            return None
        return float(value)

    def told(self, objectives: str) -> Told:
        """What a search on ``objectives`` (``search.objectives``) tells its sampler of this trial: its
        :attr:`value`; for ``error+seconds``, (validation error, training seconds) of a trial that ran its whole
        budget, :data:`~mutransfer._sweep.sampling.PRUNED` for a pruned one (its seconds are a part of a training's;
        Optuna's samplers count a pruned trial as a poor one), None for a failed or diverged one."""
        if objectives == "error":
            return self.value
        seconds = self.metrics.get("trainer_seconds")
        if self.status == "pruned":
            return PRUNED
        if self.status != "completed" or self.value is None or not seconds:
            return None
        return self.value, float(seconds)

    def as_dict(self) -> dict:
        d = dict(asdict(self), rungs={str(k): v for k, v in self.rungs.items()})
        if not self.rungs:
            del d["rungs"]  # the journal holds them (SearchPlan.should_stop)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Outcome:
        return cls(
            status=str(d["status"]),
            metrics=dict(d.get("metrics") or {}),
            error=d.get("error"),
            rungs={int(k): float(v) for k, v in (d.get("rungs") or {}).items()},
        )
