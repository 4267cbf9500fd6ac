"""The cost ledger of a study: one line per training, written where every training passes.

Every search trial, target and grid job of a study runs through the study's executor (mutransfer._sweep._executors);
:class:`Booked` wraps that executor and books each training it ran in ``<study dir>/costs.jsonl`` under the tag of
the phase that asked for it: ``core`` for the study's own proxies and target, a search strategy's ``name`` for its
phase's trainings (mutransfer._sweep.strategies.base.run_phase sets it). A strategy therefore cannot train without
its cost being recorded; the report counts a strategy's bookings on μTransfer's side of the ratios to direct tuning
unless the strategy says its trainings are a check (``Strategy.cost_side``).

One line per training, JSON::

    {"tag": "core", "key": "t0003", "kind": "trial", "epochs": 4, "trainer_device_seconds": 1.9,
     "device_seconds": 2.4, "flops": 1.2e9}

``key`` is unique within a study: a nested search's trial keys are prefixed with its folder (``direct/t0003``,
``rungs/r1/t0000``); a training booked again (resumed, or retrained after a kill) replaces its earlier line when
read (:meth:`Ledger.bookings`). FLOPs are None where the operator family has no count for the size trained.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, cast

from mutransfer._sweep._executors import Executor, SearchRun, TargetJob
from mutransfer._sweep.cost import model_epoch_flops, target_cost, trial_devices
from mutransfer._sweep.plan import trial_key
from mutransfer._sweep.target import TargetOutcome

LEDGER_FILE = "costs.jsonl"
#: the tag of the study's own proxies and target (a strategy's trainings carry its name)
CORE = "core"

Kind = Literal["trial", "target", "job"]


@dataclass(frozen=True)
class Booking:
    """One training: who asked for it (``tag``), which one (``key``), its epochs, its training time in
    device-seconds (trainer seconds × the devices it held), the devices' whole time held, and its FLOPs."""

    tag: str
    key: str
    kind: Kind
    epochs: int
    trainer_device_seconds: float
    device_seconds: float
    flops: float | None
    #: the trainer's own seconds (wall time of its epochs, whatever the devices)
    trainer_seconds: float = 0.0

    @classmethod
    def from_dict(cls, d: dict) -> Booking:
        kind = str(d["kind"])
        if kind not in ("trial", "target", "job"):
            raise ValueError(f"a booking of kind {kind!r}")
        flops = d.get("flops")
        return cls(
            tag=str(d["tag"]),
            key=str(d["key"]),
            kind=cast(Kind, kind),  # checked above
            epochs=int(d["epochs"]),
            trainer_device_seconds=float(d["trainer_device_seconds"]),
            device_seconds=float(d["device_seconds"]),
            flops=None if flops is None else float(flops),
            trainer_seconds=float(d.get("trainer_seconds") or 0.0),
        )


