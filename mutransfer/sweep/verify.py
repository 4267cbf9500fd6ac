"""The verification phase (``sweep --verify``): is the transferred LR the target's own optimum?

After the target trained at the transferred hyperparameters, the target model is
trained again at ``points`` master learning rates spaced ``spacing`` decades
apart around the transferred one (the transferred LR is a grid point), for
``seeds`` seeds (the study's training seed, +1, ...), each a plain training (one
Ray task, ``resources.cpus_per_trial`` threads) of ``target.epochs`` epochs with
everything else as the target had it.

Each seed's optimum comes from the landscape's estimator
(:func:`mutransfer.landscape.analysis.fit_optimum`: a parabola in log10(lr)
through the best grid point and its neighbours; a best point at the grid's edge is
flagged and not used). Reported (``verification`` in the report):

- ``distance_decades``: log10(optimum) − log10(transferred), mean over the seeds
  whose optimum is inside the grid, with a 95 % Student-t CI over those seeds
  (:func:`mutransfer.diagnostics.statistics.mean_ci`; ``ci`` [null, null] with one seed: no CI);
- ``regret``: per seed, error at the transferred LR / error at that seed's best
  grid point − 1 (0 when the transferred LR is the best grid point), mean and t CI;
- ``at_edge``: seeds whose optimum lay at the grid's edge (then the optimum is
  outside the grid: widen it with ``--verify-points``);
- the extra cost: device-seconds (the phase's wall × the CPUs its tasks held), the trainers' share of
  them, FLOPs and wall time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field

import torch

from mutransfer.diagnostics.statistics import mean_ci
from mutransfer.landscape.analysis import NOT_RESOLVED, fit_optimum
from mutransfer.study.models import model_for, train_config
from mutransfer.study_folder.state import write_atomic
from mutransfer.sweep.context import SweepContext, SweepError
from mutransfer.sweep.cost import epoch_flops
from mutransfer.sweep.train_target import first_line
from mutransfer.tracking.runs import PARENT_TAG, RUN_NAME_TAG, log_batch
from mutransfer.training import train

#: the verification's slot in ``SweepContext.records``, its ``state.json`` and report key
NAME = "verification"
#: grid spacing of the verification in decades (the issue asks for <= 0.25)
SPACING_DECADES = 0.25


def lr_grid(lr: float, points: int, spacing: float = SPACING_DECADES) -> list[float]:
    """``points`` learning rates ``spacing`` decades apart, the transferred ``lr`` among them (centred; one more above when even)."""
    if points < 3:
        raise ValueError("a verification grid needs at least 3 points")
    offsets = range(-((points - 1) // 2), points // 2 + 1)
    return [float(lr * 10.0 ** (spacing * i)) for i in offsets]


@dataclass
class Verification:
    """What ``--verify`` measured about the transferred learning rate on the target."""

    transferred_lr: float
    grid: list[float]
    seeds: list[int]
    epochs: int
    optimum_lr: float | None
    distance_decades: dict | None  # Estimate.as_dict(): mean, ci, n, level
    regret: dict | None  # Estimate.as_dict() of per-seed regret
    error_at_transferred: float | None  # seed-mean test error at the transferred LR
    error_at_optimum: float | None  # seed-mean test error at the best grid point
    seed_optima: list[dict]  # per seed: seed, optimum_lr, at_edge, edge ("below"/"above"/None)
    at_edge: bool  # every seed's optimum lay at the grid's edge: the distance is not measured
    verdict: str
    diverged_at_transferred: list[int] = field(
        default_factory=list
    )  # seeds whose training at the transferred LR diverged
    cost: dict = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Verification:
        """Back from :meth:`as_dict` (``state.json``'s ``verification``, the report's); unknown keys are ignored."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def summary_line(self) -> str:
        span = f"{len(self.grid)} LRs {self.grid[0]:.3g}..{self.grid[-1]:.3g}"
        d = self.distance_decades
        if d is None:
            return f"verification ({len(self.seeds)} seed(s), {span}): {self.verdict}"
        text = (
            f"verification ({len(self.seeds)} seed(s), {span}): target optimum lr {self.optimum_lr:.3g} vs "
            f"transferred {self.transferred_lr:.3g}: {d['mean']:+.2f} decades {_bounds(d['ci'], 1, '+.2f')} (n={d['n']})"
        )
        r = self.regret
        if r is not None:
            text += f"; regret {100 * r['mean']:.1f}% {_bounds(r['ci'], 100, '.1f')}"
        if self.diverged_at_transferred:
            text += f"; DIVERGED at the transferred LR for seed(s) {', '.join(map(str, self.diverged_at_transferred))}"
        return f"{text}; {self.verdict}"


