"""The Ray Tune trainable of a proxy trial: our trainer plus a reporting callback.

One trial = :func:`mutransfer.training.train` on the proxy FNO (K = proxy_K)
with the sampled hyperparameters. Every evaluation (one per epoch) is sent to
Tune with ``tune.report``; ASHA may stop the trial there (Tune then ends the
trial's thread at the report call). A diverged run reports the finite
:data:`~mutransfer.training.DIVERGED_METRIC` with ``diverged = 1`` and ends
normally.

Idempotence (what makes ``--resume`` and retries cheap and exact):

- the trainer checkpoints into ``<study dir>/trials/<trial id>/`` after each
  evaluation; a restarted trial (retry after a failure, or the driver was killed)
  continues from it, and its first report carries the earlier epochs
  (``history_before``) so the MLflow child run still gets every epoch;
- a trial that finished writes ``done.json``; if Tune runs it again (it
  finished after the last experiment snapshot), it re-reports the stored result
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

import json
import os
import time
from pathlib import Path

FAIL_ENV = "MUTRANSFER_FAIL_TRIALS"


class InjectedFault(RuntimeError):
    """Raised by the fault-injection hook (MUTRANSFER_FAIL_TRIALS)."""


def fail_trials_from_env() -> int:
    """The MUTRANSFER_FAIL_TRIALS count of the driver's environment (0 when unset)."""
    from mutransfer.errors import UserInputError

    raw = os.environ.get(FAIL_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise UserInputError(f"{FAIL_ENV}={raw!r}: must be a non-negative integer (number of trial attempts to fail)") from None
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


def _compact(event: dict) -> list:
    """[epoch, test_error, train_loss, lr, seconds] of one trainer evaluation."""
    return [int(event["epoch"]), float(event["test_error"]), float(event["train_loss"]), float(event["lr"]), float(event["seconds"])]


def proxy_trial(config: dict, data=None, study=None, options: dict | None = None) -> None:
    """Tune function trainable. ``data`` (SplitData), ``study`` and ``options`` come via tune.with_parameters.

    options: study_dir, threads, device, fail_trials.
    """
    import torch
    from ray import tune

    from mutransfer.errors import UserInputError
    from mutransfer.sweep.hparams import effective_spectral_lr, eval_metrics, merge_hyperparameters, model_for, train_config
    from mutransfer.training import DIVERGED_METRIC, load_checkpoint, train
    from mutransfer.training.trainer import CHECKPOINT_NAME

    options = options or {}
    # One intra-op thread pool per trial CPU: oversubscribing 2 cores made torch 10-100x slower.
    torch.set_num_threads(max(1, int(options.get("threads", 1))))
    trial_id = tune.get_context().get_trial_id()
    trial_dir = Path(options["study_dir"]) / "trials" / trial_id
    trial_dir.mkdir(parents=True, exist_ok=True)
    maybe_inject_fault(Path(options["study_dir"]) / "faults", int(options.get("fail_trials", 0)), trial_id)

    done_file = trial_dir / "done.json"
    if done_file.exists():
        _log_execution(trial_dir, "replay")
        tune.report(json.loads(done_file.read_text())["report"])
        return

    hp = merge_hyperparameters(study, config)
    torch.manual_seed(study.training.seed)  # the init depends on the seed only, not on the worker's history
    model = model_for(study, data, target=False, init_scale=hp["init_scale"])
    spectral_lr0 = effective_spectral_lr(model, hp["lr"])
    tconfig = train_config(study, hp, epochs=study.budget.epochs, device=options.get("device", "cpu"), checkpoint_dir=str(trial_dir))

    before: list = []
    checkpoint = trial_dir / CHECKPOINT_NAME
    if checkpoint.exists():
        try:
            before = [_compact(e) for e in load_checkpoint(checkpoint)["history"]]
        except (UserInputError, KeyError, TypeError):
            checkpoint.unlink()  # unreadable (e.g. killed mid-write by an old version): start over
    _log_execution(trial_dir, "train", resumed_from_epoch=before[-1][0] if before else None)

    reported = {"n": 0}

    def report_eval(event: dict) -> None:
        if event["event"] != "eval":
            return
        metrics = {**eval_metrics(event, spectral_lr0), "diverged": 0}
        if before and reported["n"] == 0:
            metrics["history_before"] = json.dumps(before)
        reported["n"] += 1
        tune.report(metrics)  # ASHA may end the trial here

    result = train(model, data, tconfig, callbacks=[report_eval], resume=True)

    history = [_compact(e) for e in result.history]
    last_seconds = result.history[-1]["seconds"] if result.history else result.seconds
    final = {
        "epoch": int(result.epochs_completed),
        "test_error": float(result.test_error) if result.status != "diverged" else DIVERGED_METRIC,
        "train_loss": float(result.train_loss),
        "lr": float(history[-1][3]) if history else hp["lr"],
        "trainer_seconds": float(last_seconds),
        "spectral_lr0": spectral_lr0,
        "diverged": 1 if result.status == "diverged" else 0,
        "history_before": json.dumps(history),
    }
    from mutransfer.sweep.state import write_atomic

    write_atomic(done_file, json.dumps({"status": result.status, "report": final}))
    if reported["n"] == 0 or result.status == "diverged":
        tune.report(final)
