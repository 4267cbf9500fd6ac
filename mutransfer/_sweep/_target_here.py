"""The target trained in this process (the in-process executors' :meth:`~mutransfer._sweep._executors.Executor.target`),
its folder laid out as Ray Train lays it out, and :class:`TargetJob`, what any executor's target training takes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from mutransfer._atomic import current_umask
from mutransfer._study.memory import Plan
from mutransfer._study.models import effective_spectral_lr, model_for, train_config
from mutransfer._sweep.target import PROGRESS_FILE, TargetSummary, append_progress, save_final
from mutransfer._training import EpochRecord, train

if TYPE_CHECKING:
    from mutransfer._study import Study
    from mutransfer.data._loading import SplitData
    from mutransfer.data._streaming import StreamingSplit


@dataclass(frozen=True)
class TargetJob:
    """The target's training: the study (its target section), the hyperparameters, the fit split, where its files
    go (``<storage_dir>/target``) and the memory plan of its model."""

    study: Study
    hp: dict
    data: SplitData | StreamingSplit | None
    storage_dir: Path
    use_gpu: bool
    max_failures: int
    plan: Plan | None = None


#: the in-process target's folder under ``<storage_dir>/target``: its resume checkpoint, then model.pt and summary.json
#: checkpoints of the in-process target kept in ``<storage>/target`` (as Ray Train's ``num_to_keep``)
KEEP_CHECKPOINTS = 2


def _latest_checkpoint(target_dir: Path) -> Path | None:
    """The newest ``checkpoint.pt`` of a target's folder: ``final/``'s, else the highest ``epoch_NNNNN/``'s."""
    final = target_dir / "final" / "checkpoint.pt"
    if final.is_file():
        return final
    epochs = sorted(p for p in target_dir.glob("epoch_*/checkpoint.pt") if p.parent.name[6:].isdigit())
    return epochs[-1] if epochs else None


def _clear_staging(target_dir: Path) -> None:
    """Remove what a publication cut short (a process killed while it copied) left: hidden ``.<name>-XXXX``
    folders, partial copies that nothing reads."""
    for leftover in [*target_dir.glob(".epoch_*-*"), *target_dir.glob(".final-*")]:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)


def _publish(local: Path, target_dir: Path, name: str) -> Path:
    """Copy the working folder's files to ``target_dir/name`` whole (a folder renamed into place, as Ray Train
    persists a checkpoint) and keep the newest :data:`KEEP_CHECKPOINTS` epoch folders."""
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target_dir))
    staging.chmod(0o777 & ~current_umask())  # a folder as any other the user makes (mkdtemp's is private to its owner)
    for f in local.iterdir():
        if f.is_file():
            shutil.copy2(f, staging / f.name)
    folder = target_dir / name
    if folder.exists():
        shutil.rmtree(folder)
    staging.rename(folder)
    for old in sorted(target_dir.glob("epoch_*"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def train_target_here(
    job: TargetJob, on_poll: Callable[[], None] | None, look: Callable[[object], None] | None = None
) -> tuple[TargetSummary, Path]:
    """The target trained in this process on one device, resumed from its newest checkpoint; (summary, its folder).

    ``look(event)`` sees each of the trainer's events before anything of it is written (an exception it raises ends
    the training: the Ray actor's stop, mutransfer._sweep._target_actor); ``on_poll()`` is called after each epoch.

    The folder is laid out as Ray Train's run lays it out: ``<storage>/target/epoch_NNNNN/checkpoint.pt`` every
    ``target.checkpoint_every`` epochs, and ``<storage>/target/final/`` (``checkpoint.pt``, ``model.pt``,
    ``summary.json``) at the end; the trainer works in a temporary folder, as each Ray Train worker does."""
    study, hp, data = job.study, job.hp, job.data
    assert data is not None, "the target trains on the study's fit split"
    target_dir = Path(job.storage_dir) / "target"
    target_dir.mkdir(parents=True, exist_ok=True)
    _clear_staging(target_dir)
    progress = str(target_dir / PROGRESS_FILE)
    torch.manual_seed(study.training.seed)
    model = model_for(study, data, target=True, hp=hp)
    spectral_lr0 = effective_spectral_lr(model, hp["lr"])
    epochs = int(study.target.epochs)
    every = min(int(study.target.checkpoint_every), epochs)
    batches = max(1, -(-int(data.train_x.shape[0]) // int(hp["batch_size"])))
    with tempfile.TemporaryDirectory(prefix="mutransfer-target-") as work:
        local = Path(work)
        restored = _latest_checkpoint(target_dir)
        if restored is not None:
            shutil.copy2(restored, local / "checkpoint.pt")
        device = "cuda" if job.use_gpu else "cpu"
        tconfig = train_config(
            study, hp, epochs=epochs, device=device, checkpoint_dir=str(local), checkpoint_every=every
        )  # fmt: skip

        def on_event(event) -> None:
            if look is not None:
                look(event)
            if not isinstance(event, EpochRecord):
                return
            append_progress(progress, event)
            if event.epoch % every == 0 and event.iteration < epochs * batches:  # checkpoint.pt was just written
                _publish(local, target_dir, f"epoch_{event.epoch:05d}")
            if on_poll is not None:
                on_poll()

        result = train(model, data, tconfig, callbacks=[on_event], resume=True, plan=job.plan)
        summary = TargetSummary.of(result, spectral_lr0, 1, int(hp["batch_size"]), batches)
        save_final(local, model, hp, summary)
        return summary, _publish(local, target_dir, "final")
