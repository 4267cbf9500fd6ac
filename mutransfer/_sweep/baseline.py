"""The direct-tuning baseline (``sweep --baseline direct``): the same search run at the target's size.

The paper's Table 1 inside any study: the study's searcher, scheduler (ASHA), number of
trials, search seed and per-trial budget, but every trial trains the target's model
(K = target_K, width = target_width, the same parametrization). The search runs as a
nested sweep context over ``<study dir>/direct/`` (its own Tune experiment and
``state.json``, so ``--resume`` continues it) and logs its trials under an MLflow
run of kind ``direct_baseline``, a child of the study's parent run.

The direct winner is the trial with the lowest validation error, as for the proxies (the search never reads
the test split: mutransfer.data._validation). It is then **trained once more, fresh**, for ``target.epochs``
with the same recipe, threads and Ray Train workers as μTransfer's target, and that training's test error
and cost count: both arms' reported errors are measured alike, on a split neither arm selected on. (A study
made before validation splits, which selected on the test split, keeps its old rule: the best trial is reused
when it already ran the target's epochs.)

Costs are measured, never extrapolated, and split into training time (the trainer's
own seconds × the devices it held) and the rest (process and Ray start-up, Tune and
Ray Train scheduling, MLflow, checkpoints): ``trainer_device_seconds`` and
``overhead_device_seconds``, which sum to ``device_seconds``. FLOPs are analytic
(FNO) or counted (attention operators), :mod:`mutransfer._sweep.cost`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep._executors import TargetJob
from mutransfer._sweep._memo import Memo, remembered
from mutransfer._sweep.context import SweepError
from mutransfer._sweep.cost import model_epoch_flops, target_cost, trial_devices
from mutransfer._sweep.nested import Search, SearchResult, run_search
from mutransfer._sweep.session import Made, Session
from mutransfer._sweep.target_run import resolve_use_gpu
from mutransfer._sweep.train_target import TargetWatch, first_line
from mutransfer._tracking.runs import log_batch

if TYPE_CHECKING:
    from mutransfer._sweep.strategies.base import ExtraCosts

#: the baseline's slot in ``Made.records``, its ``state.json`` and report key
NAME = "direct_baseline"


def direct_search(session: Session) -> Search:
    """The study's search at the target's size, in ``<study dir>/direct``, under its own MLflow run."""

    return Search(
        session.study_dir.root / "direct",
        session.study,
        kind="direct_baseline",
        run_name=f"{session.study.name} direct baseline ({session.study.model_text(True)})",
    )


def trials_cost(study, trials: list[TrialRecord], *, at_target: bool, input_shape) -> dict:
    """Device-seconds (trainer / overhead) and FLOPs of a search's trials."""

    device = sum(t.device_seconds for t in trials)
    # the trainer's clock counts training only (a part of Tune's): training cannot outlast the device it held
    trainer = min(device, sum(t.trainer_seconds for t in trials) * trial_devices(study))
    per_epoch = model_epoch_flops(study, at_target=at_target, input_shape=input_shape)  # the proxy on its grid
    epochs = sum(int(t.epochs) for t in trials)
    return {
        "device_seconds": device,
        "trainer_device_seconds": trainer,
        "overhead_device_seconds": max(0.0, device - trainer),
        "flops": None if per_epoch is None else epochs * per_epoch,
        "trials": len(trials),
        "epochs": epochs,
    }


def add_costs(*parts: dict) -> dict:
    """Sum of cost dicts (FLOPs None when any part has none)."""
    keys = ("device_seconds", "trainer_device_seconds", "overhead_device_seconds")
    out = {k: sum(p[k] for p in parts) for k in keys}
    out["flops"] = None if any(p.get("flops") is None for p in parts) else sum(p["flops"] for p in parts)
    return out


def ratios(mine: dict, theirs: dict, my_error, their_error) -> dict:
    """μTransfer / direct for error and for each cost (None where undefined)."""

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else float(a) / float(b)

    return {
        "error": ratio(my_error, their_error),
        **{k: ratio(mine.get(k), theirs.get(k)) for k in ("device_seconds", "trainer_device_seconds", "flops")},
    }


def same_configuration(a: dict, b: dict, searched) -> bool:
    """True when the searched hyperparameters of ``a`` and ``b`` agree (to float rounding)."""
    return all(math.isclose(float(a[k]), float(b[k]), rel_tol=1e-9) for k in searched if k in a and k in b)


@dataclass
class DirectBaseline:
    """The direct baseline's record (``Made.records["direct_baseline"]``): the result as ``state.json`` keeps
    it (the report's ``direct_baseline`` leaves out the direct trials)."""

    result: dict

    def as_dict(self) -> dict:
        return self.result

    def section(self) -> dict:
        """The report's ``direct_baseline``."""
        return {k: v for k, v in self.result.items() if k != "trials"}


def direct_baseline_phase(
    session: Session, made: Made, extra: Callable[[], ExtraCosts] | None = None
) -> DirectBaseline:
    """With ``--baseline direct`` (mutransfer._sweep.strategies.baseline runs it): run the study's search at the
    target's size, once for the study's target, and return the baseline's record (its search resumes from its own
    folder). ``extra``: the other strategies' trainings on muTransfer's side (a ladder's rungs beside the proxies,
    --top-k's other targets after the target), asked only when the baseline is measured, not when it is read back."""
    memo = Memo(NAME, DirectBaseline, DirectBaseline.as_dict)
    inputs = {"target_run_id": made.target_run_id}
    return remembered(session, memo, inputs, lambda: _measure(session, made, extra))


