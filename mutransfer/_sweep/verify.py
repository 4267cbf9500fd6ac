"""The verification phase (``sweep --verify``): is the transferred LR the target's own optimum?

After the target trained at the transferred hyperparameters, the target model is
trained again at ``points`` master learning rates spaced ``spacing`` decades
apart around the transferred one (the transferred LR is a grid point), for
``seeds`` seeds (the study's training seed, +1, ...), each a plain training (one
Ray task, ``resources.cpus_per_trial`` threads) of ``target.epochs`` epochs with
everything else as the target had it.

Each seed's optimum comes from the landscape's estimator
(:func:`mutransfer._landscape.analysis.fit_optimum`: a parabola in log10(lr)
through the best grid point and its neighbours; a best point at the grid's edge is
flagged and not used). Reported (``verification`` in the report):

- ``distance_decades``: log10(optimum) − log10(transferred), mean over the seeds
  whose optimum is inside the grid, with a 95 % Student-t CI over those seeds
  (:func:`mutransfer._diagnostics.statistics.mean_ci`; ``ci`` [null, null] with one seed: no CI);
- ``regret``: per seed, error at the transferred LR / error at that seed's best
  grid point − 1 (0 when the transferred LR is the best grid point), mean and t CI;
- ``at_edge``: seeds whose optimum lay at the grid's edge (then the optimum is
  outside the grid: widen it with ``--verify-points``);
- the extra cost: device-seconds (the phase's wall × the CPUs its tasks held), the trainers' share of
  them, FLOPs and wall time — the proxy's grid included.

The proxy is trained too, on the same master-LR grid around the search winner's LR with the same seeds
(:mod:`mutransfer._sweep.verify_transfer`): ``proxy_optimum``, ``transfer_error`` (target − proxy optimum),
``search_gap`` (search winner − proxy optimum), and ``verdict`` naming what failed: the search, the transfer or
neither (the target-only verdict above is then ``target_verdict``). A record from before (no proxy keys) reads
back with those fields empty and renders as it did.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from mutransfer._diagnostics.statistics import mean_ci
from mutransfer._landscape.analysis import NOT_RESOLVED
from mutransfer._study import Study
from mutransfer._study.models import model_for, train_config
from mutransfer._study_folder.state import write_atomic
from mutransfer._sweep._executors import JobFailed
from mutransfer._sweep._memo import Memo, remembered
from mutransfer._sweep.context import SweepError
from mutransfer._sweep.cost import epoch_flops
from mutransfer._sweep.session import Made, Session
from mutransfer._sweep.train_target import first_line
from mutransfer._sweep.verify_transfer import compare, proxy_grid
from mutransfer._sweep.verify_transfer import seed_optima as fit_seeds
from mutransfer._tracking.runs import PARENT_TAG, RUN_NAME_TAG, create_run, log_batch
from mutransfer._training import train

#: the verification's slot in ``Made.records``, its ``state.json`` and report key
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
    # the proxy on the same master-LR grid (mutransfer._sweep.verify_transfer); empty in records from before
    search_lr: float | None = None  # the search winner's master LR (the proxy grid's centre)
    lr_factor: float | None = None  # the transfer's effective-LR factor (applied by the model, for the record)
    proxy_grid: list[float] = field(default_factory=list)
    proxy_epochs: int | None = None
    proxy_optimum: float | None = None  # the proxy's optimum LR on the target's master-LR axis
    proxy_seed_optima: list[dict] = field(default_factory=list)
    transfer_error: dict | None = None  # target optimum - proxy optimum, decades: value, ci, n, level, resolved
    search_gap: dict | None = None  # search winner's LR - proxy optimum, decades: value, ci, n, level, resolved
    target_verdict: str | None = None  # the target-only verdict when ``verdict`` names what failed
    proxy_records: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Verification:
        """Back from :meth:`as_dict` (``state.json``'s ``verification``, the report's); unknown keys are ignored."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def summary_line(self) -> str:
        span = f"{len(self.grid)} LRs {self.grid[0]:.3g}..{self.grid[-1]:.3g}"
        d = self.distance_decades
        verdict = self.target_verdict or self.verdict
        if d is None:
            return f"verification ({len(self.seeds)} seed(s), {span}): {verdict}"
        text = (
            f"verification ({len(self.seeds)} seed(s), {span}): target optimum lr {self.optimum_lr:.3g} vs "
            f"transferred {self.transferred_lr:.3g}: {d['mean']:+.2f} decades {_bounds(d['ci'], 1, '+.2f')} (n={d['n']})"
        )
        r = self.regret
        if r is not None:
            text += f"; regret {100 * r['mean']:.1f}% {_bounds(r['ci'], 100, '.1f')}"
        if self.diverged_at_transferred:
            text += f"; DIVERGED at the transferred LR for seed(s) {', '.join(map(str, self.diverged_at_transferred))}"
        return f"{text}; {verdict}"

    def transfer_line(self) -> str | None:
        """The proxy's optimum, the transfer error, the search gap and the verdict; None for a record from before."""
        if self.target_verdict is None:
            return None
        proxy = "not measured" if self.proxy_optimum is None else f"lr {self.proxy_optimum:.3g}"
        parts = [f"search winner lr {self.search_lr:.3g}, proxy optimum {proxy}"]
        for label, e in (("transfer error", self.transfer_error), ("search gap", self.search_gap)):
            if e is not None:
                parts.append(f"{label} {e['value']:+.2f} decades {_bounds(e['ci'], 1, '+.2f')}")
        return f"transfer ({', '.join(parts)}): {self.verdict}"


