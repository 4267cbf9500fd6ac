"""The target's run started while the last proxy trials train (study key ``target.start_early``).

The target's start-up (for one CPU worker its Ray actor's process, imports and data: 5.7-5.8 s of the default
study's wall time on this project's CI machine, ``target_startup_seconds`` of the late-start runs of ``python
benchmarks/early_target.py --rounds 2``; with Ray Train's controller and helper actors it was 10.8-13.1 s in the 5
late-start runs of an earlier measurement and 20.2 s in one run at c135a7f, docs/results.md) sits on the study's
critical path when the target starts only once the proxies have finished and the winner is known.

Once the search has handed out its last trial, no new trial will ask for resources; as soon as the trials still
running leave room for the target's workers (on 2 cores with 2 trials at a time: when the first of the last two
ends), the target's run is started (:func:`mutransfer._sweep.target_run.start_target` without an order): its workers
start, load the data and wait. Not earlier: on a machine whose cores all train proxies, Ray Train's start-up (7
processes with their imports; one for the actor) slowed the last trial about 2x (docs/results.md). When the
target phase comes, :meth:`EarlyTarget.take` gives it the waiting run, which trains at the transferred
hyperparameters (:meth:`~mutransfer._sweep.target_run.TargetRun.order`); a study that stops first calls it off
(:meth:`EarlyTarget.cancel`: its workers return without training, and nothing is written that a resume reads).

No deadlock: the target is started early only where its resources and one more trial's fit in the cluster
(:func:`fits_beside_a_trial`), so a trial Tune retries after a failure still finds room once the others end; and
a retried trial calls the waiting run off (:meth:`EarlyTarget.trial_retried`): its failure may be a node the
cluster lost, and with it the room the target was started beside (a 2-node cluster of 1 CPU each whose worker
node died: the target held the last CPU and the retried trial waited for it, tests/sweep/test_cluster.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mutransfer._sweep.target_run import RunningTarget, resolve_use_gpu, start_target

if TYPE_CHECKING:
    from mutransfer._study import Study
    from mutransfer.data._loading import SplitData
    from mutransfer.data._streaming import StreamingSplit


def room_for(needed: dict[str, float], resources: dict) -> bool:
    """Whether ``resources`` (``ray.cluster_resources()``) hold ``needed``, kind by kind."""
    return all(amount <= resources.get(kind, 0.0) for kind, amount in needed.items() if amount > 0)


def target_resources(study, use_gpu: bool) -> dict[str, float]:
    """What the target's workers hold: CPUs, and GPUs for a GPU target."""
    t = study.target
    return {"CPU": float(t.num_workers * t.cpus_per_worker), "GPU": float(t.num_workers if use_gpu else 0)}


def free_beside(study, cluster: dict, live_trials: int) -> dict[str, float]:
    """The cluster's resources less what ``live_trials`` proxy trials hold (Tune's count, which unlike
    ``ray.available_resources()`` does not include a finished trial's actor Tune keeps for reuse)."""
    r = study.resources
    return {
        "CPU": cluster.get("CPU", 0.0) - live_trials * r.cpus_per_trial,
        "GPU": cluster.get("GPU", 0.0) - live_trials * r.gpus_per_trial,
    }


def fits_beside_a_trial(study, cluster: dict, use_gpu: bool) -> bool:
    """Whether the target's workers and one proxy trial fit in the cluster's resources (``ray.cluster_resources()``)
    together: then the target can hold its resources while the last trials run, and a retried trial still fits."""
    r, target = study.resources, target_resources(study, use_gpu)
    return room_for({"CPU": target["CPU"] + r.cpus_per_trial, "GPU": target["GPU"] + r.gpus_per_trial}, cluster)


class EarlyTarget:
    """The study's target run (``run``), started by :meth:`start` once the search has handed out its last trial and
    the trials still running leave room for it; None until then, and again once taken or called off."""

    def __init__(
        self, study: Study, data: SplitData | StreamingSplit, storage_dir: Path, say: Callable[[str], None]
    ) -> None:
        self.study, self.data, self.say = study, data, say
        self.run: RunningTarget | None = None
        #: the run was started (it may have been taken or called off since)
        self.started = False
        self.storage_dir = Path(storage_dir)

    def start(self, live_trials: int) -> None:
        """Start the target's run (once) when the ``live_trials`` still running leave room for it in the cluster,
        and only where the cluster holds it beside a retried trial; otherwise the target starts in its phase."""
        import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)

        if self.started:
            return
        study, cluster = self.study, ray.cluster_resources()
        use_gpu = resolve_use_gpu(study.target.use_gpu, cluster.get("GPU", 0.0))
        if not fits_beside_a_trial(study, cluster, use_gpu):
            self.started = True  # never: a retried trial could wait for the target, which waits for the trials
            return
        if not room_for(target_resources(study, use_gpu), free_beside(study, cluster, live_trials)):
            return  # the last trials use every core: Ray Train's start-up would slow them (a later trial event)
        self.started = True
        try:
            self.run = start_target(
                study, self.data, self.storage_dir, use_gpu=use_gpu, max_failures=study.budget.max_failures,
                order=None,
            )  # fmt: skip
        except Exception as exc:  # the target then starts as usual, after the proxies
            self.say(f"note: the target could not start early ({type(exc).__name__}: {exc}); it starts later")

    def trial_retried(self) -> None:
        """Tune retries a trial: a waiting run is called off (the target then starts in its phase, after the
        trials), since the cluster may have lost the node the trial ran on and the retried trial may need the
        resources the target holds. The target is not started early again in this search."""
        self.started = True
        if self.run is not None:
            self.say(
                "note: a proxy trial is retried: the target's run started early is called off; it starts after the proxies"
            )
            self.cancel(timeout=0.0)  # told at once; Tune's loop, which calls this, does not wait for its end

    def take(self, storage_dir: Path) -> RunningTarget | None:
        """The waiting run for a target trained in ``storage_dir`` (once), or None: not started, for another folder,
        or already ended (it failed to start: the target then starts as usual); such a run is called off."""
        run, self.run = self.run, None
        if run is not None and (Path(storage_dir) != self.storage_dir or run.finished()):
            run.cancel()
            return None
        return run

    def cancel(self, timeout: float = 10.0) -> None:
        """Call the waiting run off (the study stops, or trains its target some other way), waiting up to
        ``timeout`` seconds for it to end (``ray.shutdown`` ends what is left)."""
        run, self.run = self.run, None
        if run is not None:
            run.cancel(timeout)