def _measure(session: Session, made: Made, extra: Callable[[], ExtraCosts] | None) -> DirectBaseline:
    study, shape = session.study, tuple(session.data.train_x.shape[1:])
    start = time.perf_counter()
    session.say(
        f"direct baseline: the same search ({study.search.algorithm}, ASHA, {study.budget.epochs} epochs per trial) "
        f"on the target {study.model_text(True)} ..."
    )
    found = run_search(session, direct_search(session))
    best = found.best
    search = trials_cost(study, found.trials, at_target=True, input_shape=shape)
    final, parts = None, [search]
    legacy = not study.problem.n_val  # selected on the test split: its best trial's error was a test error
    # a winner that trained the target's epochs to the end is direct tuning's final model: retrained only to
    # measure its test error the way the target's is measured (Ray Train, the target's threads), not billed
    billed = best.status != "completed" or study.budget.epochs != study.target.epochs
    if not legacy or billed:
        final = dict(_train_winner(session, found), billed=billed)
        if billed:
            parts.append(final["cost"])
    direct_error = final["test_error"] if final else best.val_error
    direct = add_costs(*parts)
    costs = extra() if extra is not None else None
    search_extra, target_extra = (costs.search, costs.target) if costs is not None else ((), ())
    mutransfer = add_costs(
        trials_cost(study, made.proxies.trials, at_target=False, input_shape=shape),
        *search_extra,
        target_cost(study, made.target, shape),
        *target_extra,
    )
    result = {
        "search": {
            "algorithm": study.search.algorithm,
            "trials": len(found.trials),
            "budget_epochs": study.budget.epochs,
            "seed": study.search.seed,
        },
        "best_trial_id": best.trial_id,
        "best_config": best.config,
        "best_trial_val_error": best.val_error,
        # both arms chose the same configuration: their errors then differ by run-to-run noise only (e.g. the
        # target's Ray Train worker runs cpus_per_worker threads, a trial cpus_per_trial: another summation order)
        "same_configuration": same_configuration(best.hp, made.transfer.hp, study.search_space),
        "final_training": final,
        "test_error": direct_error,
        "cost": dict(direct, search=search, wall_seconds=time.perf_counter() - start),
        "mutransfer": dict(mutransfer, test_error=made.target.test_error),
        "mutransfer_vs_direct": ratios(mutransfer, direct, made.target.test_error, direct_error),
        "mlflow_run_id": found.run_id,
        "trials": [t.as_dict() for t in found.trials],
    }
    session.say(summary_line(result))
    _log(session, found.run_id, result)
    return DirectBaseline(result)


def _train_winner(session: Session, found: SearchResult) -> dict:
    study, best = session.study, found.best
    use_gpu = resolve_use_gpu(study.target.use_gpu, session.executor.resources()[1])

    session.say(f"direct baseline: training the direct winner for {study.target.epochs} epochs ...")
    watch = TargetWatch(session, found.folder, label="direct winner")
    try:
        plan = session.memory_plan(target=True, device="cuda" if use_gpu else "cpu", workers=study.target.num_workers)
        job = TargetJob(study, best.hp, session.data, found.folder, use_gpu, study.budget.max_failures, plan)
        outcome = session.executor.target(job, watch)
    except Exception as exc:
        raise SweepError(
            f"the direct winner's training failed after {study.budget.max_failures} retries ({first_line(exc)}); "
            f"the study so far is kept: fix the cause and run again with --resume"
        ) from exc
    finally:
        watch.close()
    return {
        "status": outcome.status,
        "test_error": outcome.test_error,
        "val_error": outcome.val_error,
        "epochs": outcome.epochs,
        "cost": target_cost(study, outcome, tuple(session.data.train_x.shape[1:])),
    }


def summary_line(result: dict) -> str:
    r = result["mutransfer_vs_direct"]

    def x(v):
        return "-" if v is None else f"{v:.2f}x"

    return (
        f"direct baseline: test error {result['test_error']:.4g} (muTransfer {result['mutransfer']['test_error']:.4g}, "
        f"{x(r['error'])}); cost muTransfer/direct: {x(r['device_seconds'])} device-seconds, "
        f"{x(r['trainer_device_seconds'])} training time, {x(r['flops'])} FLOPs"
    )


def _log(session: Session, run_id: str, result: dict) -> None:
    now = int(time.time() * 1000)
    c, r = result["cost"], result["mutransfer_vs_direct"]
    metrics = [
        ("direct_test_error", result["test_error"], now, 0),
        ("direct_device_seconds", c["device_seconds"], now, 0),
        ("direct_trainer_device_seconds", c["trainer_device_seconds"], now, 0),
        ("direct_flops", c["flops"], now, 0),
        *[(f"mutransfer_vs_direct_{k}", v, now, 0) for k, v in r.items()],
    ]
    metrics = [m for m in metrics if m[1] is not None]
    log_batch(session.tracker.client, session.parent_id, metrics=metrics)
    log_batch(
        session.tracker.client,
        run_id,
        metrics=metrics,
        params={f"best.{k}": v for k, v in result["best_config"].items()},
        tags={"mutransfer.status": "done"},
    )
    session.tracker.set_status(run_id, "FINISHED")