def analyse(
    records: list[dict],
    transferred_lr: float,
    spacing: float = SPACING_DECADES,
    *,
    proxy_records: list[dict] | None = None,
    search_lr: float | None = None,
) -> Verification:
    """The verification from its trainings: records with ``lr``, ``seed``, ``status``, ``val_error`` (pure).

    With ``proxy_records`` (the proxy on :func:`~mutransfer._sweep.verify_transfer.proxy_grid`) and ``search_lr``
    (the search winner's LR; default: the transferred one) also the proxy's optimum, the transfer error, the search
    gap and a verdict naming what failed (mutransfer._sweep.verify_transfer.compare)."""

    grid = sorted({float(r["lr"]) for r in records})
    seeds = sorted({int(r["seed"]) for r in records})
    centre = min(grid, key=lambda v: abs(math.log10(v) - math.log10(transferred_lr)))
    fitted = fit_seeds(records, grid)
    seed_optima = [{k: v for k, v in s.items() if k != "coordinate"} for s in fitted]
    distances, regrets, diverged = [], [], []
    for seed, opt in zip(seeds, fitted):
        rows = sorted((r for r in records if int(r["seed"]) == seed), key=lambda r: r["lr"])
        if opt["coordinate"] is not None:
            distances.append(opt["coordinate"] - math.log10(transferred_lr))
        ok = [r for r in rows if _ok(r)]
        at_centre = [r for r in rows if r["lr"] == centre]
        if at_centre and not _ok(at_centre[0]):
            diverged.append(seed)  # no finite regret: reported apart, never silently dropped
        elif ok and at_centre:
            regrets.append(at_centre[0]["val_error"] / min(r["val_error"] for r in ok) - 1.0)
    distance = mean_ci(distances) if distances else None
    regret = mean_ci(regrets) if regrets else None
    mean_curve = {v: _mean([r["val_error"] for r in records if r["lr"] == v and _ok(r)]) for v in grid}
    finite = {v: e for v, e in mean_curve.items() if e is not None}
    optimum_lr = None if distance is None else float(transferred_lr * 10.0**distance.mean)
    verdict = _verdict(distance, seed_optima, spacing)
    extra: dict = {}
    if proxy_records:
        search = float(transferred_lr if search_lr is None else search_lr)
        extra = compare(fitted, proxy_records, transferred_lr, search, verdict)
        extra.update(
            target_verdict=verdict,
            proxy_epochs=max((int(r.get("epochs", 0)) for r in proxy_records), default=0),
            proxy_records=[{k: v for k, v in r.items() if k != "history"} for r in proxy_records],
        )
        verdict = extra.pop("verdict")
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
        **extra,
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
    e = record.get("val_error")
    return record.get("status") != "diverged" and e is not None and math.isfinite(e)


