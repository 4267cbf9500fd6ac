"""The study's lease in the MLflow tracking store: one driver per study, across machines.

The lease of study ``S`` is an MLflow experiment named ``mutransfer-lease/S`` (tag
``mutransfer.kind = lease``) whose tags hold the :class:`~mutransfer._study_folder.holder.Holder`
(``mutransfer.lease.holder``, JSON) and its heartbeat (``mutransfer.lease.heartbeat``,
unix seconds). Experiment names are unique in every MLflow store (a database
constraint), so **creating** that experiment is the atomic step: of two drivers that
try at once, one gets ``RESOURCE_ALREADY_EXISTS`` and reads who holds it.

- acquire: create the experiment; if it exists and its holder is alive, refuse
  (:class:`~mutransfer._study_folder.holder.StudyLocked`); if its holder is gone
  (``Holder.is_gone``: process gone on this host, or heartbeat older than
  :data:`STALE_SECONDS` from another host), rename the old one out of the way and
  create again (a racing taker loses at that create).
- heartbeat: the holder rewrites the heartbeat tag every :data:`HEARTBEAT_SECONDS`.
- release: rename the experiment to ``mutransfer-lease/S/released-<token>`` and delete
  it (MLflow keeps deleted experiments' names; ``mlflow gc`` purges them).
"""

from __future__ import annotations

import time

from mutransfer._study_folder.holder import HEARTBEAT_SECONDS, STALE_SECONDS, Holder, StudyLocked
from mutransfer._tracking.runs import _client

__all__ = ["HEARTBEAT_SECONDS", "STALE_SECONDS", "MlflowLease", "lease_name"]

KIND_TAG = "mutransfer.kind"
STUDY_TAG = "mutransfer.study"
HOLDER_TAG = "mutransfer.lease.holder"
HEARTBEAT_TAG = "mutransfer.lease.heartbeat"


def lease_name(study: str) -> str:
    return f"mutransfer-lease/{study}"


class MlflowLease:
    """The lease of one study in the store at ``uri``; :meth:`acquire` it, :meth:`beat` it, :meth:`release` it."""

    def __init__(self, uri: str, study: str, holder: Holder, *, stale_after: float = STALE_SECONDS):
        self.uri, self.study, self.holder, self.stale_after = uri, study, holder, stale_after
        self.client = _client(uri)
        self.experiment_id: str | None = None

    def acquire(self) -> Holder | None:
        """Take the lease; returns the dead holder it took over (None if it was free). Raises StudyLocked."""
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a lease is taken or freed

        taken_from = None
        for _ in range(5):
            tags = {
                KIND_TAG: "lease",
                STUDY_TAG: self.study,
                HOLDER_TAG: self.holder.to_json(),
                HEARTBEAT_TAG: repr(time.time()),
            }
            try:
                self.experiment_id = self.client.create_experiment(lease_name(self.study), tags=tags)
                return taken_from
            except MlflowException as exc:
                if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
            exp = self.client.get_experiment_by_name(lease_name(self.study))
            if exp is None:  # released in between: try again
                continue
            holder = Holder.from_json(exp.tags.get(HOLDER_TAG))
            beat = _float(exp.tags.get(HEARTBEAT_TAG))
            if (
                exp.lifecycle_stage == "active"
                and holder is not None
                and not holder.is_gone(beat, stale_after=self.stale_after)
            ):
                raise StudyLocked(self.study, holder, f"lease in MLflow {self.uri}")
            if exp.lifecycle_stage == "deleted":  # deleted by hand: its name still blocks a new lease
                self.client.restore_experiment(exp.experiment_id)
            self._retire(exp.experiment_id, f"dead-{holder.token if holder else 'unknown'}")
            taken_from = holder or taken_from
        raise StudyLocked(self.study, None, f"lease in MLflow {self.uri} changed hands 5 times while this driver tried")

    def beat(self) -> bool:
        """Refresh the heartbeat; False if the lease is no longer ours (taken over while we were silent)."""
        exp = self.client.get_experiment(self.experiment_id)
        if exp.lifecycle_stage != "active" or exp.tags.get(HOLDER_TAG) != self.holder.to_json():
            return False
        self.client.set_experiment_tag(self.experiment_id, HEARTBEAT_TAG, repr(time.time()))
        return True

    def release(self) -> None:
        """Give the lease up (only if it is still ours)."""
        if self.experiment_id is None:
            return
        exp = self.client.get_experiment(self.experiment_id)
        if exp.lifecycle_stage == "active" and exp.tags.get(HOLDER_TAG) == self.holder.to_json():
            self._retire(self.experiment_id, f"released-{self.holder.token}")
        self.experiment_id = None

    def _retire(self, experiment_id: str, suffix: str) -> None:
        """Free the lease's name: rename the experiment aside, then delete it (hidden from the UI)."""
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a lease is taken or freed

        try:
            self.client.rename_experiment(experiment_id, f"{lease_name(self.study)}/{suffix}")
            self.client.delete_experiment(experiment_id)
        except MlflowException:  # a racing driver retired it first
            pass


def _float(text: str | None) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None
