"""The Ray Tune trainable of a proxy trial: our trainer plus a reporting callback.

One trial = :func:`mutransfer._training.train` on the proxy FNO (K = proxy_K)
with the sampled hyperparameters. Every evaluation (one per epoch) is sent to
Tune with ``tune.report``; ASHA may stop the trial there (Tune then ends the
trial's thread at the report call). A diverged run reports the finite
:data:`~mutransfer._training.DIVERGED_METRIC` with ``diverged = 1`` and ends
normally.

A trial is named by its stable key (``t0000`` …, mutransfer._sweep.plan), which the
searcher puts in its configuration as ``trial_key``; the driver keeps its configuration
and how it ended in the search's Optuna journal, and the trial's folder holds only the
files below. Nothing in the directory is unpickled: the checkpoint is read with
``torch.load(weights_only=True)`` (an unreadable one is deleted and the trial starts
over), the rest is JSON.

Idempotence (what makes ``--resume`` and retries cheap and exact):

- the trainer checkpoints into ``<study dir>/trials/<key>/`` after each
  evaluation; a restarted trial (retry after a failure, or the driver was killed)
  continues from it;
- the trial keeps its whole history (every epoch, those of earlier attempts
  included) in ``history.json`` in that directory, rewritten before each report;
  Tune gets scalars only (:class:`TrialReport`), and the driver reads the history
  with :func:`read_trial_history` when it writes the MLflow child run;
- a trial that finished writes ``done.json``; if it runs again (the driver was
  killed before it recorded the outcome), it re-reports the stored result
  without training.

Each start appends one line to ``executions.jsonl`` in the trial directory
(``kind`` = ``train`` or ``replay``), which the tests use to count executions.

Fault injection (for testing fault tolerance): with ``MUTRANSFER_FAIL_TRIALS=n``
in the driver's environment, the first n trial attempts of the study raise
:class:`InjectedFault` inside the Ray trial, before training. Attempts are
claimed with exclusive-create marker files in ``<study dir>/faults/``, so the
count holds across processes and across ``--resume``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from mutransfer._study.models import (
    effective_spectral_lr,
    eval_metrics,
    merge_hyperparameters,
    model_for,
    train_config,
)
from mutransfer._study.search_space import without_sizes
from mutransfer._study_folder.records import HISTORY_FILE
from mutransfer._study_folder.state import write_atomic
from mutransfer._training import DIVERGED_METRIC, EpochRecord, train
from mutransfer._training._population import Member, member_shape, population_key, train_population, why_alone
from mutransfer._training.checkpoint import CHECKPOINT_NAME, checkpoint_history, load_checkpoint
from mutransfer._training.memory import available_memory
from mutransfer._training.records import dump_history, load_history
from mutransfer.errors import UserInputError

FAIL_ENV = "MUTRANSFER_FAIL_TRIALS"
DONE_FILE = "done.json"


class InjectedFault(RuntimeError):
    """Raised by the fault-injection hook (MUTRANSFER_FAIL_TRIALS)."""


def fail_trials_from_env() -> int:
    """The MUTRANSFER_FAIL_TRIALS count of the driver's environment (0 when unset)."""

    raw = os.environ.get(FAIL_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise UserInputError(
            f"{FAIL_ENV}={raw!r}: must be a non-negative integer (number of trial attempts to fail)"
        ) from None
    if value < 0:
        raise UserInputError(f"{FAIL_ENV}={raw!r}: must be a non-negative integer (number of trial attempts to fail)")
    return value


def maybe_inject_fault(faults_dir: str | os.PathLike, count: int, trial_id: str) -> None:
    """Raise :class:`InjectedFault` if one of the first ``count`` attempt slots is still free."""
    if count <= 0:
        return
    faults = Path(faults_dir)
    faults.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        try:
            fd = os.open(faults / f"attempt-{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            f.write(trial_id)
        raise InjectedFault(f"injected fault {i + 1}/{count} in trial {trial_id} ({FAIL_ENV})")


def _log_execution(trial_dir: Path, kind: str, **extra) -> None:
    line = json.dumps({"kind": kind, "pid": os.getpid(), "time": time.time(), **extra})
    with open(trial_dir / "executions.jsonl", "a") as f:
        f.write(line + "\n")


def read_executions(trial_dir: str | os.PathLike) -> list[dict]:
    path = Path(trial_dir) / "executions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class TrialReport:
    """What a proxy trial reports to Tune: after each evaluation, and once more at the end
    if nothing was reported or it diverged (that last one is also stored in ``done.json``)."""

    epoch: int
    #: the error on the trial's held-out split: the validation split (mutransfer.data._validation)
    val_error: float
    train_loss: float
    lr: float
    trainer_seconds: float
    spectral_lr0: float
    diverged: int

    def metrics(self) -> dict:
        """The Tune metrics (scalars only). The one serialisation of a trial report."""
        return dataclasses.asdict(self)

    @classmethod
    def from_metrics(cls, metrics: dict) -> TrialReport:
        """From :meth:`metrics` (other keys, e.g. an older done.json's ``history_before``, are ignored)."""
        if "val_error" not in metrics and "test_error" in metrics:  # a done.json written before validation splits
            metrics = dict(metrics, val_error=metrics["test_error"])
        return cls(**{f.name: metrics[f.name] for f in dataclasses.fields(cls)})


def _write_done(trial_dir: Path, status: str, report: TrialReport) -> None:
    write_atomic(trial_dir / DONE_FILE, json.dumps({"status": status, "report": report.metrics()}))


def _read_done(trial_dir: Path) -> TrialReport:
    return TrialReport.from_metrics(json.loads((trial_dir / DONE_FILE).read_text())["report"])


def write_trial_history(trial_dir: str | os.PathLike, records: Iterable[EpochRecord]) -> None:
    """Replace ``history.json`` in ``trial_dir`` with ``records``, atomically."""

    write_atomic(Path(trial_dir) / HISTORY_FILE, json.dumps(dump_history(records)))


def read_trial_history(trial_dir: str | os.PathLike) -> list[EpochRecord]:
    """Every evaluation a proxy trial has made so far (all attempts, by epoch), from its directory.

    ``[]`` when it has none. A trial directory written before ``history.json``
    existed falls back to its trainer checkpoint's history.
    """

    trial_dir = Path(trial_dir)
    path = trial_dir / HISTORY_FILE
    if path.exists():
        try:
            return load_history(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable: fall back to the checkpoint

    if not (trial_dir / CHECKPOINT_NAME).exists():
        return []
    try:
        return checkpoint_history(load_checkpoint(trial_dir / CHECKPOINT_NAME))
    except (UserInputError, KeyError, TypeError, ValueError):
        return []


def proxy_trial(config: dict, data=None, study=None, options: dict | None = None) -> None:
    """Tune function trainable. ``data`` (SplitData), ``study`` and ``options`` come via tune.with_parameters.

    options: study_dir, threads, device, fail_trials, target_size (train the target's model instead of the
    proxy's: the direct-tuning baseline, ``sweep --baseline direct``), plan (the model's memory plan, made
    by the driver: Session.memory_plan; None: the trainer plans it).
    """
    from ray import tune  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)

    key = str(config.get("trial_key") or tune.get_context().get_trial_id())  # our key (mutransfer._sweep.plan)
    run_trial(key, config, data, study, options or {}, tune.report)


def run_trial(key: str, config: dict, data, study, options: dict, report: Callable[[dict], None]) -> None:
    """Train proxy trial ``key`` at ``config`` (its searched values), sending each :class:`TrialReport`'s metrics to
    ``report``: Tune's ``tune.report`` (:func:`proxy_trial`), or the in-process executor's, which raises to stop the
    trial where ASHA stops it (mutransfer._sweep._executors). ``options`` as :func:`proxy_trial`'s."""
    # One intra-op thread pool per trial CPU: oversubscribing 2 cores made torch 10-100x slower.
    torch.set_num_threads(max(1, int(options.get("threads", 1))))
    trial_id = key
    trial_dir = Path(options["study_dir"]) / "trials" / trial_id
    trial_dir.mkdir(parents=True, exist_ok=True)
    maybe_inject_fault(Path(options["study_dir"]) / "faults", int(options.get("fail_trials", 0)), trial_id)

    if (trial_dir / DONE_FILE).exists():
        _log_execution(trial_dir, "replay")
        report(_read_done(trial_dir).metrics())
        return

    hp, model, spectral_lr0, tconfig = _setup(config, data, study, options, trial_dir)

    history: list[EpochRecord] = []  # the trainer's history: the checkpoint's epochs, then this attempt's
    checkpoint = trial_dir / CHECKPOINT_NAME
    if checkpoint.exists():
        try:
            history = checkpoint_history(load_checkpoint(checkpoint))
        except (UserInputError, KeyError, TypeError, ValueError):
            checkpoint.unlink()  # unreadable (e.g. killed mid-write by an old version): start over
    _log_execution(trial_dir, "train", resumed_from_epoch=history[-1].epoch if history else None)
    reported = {"n": 0}

    def report_eval(event) -> None:
        if not isinstance(event, EpochRecord):
            return
        history.append(event)
        write_trial_history(trial_dir, history)  # before the report: ASHA may end the trial there
        reported["n"] += 1
        report(TrialReport(**eval_metrics(event, spectral_lr0, error_key="val_error"), diverged=0).metrics())

    result = train(model, data, tconfig, callbacks=[report_eval], resume=True, plan=options.get("plan"))
    _finish(trial_dir, result, hp["lr"], spectral_lr0, reported["n"], report)


def _setup(config: dict, data, study, options: dict, trial_dir: Path | None):
    """(hyperparameters, model, spectral LR at step 0, TrainConfig) of a trial; ``trial_dir``: where the trainer
    checkpoints (None: nowhere, a population member)."""
    hp = merge_hyperparameters(study, config)
    torch.manual_seed(study.training.seed)  # the init depends on the seed only, not on the worker's history
    at_target = bool(options.get("target_size"))  # the direct search: a searched proxy size does not apply
    model = model_for(study, data, target=at_target, hp=without_sizes(hp) if at_target else hp)
    spectral_lr0 = effective_spectral_lr(model, hp["lr"])
    tconfig = train_config(
        study,
        hp,
        epochs=study.budget.epochs,
        device=options.get("device", "cpu"),
        checkpoint_dir=None if trial_dir is None else str(trial_dir),
    )
    return hp, model, spectral_lr0, tconfig


def _finish(trial_dir: Path, result, lr: float, spectral_lr0: float, reported: int, report) -> None:
    """A trial's end: its whole history and ``done.json`` written, and its final report sent when it reported
    nothing yet or diverged."""
    last = result.history[-1] if result.history else None
    final = TrialReport(
        epoch=int(result.epochs_completed),
        val_error=float(result.test_error) if result.status != "diverged" else DIVERGED_METRIC,
        train_loss=float(result.train_loss),
        lr=last.lr if last else lr,
        trainer_seconds=float(result.trainer_seconds),
        spectral_lr0=spectral_lr0,
        diverged=1 if result.status == "diverged" else 0,
    )
    write_trial_history(trial_dir, result.history)
    _write_done(trial_dir, result.status, final)
    if reported == 0 or result.status == "diverged":
        report(final.metrics())


@dataclass(frozen=True)
class Together:
    """A trial ready to train in a population: its key, folder, hyperparameters, model, LR and configuration."""

    key: str
    trial_dir: Path
    hp: dict
    member: Member
    spectral_lr0: float


def _together(key: str, config: dict, data, study, options: dict) -> Together:
    hp, model, spectral_lr0, tconfig = _setup(config, data, study, options, None)
    return Together(key, Path(options["study_dir"]) / "trials" / key, hp, Member(model, tconfig), spectral_lr0)


def rebuilt_group(trials: list[tuple[str, dict]], data, study, options: dict) -> list[Together]:
    """A population's trials (key, configuration) made ready here, as :func:`population_groups` made them in the
    driver: a Ray task builds its members itself (a user's model class is imported where the task runs, never
    unpickled from the driver's objects)."""
    return [_together(key, config, data, study, options) for key, config in trials]


def population_groups(
    window: list[tuple[str, dict]], data, study, options: dict, why: dict[str, str] | None = None
) -> tuple[list[list[Together]], list[tuple[str, dict]]]:
    """Split a search's window into populations (trials that can train as one model: one shape, one batch size, …
    (mutransfer._training._population.population_key), two or more) and the trials that train alone: one that
    finished or has a checkpoint (it replays or resumes), one the study injects faults into, one whose model,
    precision, loss or data a population does not take, one with no partner. A population holds no more members
    than the device's memory holds (:func:`_members_that_fit`). ``why``, if given, gets each lone trial's reason
    (one phrase, by its key)."""
    groups: dict[tuple[object, ...], list[Together]] = {}
    alone: list[tuple[str, dict]] = []
    reasons: dict[str, str] = {} if why is None else why
    faults = int(options.get("fail_trials", 0)) > 0
    for key, config in window:
        trial_dir = Path(options["study_dir"]) / "trials" / key
        if faults or (trial_dir / DONE_FILE).exists() or (trial_dir / CHECKPOINT_NAME).exists():
            alone.append((key, config))
            finished = (trial_dir / DONE_FILE).exists()
            reasons[key] = (
                "faults are injected" if faults else "it finished before (replayed)" if finished else "it resumes"
            )
            continue
        together = _together(key, config, data, study, options)
        model, tconfig = together.member.model, together.member.config
        reason = why_alone(model, tconfig, data)
        if reason is not None:
            alone.append((key, config))
            reasons[key] = reason
            continue
        shape = member_shape(model)  # e.g. a searched init_scale
        groups.setdefault(population_key(tconfig) + shape, []).append(together)
    populations = []
    most = _members_that_fit(options)
    for whole in groups.values():
        for start in range(0, len(whole), most):
            group = whole[start : start + most]
            if len(group) == 1:
                alone.append((group[0].key, dict(window)[group[0].key]))
                reasons[group[0].key] = "no partner of its shape and batch size in its window"
            else:
                populations.append(group)
    return populations, alone


#: the share of the device's free memory a population may plan to take (the rest for the driver and the data)
POPULATION_MEMORY_SHARE = 0.8


def _members_that_fit(options: dict) -> int:
    """How many proxies one population may hold: as many as :data:`POPULATION_MEMORY_SHARE` of the device's free
    memory holds by the proxy's memory plan (``options["plan"]``, one training step; a population's step takes
    about its members' sum), checked before anything is built on the device; no limit without a plan, nor in a
    process without the device (a cluster's driver with no GPU: the population is sized where it trains,
    :func:`run_population`)."""
    plan = options.get("plan")
    device = str(options.get("device", "cpu"))
    if plan is None or (device.startswith("cuda") and not torch.cuda.is_available()):
        return 1 << 30
    free, _ = available_memory(device)
    return max(1, int(POPULATION_MEMORY_SHARE * free // max(1, int(plan.total_bytes))))


def run_population(group: list[Together], data, options: dict, report: Callable[[str, dict], bool]) -> list[int]:
    """Train ``group`` (from :func:`population_groups`) as one population: each member's evaluations reported as
    its trial alone reports them (``report(key, metrics)``, True to stop that trial: ASHA; ``time_total_s``: the
    member's share of the population's wall time, so the members' device-seconds add up to the population's;
    ``population``: how many trials trained together), its
    history and ``done.json`` written as :func:`run_trial` writes them; a stopped member writes no ``done.json`` (as
    a trial that Tune stopped). Each member writes its checkpoint after each evaluation, so a population cut short
    (the driver killed) resumes its trials alone where they were (:func:`population_groups` sends a trial with a
    checkpoint to :func:`run_trial`). The caller sets torch's threads (the executor's ``_threads``).

    The group is sized again against this process's device (:func:`_members_that_fit`): one grouped on a driver
    that lacks the device (a Ray task's GPU), or whose memory has changed, trains as consecutive populations that
    fit, each saying its own size. Returns the sizes of the populations it trained."""
    most = _members_that_fit(options)
    chunks = [group[start : start + most] for start in range(0, len(group), most)]
    for chunk in chunks:
        _train_together(chunk, data, report)
    return [len(chunk) for chunk in chunks]


def _train_together(group: list[Together], data, report: Callable[[str, dict], bool]) -> None:
    """:func:`run_population`'s one batched model, for a group that fits."""
    histories: list[list[EpochRecord]] = [[] for _ in group]
    for t in group:
        t.trial_dir.mkdir(parents=True, exist_ok=True)
        _log_execution(t.trial_dir, "train", resumed_from_epoch=None, population=len(group))

    size = len(group)

    def on_record(index: int, record: EpochRecord, wall: float) -> bool:
        t = group[index]
        histories[index].append(record)
        write_trial_history(t.trial_dir, histories[index])  # before the report, as a trial alone
        metrics = eval_metrics(record, t.spectral_lr0, error_key="val_error")
        return report(t.key, dict(TrialReport(**metrics, diverged=0).metrics(), time_total_s=wall, population=size))

    checkpoints = [t.trial_dir / CHECKPOINT_NAME for t in group]  # each member's, as its solo run writes it
    results = train_population([t.member for t in group], data, on_record, checkpoints)
    for t, result, history in zip(group, results, histories):
        if result.status != "stopped":

            def final(metrics: dict, key: str = t.key, wall: float = result.seconds) -> None:
                report(key, dict(metrics, time_total_s=wall, population=size))

            _finish(t.trial_dir, result, t.hp["lr"], t.spectral_lr0, len(history), final)
