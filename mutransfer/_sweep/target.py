"""Train the target (K = target_K) once with Ray Train's TorchTrainer.

Each Ray Train worker runs our trainer on its shard of the training set, with
the model wrapped in DistributedDataParallel by ``ray.train.torch.prepare_model``
when there is more than one worker (gloo on CPU, nccl on GPU).

Complex spectral weights under DDP: PyTorch's DDP reducer all-reduces complex
gradient buckets as their real views (torch 2.13, gloo); ``tests/sweep/test_sweep_ddp.py``
checks that 2-process DDP gradients of every parameter, the complex spectral
weights included, equal the single-process gradient of the full batch. No
manual all-reduce or real-view registration is needed.

Data parallel details:
- rank r trains on samples r, r + W, ... of the first floor(n/W)·W samples (equal
  shards, so every rank runs the same number of steps and checkpoints agree);
- the per-rank batch is batch_size // W, so the effective batch (the one the
  proxy tuned) stays batch_size;
- every rank evaluates the full test split (identical values; no reduction needed);
- streamed data (mutransfer.data._streaming, for files larger than memory) travels
  to the workers as its file path and row selection; each worker reads its own
  shard from the file (the file must be readable on every node).

Checkpoints: the trainer writes its exact-resume checkpoint (model, Adam,
scheduler, RNG, history) into a local directory; rank 0 reports it to Ray Train
every ``target.checkpoint_every`` epochs (default 1: every epoch) and at the end (with ``model.pt``, the plain
state dict of the unwrapped model, and ``summary.json``). Re-running the target
with the same storage path resumes from the latest reported checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mutransfer._atomic import atomic_path, save_torch
from mutransfer._study.memory import Plan
from mutransfer._study.models import effective_spectral_lr, eval_metrics, model_for, train_config
from mutransfer._study.schema import TargetSpec
from mutransfer._sweep.cost import target_devices
from mutransfer._training import DIVERGED_METRIC, train
from mutransfer._training.checkpoint import weights_of
from mutransfer._training.records import EpochRecord, dump_history, load_history

SUMMARY_FILE = "summary.json"
#: in the target's storage folder: one JSON line per evaluation, appended by rank 0 (training.EpochRecord.as_dict())
PROGRESS_FILE = "progress.jsonl"
#: in the same folder: written by an interrupted driver (:func:`ask_to_stop`); each worker stops at its next epoch
STOP_FILE = "stop"
#: seconds an interrupted driver waits for the target's workers to stop at their next epoch before it ends them
STOP_WAIT_S = 15.0


def ask_to_stop(folder: Path) -> None:
    """The driver, interrupted: tell the target's workers (which look at every epoch) to stop, so that Ray Train's run
    ends before the driver shuts Ray down (a ``fit()`` still waiting in another thread when Ray shuts down can crash
    the driver). Best effort: a folder the workers do not see leaves them to ``ray.shutdown``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / STOP_FILE).touch()
    except OSError:
        pass


def clear_stop(folder: Path) -> None:
    """A run starting (or resuming): no stop asked for by an earlier, interrupted run."""
    (folder / STOP_FILE).unlink(missing_ok=True)


class _Stopped(Exception):
    """Raised in a worker's loop when the driver asked the run to stop (:data:`STOP_FILE`)."""


def _stop_asked(stop: Path | None, world: int, device: torch.device) -> bool:
    """Whether the driver asked the run to stop (``stop``: the :data:`STOP_FILE` path). With several workers every rank
    takes the same decision at the same epoch (the largest of the ranks' looks, all-reduced): a rank that stopped
    alone would leave the others waiting in their next collective."""
    asked = stop is not None and stop.exists()
    if world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        flag = torch.tensor([1.0 if asked else 0.0], device=device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        asked = bool(flag.item() > 0)
    return asked


def append_progress(path: str | None, record: EpochRecord) -> None:
    """Rank 0: add one evaluation to the progress file the driver watches (best effort: the file may be on
    another node's disk in a multi-node cluster, where the driver then shows no epochs until the end)."""
    if not path:
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps(record.as_dict()) + "\n")
    except OSError:
        pass