def _mean(values: list[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def train_target_at(
    study, hp: dict, data, lr: float, seed: int, threads: int, device: str = "cpu", target: bool = True
) -> dict:
    """Train the target (or, ``target`` False, the proxy for the search's ``budget.epochs``) once at master LR ``lr``
    and training seed ``seed`` (a Ray task; also callable directly)."""

    torch.set_num_threads(max(1, int(threads)))
    seeded = dataclasses.replace(study, training=dataclasses.replace(study.training, seed=int(seed)))
    point = dict(hp, lr=float(lr))
    epochs = study.target.epochs if target else study.budget.epochs
    start = time.perf_counter()
    torch.manual_seed(int(seed))
    model = model_for(seeded, data, target=target, hp=point)
    result = train(model, data, train_config(seeded, point, epochs=epochs, device=device))
    trainer = float(result.trainer_seconds)
    return {
        "lr": float(lr),
        "seed": int(seed),
        "status": result.status,
        "val_error": float(result.test_error),
        "epochs": int(result.epochs_completed),
        "trainer_seconds": float(trainer),
        "wall_seconds": time.perf_counter() - start,
        "threads": int(threads),
        "history": [(h.epoch, h.test_error, h.train_loss) for h in result.history],
    }


@dataclass(frozen=True)
class Grid:
    """One grid of trainings, a value run by :func:`run_grids` (as a search is a ``Search`` run by ``run_search``):
    the MLflow runs' ``kind``, its master LRs and seeds, the study and hyperparameters to train (``target``: the
    study's target model for ``target.epochs`` on the selection split at the target's grid, else its proxy for
    ``budget.epochs`` on the proxy's)."""

    kind: str
    lrs: tuple[float, ...]
    seeds: tuple[int, ...]
    study: Study
    hp: Mapping[str, object]
    target: bool = True


def run_grids(session: Session, grids: list[Grid]) -> list[list[dict]]:
    """Every grid's (lr, seed) trainings through the study's executor, submitted together (the proxy's short ones fill
    the slots the target's leave), each logged as an MLflow child run of its grid's kind; the records per grid, in
    ``grids``' order."""
    # the optima are selections: validation rows, never the test split; the proxy's on its own grid
    proxy = session.proxy_data
    points, jobs = [], []
    for i, grid in enumerate(grids):
        r = grid.study.resources  # the trials' resources: CPUs, or GPU shares when the proxies train on GPUs
        device = "cuda" if r.gpus_per_trial > 0 else "cpu"
        for lr in grid.lrs:
            for seed in grid.seeds:
                data = session.selection_data if grid.target else proxy
                jobs.append((grid.study, grid.hp, data, lr, seed, r.cpus_per_trial, device, grid.target))
                points.append((i, lr, seed))
    records: list[list[dict]] = [[] for _ in grids]
    total, finished = len(jobs), 0
    r = session.study.resources
    done = session.executor.grid(
        train_target_at,
        jobs,
        threads=r.cpus_per_trial,
        gpus=r.gpus_per_trial,
        retries=session.study.budget.max_failures,
    )
    while finished < total:
        try:
            j, record = next(done)
        except JobFailed as exc:
            i, lr, seed = points[exc.index]
            raise SweepError(
                f"{grids[i].kind} training at lr={lr:.4g} seed={seed} failed after {grids[i].study.budget.max_failures} "
                f"retries ({first_line(exc.cause)}); the target and the proxies are kept: fix the cause and run again "
                "with --resume"
            ) from exc.cause
        finished += 1
        i = points[j][0]
        grid = grids[i]
        records[i].append(record)
        _log_point(session, grid.kind, record, grid.study, grid.target)
        session.say(
            f"  {grid.kind} [{finished}/{total}] lr={record['lr']:.4g} seed={record['seed']}: "
            f"{record['status']} val {record['val_error']:.4g}"
        )
    return records


def _log_point(session: Session, kind: str, record: dict, study, target: bool = True) -> None:

    client = session.tracker.client
    run_id = create_run(
        client,
        session.experiment_id,
        {
            PARENT_TAG: session.parent_id,
            RUN_NAME_TAG: f"{kind} lr={record['lr']:.4g} seed={record['seed']}",
            "mutransfer.kind": kind,
            "mutransfer.study": session.study.name,  # the study's name (a ladder rung's proxy too)
            "mutransfer.status": record["status"],
        },
    )
    now = int(time.time() * 1000)
    metrics = [("val_error", e, now, epoch) for epoch, e, _ in record["history"]]
    metrics += [(k, record[k], now, 0) for k in ("trainer_seconds", "wall_seconds")]
    metrics.append(("final_val_error", record["val_error"], now, 0))
    log_batch(
        client,
        run_id,
        metrics=metrics,
        params={
            "lr": record["lr"],
            "seed": record["seed"],
            "K": study.target_K if target else study.proxy_K,
            "width": (study.target_width or study.operator.width) if target else study.operator.width,
        },
    )
    session.tracker.set_status(run_id, "FINISHED")


def grid_cost(
    session: Session,
    records: list[dict],
    wall: float,
    proxy_records: list[dict] | None = None,
    search: Study | None = None,
) -> dict:
    """Device-seconds of ``records`` and ``proxy_records`` (the phase's wall × the CPUs its tasks held), the trainers'
    part, the rest (Ray task start-up, data transfer, MLflow, idle slots) as overhead, and FLOPs (the target's per
    epoch for ``records``, the proxy's of ``search`` for ``proxy_records``); ``proxy``: the proxy grid's own share."""
    proxies = list(proxy_records or [])
    every = records + proxies
    threads = max((int(r["threads"]) for r in every), default=1)
    held = session.executor.held_cpus(len(every), threads)
    trainer = sum(r["trainer_seconds"] * r["threads"] for r in every)
    device = max(wall * held, sum(r["wall_seconds"] * r["threads"] for r in every))
    shape = tuple(session.data.train_x.shape[1:])
    per_epoch = epoch_flops(session.study, session.study.target_K, session.study.target_width, shape)
    flops = None if per_epoch is None else sum(int(r["epochs"]) for r in records) * per_epoch
    cost = {
        "trainings": len(every),
        "device_seconds": device,
        "trainer_device_seconds": trainer,
        "overhead_device_seconds": max(0.0, device - trainer),
        "flops": flops,
        "wall_seconds": wall,
    }
    if proxies:
        search = search or session.study
        per_proxy = epoch_flops(search, search.proxy_K, search.operator.width, shape, search.proxy_resolution)
        proxy_flops = None if per_proxy is None else sum(int(r["epochs"]) for r in proxies) * per_proxy
        cost["flops"] = None if flops is None or proxy_flops is None else flops + proxy_flops
        cost["proxy"] = {
            "trainings": len(proxies),
            "trainer_device_seconds": sum(r["trainer_seconds"] * r["threads"] for r in proxies),
            "flops": proxy_flops,
        }
    return cost


def verify_phase(session: Session, made: Made) -> Made:
    """With ``--verify`` (mutransfer._sweep.strategies.verify runs it): train the target on the LR grid and the proxy
    on the same master-LR grid around the search winner's LR, fit both optima, once for the transferred
    hyperparameters and the grid's points and seeds; ``made`` with the verification's record."""
    options = session.options
    inputs = {"hp": made.transfer.hp, "points": options.verify_points, "seeds": options.verify_seeds}
    memo = Memo(NAME, Verification.from_dict, Verification.as_dict)
    return made.with_record(NAME, remembered(session, memo, inputs, lambda: _verify(session, made)))


def _verify(session: Session, made: Made) -> Verification:
    options, transfer = session.options, made.transfer
    lr = float(transfer.hp["lr"])
    grid = lr_grid(lr, options.verify_points)
    seeds = [int(session.study.training.seed) + s for s in range(options.verify_seeds)]
    search = made.final(session.study)
    winner_hp = dict(search.best.hp)
    search_lr = float(winner_hp["lr"])
    pgrid = proxy_grid(grid, lr, search_lr)
    session.say(
        f"verification: the target at {len(grid)} LRs {grid[0]:.3g}..{grid[-1]:.3g} ({SPACING_DECADES} decades apart) "
        f"x {len(seeds)} seed(s), {session.study.target.epochs} epochs each, and the proxy on the same master LRs around "
        f"the search winner's {search_lr:.3g}, {search.study.budget.epochs} epochs each ..."
    )
    start = time.perf_counter()
    records, proxy_records = run_grids(
        session,
        [
            Grid("verify_point", tuple(grid), tuple(seeds), session.study, dict(transfer.hp)),
            Grid("verify_proxy_point", tuple(pgrid), tuple(seeds), search.study, dict(winner_hp), target=False),
        ],
    )
    result = analyse(records, lr, proxy_records=proxy_records, search_lr=search_lr)
    result.lr_factor = transfer.record.get("lr_factor")
    result.cost = grid_cost(session, records, time.perf_counter() - start, proxy_records, search.study)
    session.say(result.summary_line())
    session.say(result.transfer_line() or "")
    _log_verification(session, result)
    return result


def transfer_metrics(v: dict | None, now: int) -> list[tuple]:
    """The proxy side's metrics for the MLflow parent run (the strategy's ``metrics``): the proxy's optimum, the
    transfer error and the search gap with their interval bounds when measured; none for a record from before."""
    if not v:
        return []
    out = [("verify_proxy_optimum_lr", v.get("proxy_optimum"), now, 0)]
    for name, key in (("verify_transfer_error_decades", "transfer_error"), ("verify_search_gap_decades", "search_gap")):
        e = v.get(key)
        if e:
            lo, hi = e["ci"]
            out += [(name, e["value"], now, 0), (f"{name}_lo", lo, now, 0), (f"{name}_hi", hi, now, 0)]
            out.append((f"{name}_resolved", float(bool(e["resolved"])), now, 0))
    return [m for m in out if m[1] is not None]


def _log_verification(session: Session, result: Verification) -> None:
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
        session.tracker.client,
        session.parent_id,
        metrics=[m for m in metrics if m[1] is not None],
        tags={"mutransfer.verification": result.verdict[:250]},
    )
    path = session.study_dir.root / "verification.json"
    write_atomic(path, json.dumps(result.as_dict(), indent=2))
    session.tracker.client.log_artifact(session.parent_id, str(path), "verification")
