"""What a study hands back, as typed values: its trials, the transfer, the trained target, the report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.report import format_report
from mutransfer._training.records import EpochRecord


@dataclass(frozen=True)
class TrialResult:
    """One proxy trial, as Optuna's ``FrozenTrial`` shows one: its number, parameters, value and state.

    ``number`` counts from 0 in the order the search handed trials out; ``key`` names its folder and MLflow run
    (``t0000``); ``params`` are the searched values, ``hyperparameters`` every training value it used; ``value`` is
    its last validation error (None for a failed trial); ``state`` is completed, pruned (stopped by ASHA), diverged or
    failed.

    Example:
        >>> study.best_trial.params  # doctest: +SKIP
        >>> [(t.number, t.state, t.value) for t in study.trials]  # doctest: +SKIP
    """

    number: int
    key: str
    params: dict[str, float | int | str]
    hyperparameters: dict[str, object]
    value: float | None
    state: str
    epochs: int
    mlflow_run_id: str | None

    @classmethod
    def of(cls, record: TrialRecord) -> TrialResult:
        return cls(
            number=record.index - 1,
            key=record.trial_id,
            params=dict(record.config),
            hyperparameters=dict(record.hp),
            value=record.val_error,
            state=record.status,
            epochs=record.epochs,
            mlflow_run_id=record.mlflow_run_id,
        )


@dataclass(frozen=True)
class TransferRecord:
    """The best proxy's hyperparameters carried to the target's size by the μP rules.

    ``proxy`` and ``target`` are the hyperparameters before and after; ``rules`` says what changed by which rule
    (``lr_factor``, ``init_variance_factor`` and the sizes, as operators.transfer records them); ``source`` is the
    trial it came from.

    Example:
        >>> record = study.transfer()  # doctest: +SKIP
        >>> record.proxy["lr"], record.target["lr"], record.rules["lr_factor"]  # doctest: +SKIP
    """

    proxy: dict[str, object]
    target: dict[str, object]
    rules: dict[str, object]
    source: str | None


@dataclass(frozen=True)
class TargetResult:
    """The trained target: the model (an ``nn.Module`` in eval mode on the CPU), its learning curve, its errors and
    where it is saved (a folder that ``mutransfer evaluate``/``predict`` and ``mutransfer.load_study`` read back).

    Example:
        >>> target = study.train_target()  # doctest: +SKIP
        >>> target.test_error, target.history[-1].epoch, target.model_dir  # doctest: +SKIP
    """

    model: nn.Module
    history: list[EpochRecord]
    test_error: float
    val_error: float | None
    hyperparameters: dict[str, object]
    model_dir: Path


@dataclass(frozen=True)
class Report:
    """The study's report: the same record ``mutransfer sweep --json`` prints, as JSON, text or the HTML page.

    Example:
        >>> report = study.report()  # doctest: +SKIP
        >>> print(report.to_text())  # doctest: +SKIP
    """

    data: dict
    study_dir: Path

    def to_json(self) -> str:
        """The report as JSON (``mutransfer sweep --json``'s output)."""
        return json.dumps(self.data, indent=2, default=str)

    def to_text(self) -> str:
        """The summary ``mutransfer sweep`` prints."""
        return format_report(self.data)

    def to_html(self) -> str:
        """The study's self-contained HTML page (``mutransfer report``)."""
        return (self.study_dir / "report.html").read_text(encoding="utf-8")