def read_progress(path: str | Path, offset: int) -> tuple[list[EpochRecord], int]:
    """The evaluations appended to ``path`` after byte ``offset`` (complete lines only) and the next offset."""

    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records = []
    for line in data[:end].splitlines():
        try:
            records.append(EpochRecord.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return records, offset + end


@dataclass
class TargetSummary:
    """What the Ray Train workers return (rank 0 also writes it to ``summary.json`` beside the final checkpoint).

    Defaults are what the driver assumes when a field is missing (no return value and no summary file).
    """

    status: str = "unknown"
    test_error: float | None = None
    #: the final validation error (a study made before validation splits has none)
    val_error: float | None = None
    epochs: int = 0
    history: list[EpochRecord] = field(default_factory=list)
    trainer_seconds: float = 0.0
    spectral_lr0: float = float("nan")
    world_size: int = 1
    per_worker_batch: int = 0
    resumed_from_epoch: int | None = None

    @classmethod
    def of(cls, result, spectral_lr0: float, world: int, per_worker_batch: int, iters_per_epoch: int) -> TargetSummary:
        """The summary of a finished training (a training.TrainResult) on ``world`` workers of ``per_worker_batch``
        samples a step, ``iters_per_epoch`` steps an epoch."""
        return cls(
            status=result.status,
            test_error=float(result.test_error) if result.status != "diverged" else DIVERGED_METRIC,
            val_error=result.val_error,
            epochs=int(result.epochs_completed),
            history=result.history,
            trainer_seconds=float(result.trainer_seconds),
            spectral_lr0=spectral_lr0,
            world_size=world,
            per_worker_batch=per_worker_batch,
            resumed_from_epoch=None if result.resumed_from is None else result.resumed_from // iters_per_epoch,
        )

    def as_dict(self) -> dict:
        """Plain dict (JSON, Ray return value). The one serialisation of a target summary."""

        return {**dataclasses.asdict(self), "history": dump_history(self.history)}

    @classmethod
    def from_dict(cls, d: dict) -> TargetSummary:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        values["history"] = load_history(d.get("history", []))
        return cls(**values)


@dataclass
class TargetOutcome:
    status: str
    test_error: float
    epochs: int
    history: list[EpochRecord] = field(default_factory=list)
    trainer_seconds: float = 0.0
    wall_seconds: float = 0.0
    spectral_lr0: float = float("nan")
    num_workers: int = 1
    use_gpu: bool = False
    cpus_per_worker: int = 1
    per_worker_batch: int = 0
    checkpoint_dir: str | None = None
    device_seconds: float = 0.0
    resumed_from_epoch: int | None = None
    #: the final validation error (what top-k chooses by); None for a study made before validation splits
    val_error: float | None = None
    #: seconds Ray Train had been starting before the order came (a target started while the last proxies trained)
    head_start_seconds: float = 0.0

    def as_dict(self) -> dict:
        """Plain dict for state.json (the history as EpochRecord dicts)."""

        return {**dataclasses.asdict(self), "history": dump_history(self.history)}

    @classmethod
    def from_dict(cls, d: dict) -> TargetOutcome:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in d.items() if k in known}, "history": load_history(d.get("history", []))})


def outcome_of(
    summary: TargetSummary,
    target: TargetSpec,
    *,
    workers: int,
    use_gpu: bool,
    checkpoint_dir: str | None,
    wall_seconds: float,
    held_seconds: float,
) -> TargetOutcome:
    """The driver's record of a trained target: its workers' ``summary``, the study's ``target`` section (CPUs per
    worker), the ``workers`` that trained it, where the final checkpoint is, the seconds the study waited for it
    (from the order) and the seconds its devices were held (from the start; the difference is the head start of a
    run started early)."""
    return TargetOutcome(
        status=summary.status,
        test_error=float(summary.test_error if summary.test_error is not None else float("nan")),
        val_error=None if summary.val_error is None else float(summary.val_error),
        epochs=int(summary.epochs),
        history=summary.history,
        trainer_seconds=float(summary.trainer_seconds),
        wall_seconds=wall_seconds,
        spectral_lr0=float(summary.spectral_lr0),
        num_workers=workers,
        use_gpu=use_gpu,
        cpus_per_worker=target.cpus_per_worker,
        per_worker_batch=int(summary.per_worker_batch),
        checkpoint_dir=checkpoint_dir,
        device_seconds=held_seconds * target_devices(workers, use_gpu, target.cpus_per_worker),
        resumed_from_epoch=summary.resumed_from_epoch,
        head_start_seconds=held_seconds - wall_seconds,
    )


