"""The Python API's trial callbacks (``Study.optimize(callbacks=[fn(study, trial)])``) as an observer of a search's
trials: each ended trial told once, as a :class:`~mutransfer.TrialResult`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from mutransfer._api.results import TrialResult
from mutransfer._api.spec import StudySpec
from mutransfer._sweep.plan import key_index, trial_status


class _Searched(Protocol):
    """What the callbacks read of the study they are told about (a mutransfer.Study)."""

    @property
    def spec(self) -> StudySpec: ...


S = TypeVar("S", bound=_Searched)


class UserCallbacks(Generic[S]):
    """The Python API's callbacks as an observer of the search's trials (mutransfer._sweep._executors.TrialCallback)."""

    def __init__(self, study: S, callbacks: Sequence[Callable[[S, TrialResult], None]]):
        self.study, self.callbacks = study, list(callbacks)

    def __getstate__(self) -> dict:  # Ray Tune stores its callbacks (never read back): a copy calls nothing
        return {"study": None, "callbacks": []}

    def on_trial_start(self, trial) -> None:
        pass

    def on_trial_result(self, trial, result: dict) -> None:
        pass

    def on_trial_recover(self, trial) -> None:
        pass

    def on_trial_complete(self, trial) -> None:
        self._tell(trial, failed=False)

    def on_trial_error(self, trial) -> None:
        self._tell(trial, failed=True)

    def _tell(self, trial, *, failed: bool) -> None:
        if self.study is None:
            return
        config = dict(trial.config or {})
        key = str(config.pop("trial_key"))
        last = dict(trial.last_result or {})
        value = last.get("val_error")
        result = TrialResult(
            number=key_index(key),
            key=key,
            params=config,
            hyperparameters={},
            value=None if failed or value is None else float(value),
            state=trial_status(last, failed, self.study.spec.study.budget.epochs),
            epochs=int(last.get("epoch", 0) or 0),
            mlflow_run_id=None,
        )
        for callback in self.callbacks:
            callback(self.study, result)