class Ledger:
    """``<study dir>/costs.jsonl``: bookings appended one line each, read back latest-per-key."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / LEDGER_FILE

    def book(self, booking: Booking) -> None:
        line = json.dumps(asdict(booking), separators=(",", ":")) + "\n"
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def bookings(self) -> list[Booking]:
        """Every training booked, the latest line of each (tag, key), in the order first booked; a line cut short
        by a kill (the last one) is skipped."""
        if not self.path.exists():
            return []
        latest: dict[tuple[str, str], Booking] = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                b = Booking.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue
            latest[(b.tag, b.key)] = b
        return list(latest.values())

    def key(self, folder: Path | str, name: str) -> str:
        """``name`` prefixed with ``folder`` relative to the study (a nested search's folder)."""
        try:
            rel = Path(folder).resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            rel = Path(folder).name
        return name if rel in ("", ".") else f"{rel}/{name}"


def tagged_bookings(bookings: Sequence[Booking], tag: str) -> list[Booking]:
    return [b for b in bookings if b.tag == tag]


def booked_cost(bookings: Sequence[Booking]) -> dict:
    """What ``bookings`` cost together: trainings, epochs, FLOPs (None when one is unknown), training and held
    device-seconds, and the trainer seconds of its search trials and of its other trainings (the critical path's
    two parts: trials run beside the proxies, a target or a grid job after the target)."""
    flops = [b.flops for b in bookings]
    return {
        "trainings": len(bookings),
        "epochs": sum(b.epochs for b in bookings),
        "flops": None if None in flops else sum(f for f in flops if f is not None),
        "trainer_device_seconds": sum(b.trainer_device_seconds for b in bookings),
        "device_seconds": sum(b.device_seconds for b in bookings),
        "search_trainer_seconds": sum(b.trainer_seconds for b in bookings if b.kind == "trial"),
        "target_trainer_seconds": sum(b.trainer_seconds for b in bookings if b.kind != "trial"),
    }


class Booked:
    """The study's executor, booking every training it runs in ``ledger`` under ``tag`` (see the module docstring).

    It is the executor a study's steps get (``Session.executor``); it runs nothing itself.
    """

    def __init__(self, inner: Executor, ledger: Ledger, tag: str = CORE):
        self.inner, self.ledger, self.tag = inner, ledger, tag
        self.name = inner.name
        self._grids = 0  # grid calls so far: a grid job's key names its call, so two grids never share a key

    def session(self, address: str | None, code: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[bool]:
        return self.inner.session(address, code)

    def resources(self) -> tuple[float, float]:
        return self.inner.resources()

    def search_shape(self, study) -> tuple[int, int]:
        return self.inner.search_shape(study)

    def search_note(self, window: int) -> str | None:
        return self.inner.search_note(window)

    def search_summary(self) -> str | None:
        return self.inner.search_summary()

    def held_cpus(self, jobs: int, threads: int) -> float:
        return self.inner.held_cpus(jobs, threads)

    def search(self, run: SearchRun) -> None:
        """The inner executor's search; every trial that finished is booked, also when the search is interrupted."""
        try:
            self.inner.search(run)
        finally:
            self._book_trials(run)

    def target(
        self, job: TargetJob, on_poll: Callable[[], None] | None, *, run: Callable[[], TargetOutcome] | None = None
    ) -> TargetOutcome:
        """Train the target (``run``: a run started early trains it instead of the inner executor) and book it."""
        outcome = run() if run is not None else self.inner.target(job, on_poll)
        shape = None if job.data is None else tuple(job.data.train_x.shape[1:])
        cost = target_cost(job.study, outcome, shape)
        self.ledger.book(
            Booking(
                self.tag,
                self.ledger.key(job.storage_dir, "target"),
                "target",
                int(outcome.epochs),
                float(cost["trainer_device_seconds"]),
                float(cost["device_seconds"]),
                cost["flops"],
                float(outcome.trainer_seconds),
            )
        )
        return outcome

    def grid(
        self, fn: Callable[..., dict], jobs: Sequence[tuple], *, threads: int, gpus: float, retries: int
    ) -> Iterator[tuple[int, dict]]:
        """The inner executor's grid; each job booked as it finishes (its FLOPs unknown here: None)."""
        held = self.inner.held_cpus(1, threads)
        self._grids += 1
        for index, record in self.inner.grid(fn, jobs, threads=threads, gpus=gpus, retries=retries):
            trainer = float(record.get("trainer_seconds") or 0.0)
            wall = float(record.get("wall_seconds") or trainer)
            self.ledger.book(
                Booking(
                    self.tag,
                    f"job/{self.tag}/{self._grids}/{index}",
                    "job",
                    int(record.get("epochs") or 0),
                    trainer * held,
                    wall * held,
                    None,
                    trainer,
                )
            )
            yield index, record

    @contextlib.contextmanager
    def tagged(self, tag: str) -> Iterator[None]:
        """Book under ``tag`` inside the block (a strategy's phase)."""
        before, self.tag = self.tag, tag
        try:
            yield
        finally:
            self.tag = before

    def _book_trials(self, run: SearchRun) -> None:
        folder = Path(run.options.get("study_dir") or self.ledger.root)
        at_target = bool(run.options.get("target_size"))
        shape = None if run.data is None else tuple(run.data.train_x.shape[1:])
        per_epoch = model_epoch_flops(run.study, at_target=at_target, input_shape=shape)
        devices = trial_devices(run.study)
        booked = {b.key for b in self.ledger.bookings() if b.tag == self.tag}
        for index, outcome in sorted(run.plan.outcomes.items()):
            key = self.ledger.key(folder, trial_key(index))
            if key in booked:
                continue
            m = outcome.metrics
            epochs = int(m.get("epoch") or 0)
            trainer = float(m.get("trainer_seconds") or 0.0)
            self.ledger.book(
                Booking(
                    self.tag,
                    key,
                    "trial",
                    epochs,
                    trainer * devices,
                    float(m.get("time_total_s") or trainer) * devices,
                    None if per_epoch is None else epochs * per_epoch,
                    trainer,
                )
            )