def analyse(records: list[dict], transferred_lr: float, spacing: float = SPACING_DECADES) -> Verification:
    """The verification from its trainings: records with ``lr``, ``seed``, ``status``, ``test_error`` (pure)."""

    grid = sorted({float(r["lr"]) for r in records})
    seeds = sorted({int(r["seed"]) for r in records})
    centre = min(grid, key=lambda v: abs(math.log10(v) - math.log10(transferred_lr)))
    seed_optima, distances, regrets, diverged = [], [], [], []
    for seed in seeds:
        rows = sorted((r for r in records if int(r["seed"]) == seed), key=lambda r: r["lr"])
        opt = fit_optimum([r["lr"] for r in rows], [r["test_error"] for r in rows], [r["status"] for r in rows], "lr")
        edge = None
        if opt.value is not None and opt.at_edge:
            edge = "below" if opt.value <= grid[0] * (1 + 1e-9) else "above"
        seed_optima.append({"seed": seed, "optimum_lr": opt.value, "at_edge": opt.at_edge, "edge": edge})
        if opt.usable:
            distances.append(opt.coordinate - math.log10(transferred_lr))
        ok = [r for r in rows if _ok(r)]
        at_centre = [r for r in rows if r["lr"] == centre]
        if at_centre and not _ok(at_centre[0]):
            diverged.append(seed)  # no finite regret: reported apart, never silently dropped
        elif ok and at_centre:
            regrets.append(at_centre[0]["test_error"] / min(r["test_error"] for r in ok) - 1.0)
    distance = mean_ci(distances) if distances else None
    regret = mean_ci(regrets) if regrets else None
    mean_curve = {v: _mean([r["test_error"] for r in records if r["lr"] == v and _ok(r)]) for v in grid}
    finite = {v: e for v, e in mean_curve.items() if e is not None}
    optimum_lr = None if distance is None else float(transferred_lr * 10.0**distance.mean)
    verdict = _verdict(distance, seed_optima, spacing)
    return Verification(
        transferred_lr=float(transferred_lr),
        grid=grid,
        seeds=seeds,
        epochs=max((int(r.get("epochs", 0)) for r in records), default=0),
        optimum_lr=optimum_lr,
        distance_decades=None if distance is None else distance.as_dict(),
        regret=None if regret is None else regret.as_dict(),
        error_at_transferred=mean_curve.get(centre),
        error_at_optimum=min(finite.values()) if finite else None,
        seed_optima=seed_optima,
        at_edge=distance is None and any(s["at_edge"] for s in seed_optima),
        verdict=verdict,
        diverged_at_transferred=diverged,
        records=[{k: v for k, v in r.items() if k != "history"} for r in records],
    )


def _verdict(distance, seed_optima: list[dict], spacing: float) -> str:
    """The landscape's rule: resolved only with >= 2 seeds and a CI that excludes 0; "held" only when the CI lies
    within half a grid step of the transferred LR."""

    if distance is None:
        edges = {s["edge"] for s in seed_optima if s["edge"]}
        if not edges:
            return "every training diverged: no optimum"
        where = (
            f"{edges.pop()} the grid for every seed"
            if len(edges) == 1
            else "outside the grid (below for some seeds, above for others)"
        )
        return f"optimum {where}: not measured; widen the grid (--verify-points)"
    half = spacing / 2
    if distance.n < 2:
        return "one seed: no spread measured (--verify-seeds 2 or more gives a CI)"
    if -half <= distance.lo and distance.hi <= half:
        return f"transfer held: the target's optimum is within half a grid step ({half:.3g} decades), CI included"
    if not distance.covers_zero:
        return f"the target's optimum is {'above' if distance.mean > 0 else 'below'} the transferred LR"
    return f"{NOT_RESOLVED}: the CI covers 0 but reaches beyond half a grid step"