class _Shard:
    """The attributes the trainer reads (train_x, train_y, test_x, test_y, val_x, val_y)."""

    def __init__(self, train_x, train_y, test_x, test_y, val_x=None, val_y=None):
        self.train_x, self.train_y, self.test_x, self.test_y = train_x, train_y, test_x, test_y
        self.val_x, self.val_y = val_x, val_y


def _rows(array, rank: int, n: int, world: int):
    """Rows rank, rank + world, … < n: a view of a tensor, or an unread subset of streamed data."""
    if hasattr(array, "subset"):  # mutransfer.data._streaming.LazySamples: each worker reads its own shard
        return array.subset(range(rank, n, world))
    return array[rank:n:world]


def _where() -> str | None:
    """This machine's boot and this process's PID namespace (Linux), or None where they cannot be read: two
    processes with the same hostname may still not see each other's pids (a container on the host network)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return None


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (state first, start time at index 19), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def driver_identity() -> dict:
    """What a target's workers need to tell whether this driver still runs (:func:`driver_gone`)."""
    pid = os.getpid()
    fields = _stat(pid)
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "where": _where(),
        "start": fields[19] if fields else None,
    }


def driver_gone(driver: dict | None) -> bool:
    """Whether the driver that started this target has exited (``driver``: :func:`driver_identity`). Only a worker
    that sees the driver's pids can tell (same host, boot and PID namespace); any other leaves it to Ray. Each
    worker asks at every epoch, before it writes anything: Ray notices a killed driver only seconds later, and
    until then its workers went on writing checkpoints."""
    if not driver or driver.get("host") != socket.gethostname():
        return False
    if driver.get("where") is None or driver.get("where") != _where():
        return False
    pid = int(driver["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    fields = _stat(pid)
    if fields is None:
        return True
    # a killed driver its parent has not reaped yet is a zombie; another start time is another process (pid reused)
    return fields[0] == "Z" or (driver.get("start") is not None and fields[19] != driver["start"])


#: the status of a target started early and called off before its order came (it trained nothing), or stopped by
#: its interrupted driver (:func:`ask_to_stop`; the driver reads no outcome then)
CANCELLED = "cancelled"


@dataclass(frozen=True)
class TargetOrder:
    """What a target trains with: the transferred hyperparameters and the driver's memory plan per worker (None:
    each worker plans the model itself)."""

    hp: dict
    plan: Plan | None = None


#: seconds between a waiting worker's looks at whether its driver still runs
ORDER_POLL_S = 1.0


def await_order(orders, driver: dict | None) -> TargetOrder | None:
    """A worker started early (mutransfer._sweep.target_run.start_target without an order): wait for the driver's
    order on the ``orders`` queue (a ``ray.util.queue.Queue``; None: called off), and leave it there for a restarted
    worker. Exits the worker if the driver is gone.

    While it waits it imports what the first training step would (``torch._dynamo``, which the first optimizer of a
    process imports: 1.1-1.5 s on this project's CI machine, ``python benchmarks/proxy_epoch.py``), so the wait
    hides that too.
    """
    import torch._dynamo  # noqa: F401, PLC0415 -- deferred: warm-up while waiting (see above)
    from ray.util.queue import Empty  # noqa: PLC0415 -- deferred: runs in a Ray worker only

    while True:
        try:
            order = orders.get(timeout=ORDER_POLL_S)
        except Empty:
            if driver_gone(driver):
                os._exit(1)  # the driver was killed while the proxies ran: nothing to train for
            continue
        # put back: a worker Ray Train restarts after a failure (budget.max_failures) reads the order again
        orders.put(order)
        return order


def save_final(folder: Path, model: torch.nn.Module, hp: dict, summary: TargetSummary) -> None:
    """The trained target's files in ``folder``: ``model.pt`` (the plain state dict, the model's config and class, the
    hyperparameters; read back with ``weights_only=True``) and ``summary.json``."""
    with atomic_path(folder / "model.pt") as tmp:  # whole files or none: a kill here leaves no half model
        save_torch(
            {
                "model": weights_of(model),
                "model_config": model.config,
                "model_class": type(model).__name__,
                "hyperparameters": hp,
            },
            tmp,
        )
    with atomic_path(folder / SUMMARY_FILE) as tmp:  # after the model
        tmp.write_text(json.dumps(summary.as_dict()))


def target_loop(cfg: dict) -> dict:
    """Ray Train per-worker function."""
    import ray.train.torch  # noqa: PLC0415 -- deferred: (binds ray, ray.train too) Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)

    torch.set_num_threads(max(1, int(cfg["threads"])))
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    study, epochs = cfg["study"], int(cfg["epochs"])
    data = ray.get(cfg["data_ref"])
    order = cfg["order"] if cfg.get("order") is not None else await_order(cfg["orders"], cfg.get("driver"))
    if order is None:  # started early and called off (the study stopped, or trains its target another way)
        return TargetSummary(status=CANCELLED, world_size=world).as_dict()
    hp = order.hp

    n = (data.train_x.shape[0] // world) * world
    shard = _Shard(
        _rows(data.train_x, rank, n, world),
        _rows(data.train_y, rank, n, world),
        data.test_x,
        data.test_y,
        getattr(data, "val_x", None),
        getattr(data, "val_y", None),
    )
    per_rank_batch = max(1, int(hp["batch_size"]) // world)

    torch.manual_seed(study.training.seed)  # same init on every rank (DDP also broadcasts rank 0's)
    net = model_for(study, data, target=True, hp=hp)
    spectral_lr0 = effective_spectral_lr(net, hp["lr"])
    model = ray.train.torch.prepare_model(net)  # DDP around ``net`` when world > 1; moves it to the worker's device
    device = ray.train.torch.get_device()

    local = Path(tempfile.mkdtemp(prefix="mutransfer-target-"))
    restored = ray.train.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as d:
            if (Path(d) / "checkpoint.pt").exists():
                shutil.copy2(Path(d) / "checkpoint.pt", local / "checkpoint.pt")

    every = min(int(study.target.checkpoint_every), epochs)
    tconfig = train_config(
        study,
        hp,
        epochs=epochs,
        batch_size=per_rank_batch,
        device=str(device),
        checkpoint_dir=str(local),
        checkpoint_every=every,
    )
    iters_per_epoch = math.ceil(shard.train_x.shape[0] / per_rank_batch)
    total = epochs * iters_per_epoch

    stop = Path(cfg["progress_file"]).with_name(STOP_FILE) if cfg.get("progress_file") else None

    def on_event(event) -> None:
        if isinstance(event, EpochRecord) and driver_gone(cfg.get("driver")):
            shutil.rmtree(local, ignore_errors=True)  # this worker's scratch folder in /tmp
            os._exit(1)  # the driver was killed: write nothing more (Ray would stop this worker seconds later)
        if isinstance(event, EpochRecord) and _stop_asked(stop, world, device):
            raise _Stopped  # before this epoch's report: the run resumes from the last one reported
        if rank == 0 and isinstance(event, EpochRecord):
            append_progress(cfg.get("progress_file"), event)
        # Report only when the trainer has just written checkpoint.pt (every `every` epochs, not
        # the last evaluation): each report is a barrier across workers and costs a controller poll.
        if not isinstance(event, EpochRecord) or not (event.epoch % every == 0 and event.iteration < total):
            return
        checkpoint = ray.train.Checkpoint.from_directory(str(local)) if rank == 0 else None
        ray.train.report(
            eval_metrics(event, spectral_lr0), checkpoint=checkpoint, checkpoint_dir_name=f"epoch_{event.epoch:05d}"
        )

    try:  # the scratch folder goes whatever the end (stopped, failed, done): its checkpoints were reported
        try:
            result = train(model, shard, tconfig, callbacks=[on_event], resume=True, plan=order.plan)
        except _Stopped:
            return TargetSummary(status=CANCELLED, world_size=world).as_dict()

        summary = TargetSummary.of(result, spectral_lr0, world, per_rank_batch, iters_per_epoch)
        checkpoint = None
        if rank == 0:
            save_final(local, net, hp, summary)
            checkpoint = ray.train.Checkpoint.from_directory(str(local))
        final = {k: getattr(summary, k) for k in ("test_error", "epochs", "trainer_seconds", "spectral_lr0")}
        ray.train.report(dict(final, final=1), checkpoint=checkpoint, checkpoint_dir_name="final")
        return summary.as_dict()
    finally:
        shutil.rmtree(local, ignore_errors=True)