def _bounds(ci: list, factor: float, spec: str) -> str:
    """``[lo, hi]`` of a stored CI times ``factor``; ``[no CI: 1 seed]`` when a bound is missing."""
    if ci[0] is None or ci[1] is None:
        return "[no CI: 1 seed]"
    return f"[{factor * ci[0]:{spec}}, {factor * ci[1]:{spec}}]"


def _ok(record: dict) -> bool:
    e = record.get("test_error")
    return record.get("status") != "diverged" and e is not None and math.isfinite(e)


def _mean(values: list[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def train_target_at(study, hp: dict, data, lr: float, seed: int, threads: int, device: str = "cpu") -> dict:
    """Train the target model once at master LR ``lr`` and training seed ``seed`` (a Ray task; also callable directly)."""

    torch.set_num_threads(max(1, int(threads)))
    seeded = dataclasses.replace(study, training=dataclasses.replace(study.training, seed=int(seed)))
    point = dict(hp, lr=float(lr))
    start = time.perf_counter()
    torch.manual_seed(int(seed))
    model = model_for(seeded, data, target=True, init_scale=point["init_scale"])
    result = train(model, data, train_config(seeded, point, epochs=study.target.epochs, device=device))
    trainer = result.history[-1].seconds if result.history else float(result.seconds)
    return {
        "lr": float(lr),
        "seed": int(seed),
        "status": result.status,
        "test_error": float(result.test_error),
        "epochs": int(result.epochs_completed),
        "trainer_seconds": float(trainer),
        "wall_seconds": time.perf_counter() - start,
        "threads": int(threads),
        "history": [(h.epoch, h.test_error, h.train_loss) for h in result.history],
    }


def run_grid(ctx: SweepContext, lrs: list[float], seeds: list[int], kind: str) -> list[dict]:
    """Train the target at every (lr, seed) as Ray tasks; each logged as an MLflow child run of kind ``kind``."""
    import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer.sweep` (mutransfer report)

    study = ctx.study
    r = study.resources  # the trials' resources: CPUs, or GPU shares when the proxies train on GPUs
    threads, gpus = r.cpus_per_trial, r.gpus_per_trial
    remote = ray.remote(num_cpus=threads, num_gpus=gpus, max_retries=study.budget.max_failures)(train_target_at)
    data_ref = ray.put(ctx.data)
    device = "cuda" if gpus > 0 else "cpu"
    pending = {
        remote.remote(study, ctx.transfer.hp, data_ref, lr, seed, threads, device): (lr, seed)
        for lr in lrs
        for seed in seeds
    }
    records = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        lr, seed = pending.pop(done[0])
        try:
            record = ray.get(done[0])
        except Exception as exc:
            raise SweepError(
                f"{kind} training at lr={lr:.4g} seed={seed} failed after {study.budget.max_failures} retries "
                f"({first_line(exc)}); the target and the proxies are kept: fix the cause and run again with --resume"
            ) from exc
        records.append(record)
        _log_point(ctx, kind, record)
        ctx.say(
            f"  {kind} [{len(records)}/{len(records) + len(pending)}] lr={record['lr']:.4g} seed={record['seed']}: "
            f"{record['status']} {record['test_error']:.4g}"
        )
    return records


def _log_point(ctx: SweepContext, kind: str, record: dict) -> None:
    client = ctx.tracker.client
    run = client.create_run(
        ctx.experiment_id,
        tags={
            PARENT_TAG: ctx.parent_id,
            RUN_NAME_TAG: f"{kind} lr={record['lr']:.4g} seed={record['seed']}",
            "mutransfer.kind": kind,
            "mutransfer.study": ctx.study.name,
            "mutransfer.status": record["status"],
        },
    )
    now = int(time.time() * 1000)
    metrics = [("test_error", e, now, epoch) for epoch, e, _ in record["history"]]
    metrics += [(k, record[k], now, 0) for k in ("trainer_seconds", "wall_seconds")]
    metrics.append(("final_test_error", record["test_error"], now, 0))
    log_batch(
        client,
        run.info.run_id,
        metrics=metrics,
        params={
            "lr": record["lr"],
            "seed": record["seed"],
            "K": ctx.study.target_K,
            "width": ctx.study.target_width or ctx.study.operator.width,
        },
    )
    ctx.tracker.set_status(run.info.run_id, "FINISHED")


def grid_cost(ctx: SweepContext, records: list[dict], wall: float) -> dict:
    """Device-seconds of ``records`` (the phase's wall × the CPUs its tasks held), the trainers' part, the rest
    (Ray task start-up, data transfer, MLflow, idle slots) as overhead, and FLOPs."""
    import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer.sweep` (mutransfer report)

    threads = max((int(r["threads"]) for r in records), default=1)
    held = min(float(ray.cluster_resources().get("CPU", 1.0)), len(records) * threads)
    trainer = sum(r["trainer_seconds"] * r["threads"] for r in records)
    device = max(wall * held, sum(r["wall_seconds"] * r["threads"] for r in records))
    per_epoch = epoch_flops(ctx.study, ctx.study.target_K, ctx.study.target_width, tuple(ctx.data.train_x.shape[1:]))
    epochs = sum(int(r["epochs"]) for r in records)
    return {
        "trainings": len(records),
        "device_seconds": device,
        "trainer_device_seconds": trainer,
        "overhead_device_seconds": max(0.0, device - trainer),
        "flops": None if per_epoch is None else epochs * per_epoch,
        "wall_seconds": wall,
    }


def verify_phase(ctx: SweepContext) -> None:
    """With ``--verify`` (mutransfer.sweep.strategies.verify runs it, once): train the target on the LR grid, fit
    its optimum and set the verification's record."""
    options = ctx.options
    lr = float(ctx.transfer.hp["lr"])
    grid = lr_grid(lr, options.verify_points)
    seeds = [int(ctx.study.training.seed) + s for s in range(options.verify_seeds)]
    ctx.say(
        f"verification: the target at {len(grid)} LRs {grid[0]:.3g}..{grid[-1]:.3g} ({SPACING_DECADES} decades apart) "
        f"x {len(seeds)} seed(s), {ctx.study.target.epochs} epochs each ..."
    )
    start = time.perf_counter()
    records = run_grid(ctx, grid, seeds, "verify_point")
    result = analyse(records, lr)
    result.cost = grid_cost(ctx, records, time.perf_counter() - start)
    ctx.say(result.summary_line())
    _log_verification(ctx, result)
    ctx.records[NAME] = result
    ctx.update_state(**{NAME: result.as_dict()})


def _log_verification(ctx: SweepContext, result: Verification) -> None:
    now = int(time.time() * 1000)
    metrics = [
        ("verify_error_at_transferred", result.error_at_transferred, now, 0),
        ("verify_error_at_optimum", result.error_at_optimum, now, 0),
        ("verify_device_seconds", result.cost["device_seconds"], now, 0),
    ]
    if result.distance_decades:
        metrics.append(("verify_distance_decades", result.distance_decades["mean"], now, 0))
        metrics.append(("verify_optimum_lr", result.optimum_lr, now, 0))
    if result.regret:
        metrics.append(("verify_regret", result.regret["mean"], now, 0))
    log_batch(
        ctx.tracker.client,
        ctx.parent_id,
        metrics=[m for m in metrics if m[1] is not None],
        tags={"mutransfer.verification": result.verdict[:250]},
    )
    path = ctx.study_dir.root / "verification.json"
    write_atomic(path, json.dumps(result.as_dict(), indent=2))
    ctx.tracker.client.log_artifact(ctx.parent_id, str(path), "verification")
