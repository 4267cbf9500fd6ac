"""Run a landscape: a grid of trainings (parametrization × scale × value × seed) as Ray tasks, logged to MLflow.

The scale is K (``modes``: FNO, parametrization in K = standard / mup) or the
width (``widths``: any operator, width parametrization = standard / mup with
the smallest width as the base width). Each grid point trains the study's
operator with one hyperparameter set to the point's value (everything else from the study's ``training`` section) for the study's
proxy epoch budget (or ``epochs``). The driver logs one MLflow child run per point
under one parent run (tag ``mutransfer.kind = landscape``) as results arrive,
then writes the figure, the optimum table and the drift (``mutransfer._landscape.analysis``:
one estimator of the optimum per seed for the stars, the table, the JSON and the drift).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mutransfer._diagnostics.k_exponent import resolve_k_exponent
from mutransfer._landscape.analysis import analyze, transform
from mutransfer._landscape.plot import plot_landscape
from mutransfer._local_ray import start_ray
from mutransfer._study import load_study
from mutransfer._study.data import load_study_data
from mutransfer._study.inputs import check_address_form, check_folder
from mutransfer._study.memory import check_grid_point_memory
from mutransfer._study.models import merge_hyperparameters, model_for, train_config
from mutransfer._tracking.runs import PARENT_TAG, RUN_NAME_TAG, Tracker, create_run, log_batch, resolve_tracking_uri
from mutransfer._training import train
from mutransfer.errors import UserInputError
from operators.factory import module_paths
from operators.parametrization import check_modes
from operators.spectral import check_grid


@dataclass
class LandscapeOptions:
    """What to run. ``values`` are the hyperparameter's grid; ``seeds`` counts seeds per point."""

    study_path: str | None
    values: list[float]
    #: values of K (FNO) — or None with ``widths``
    modes: list[int] | None = None
    hyperparameter: str = "lr"
    #: widths (any operator; the smallest is the muP base width) — or None with ``modes``
    widths: list[int] | None = None
    parametrizations: tuple[str, ...] = ("standard", "mup")
    seeds: int = 3
    epochs: int | None = None
    cpus_per_task: int = 1
    address: str | None = None
    tracking_uri: str | None = None
    out_dir: str = "landscape"
    progress: bool = True
    study_overrides: dict = field(default_factory=dict)


def axis_of(options: LandscapeOptions) -> str:
    """ "K" or "width": what the landscape scales."""
    return "width" if options.widths else "K"


def grid_points(options: LandscapeOptions, base_seed: int) -> list[dict]:
    """Every (parametrization, scale, value, seed) to train, in a deterministic order."""
    scales = options.widths if options.widths else options.modes
    return [
        {"parametrization": p, "scale": int(k), "value": v, "seed": base_seed + s}
        for p in options.parametrizations
        for k in sorted(set(scales))
        for v in sorted(set(options.values))
        for s in range(options.seeds)
    ]


def validate(options: LandscapeOptions):
    """Load the study and check every grid point before any compute; returns the study."""

    transform(options.hyperparameter)
    study, _ = load_study(options.study_path, options.study_overrides)
    if (options.modes is None) == (options.widths is None):
        raise UserInputError("--modes/--widths: give exactly one of them (the scale the landscape varies)")
    if options.modes is not None and not study.family.scales("K"):
        raise UserInputError(f"--modes: {study.operator.type} has no Fourier modes; vary the width with --widths")
    scales = options.widths if options.widths else options.modes
    if len(set(scales)) < 2:
        what = "widths" if options.widths else "K"
        raise UserInputError(
            f"--{'widths' if options.widths else 'modes'} {scales}: give at least two values of {what} to measure a drift"
        )
    if len(set(options.values)) < 3:
        raise UserInputError("--lrs/--values: give at least three values (or --lr-range LO HI --points N with N >= 3)")
    for value in options.values:
        if options.hyperparameter == "beta2" and not 0 < value < 1:
            raise UserInputError(f"beta2 value {value}: must be in (0, 1)")
        if options.hyperparameter != "beta2" and not value > 0:
            raise UserInputError(f"{options.hyperparameter} value {value}: must be positive")
        if options.hyperparameter == "batch_size" and value != int(value):
            raise UserInputError(f"batch_size value {value}: must be an integer")
    if options.widths:
        heads = study.operator.heads
        for w in options.widths:
            if heads and w % heads:
                raise UserInputError(
                    f"--widths: {w} is not divisible by operator.heads {heads}; use multiples of {heads}"
                )
        # FNO keeps K = proxy_K, which the study already checked against its grid
    else:
        grid = study.grid_shape
        for k in options.modes:
            for p in options.parametrizations:
                check_modes(int(k), study.dim, p)
            check_grid(grid, int(k))
    if options.seeds < 1 or options.cpus_per_task < 1 or (options.epochs is not None and options.epochs < 1):
        raise UserInputError("--seeds, --cpus-per-task and --epochs must be positive integers")
    check_address_form(options.address)
    check_folder("--out", options.out_dir)
    if options.address is None:
        _check_memory(study, options)
    return study


def _check_memory(study, options: LandscapeOptions) -> None:
    """The largest model of the grid must fit this machine's RAM shared by the tasks that run at once."""

    largest_batch = max(options.values) if options.hyperparameter == "batch_size" else study.training.batch_size
    concurrency = max(1, (os.cpu_count() or 1) // options.cpus_per_task)
    check_grid_point_memory(
        study,
        modes=max(options.modes) if options.modes else study.proxy_K,
        width=max(options.widths) if options.widths else study.operator.width,
        batch=int(largest_batch),
        concurrency=concurrency,
    )


def train_point(study, spec: dict, data, epochs: int, threads: int) -> dict:
    """Train one grid point; returns its record (status, test error, per-epoch history, seconds).

    ``spec["axis"]`` "K": the FNO at K = scale under the point's K-parametrization;
    "width": the operator at width = scale under the point's width
    parametrization, with ``spec["base_width"]`` as the muP base width.
    """

    torch.set_num_threads(threads)
    training = dataclasses.replace(study.training, seed=int(spec["seed"]))
    if spec.get("axis", "K") == "width":
        operator = dataclasses.replace(study.operator, width=int(spec["base_width"]))
        point_study = dataclasses.replace(
            study, operator=operator, width_parametrization=spec["parametrization"], training=training
        )
        modes, width = study.proxy_K, int(spec["scale"])
    else:
        point_study = dataclasses.replace(study, parametrization=spec["parametrization"], training=training)
        modes, width = int(spec["scale"]), study.operator.width
    hp = merge_hyperparameters(point_study, {spec["hyperparameter"]: spec["value"]})
    torch.manual_seed(int(spec["seed"]))
    model = model_for(point_study, data, hp=hp, modes=modes, width=width)
    start = time.perf_counter()
    result = train(model, data, train_config(point_study, hp, epochs=epochs))
    return {
        **{k: spec[k] for k in ("parametrization", "scale", "value", "seed")},
        "status": result.status,
        "test_error": float(result.test_error),
        "history": [(h.epoch, h.test_error, h.train_loss) for h in result.history],
        "seconds": time.perf_counter() - start,
    }


def run_landscape(options: LandscapeOptions, say=print) -> dict:
    """Run the grid on Ray, log to MLflow, write landscape.png and landscape.json into ``out_dir``."""
    import ray  # noqa: PLC0415 -- deferred: ray, only when the grid runs (validation and the CLI must not pay for it)

    study = validate(options)
    epochs = int(options.epochs or study.budget.epochs)
    axis = axis_of(options)
    base_width = min(options.widths) if options.widths else None
    specs = [
        dict(s, hyperparameter=options.hyperparameter, axis=axis, base_width=base_width)
        for s in grid_points(options, int(study.training.seed))
    ]
    data, data_path = load_study_data(study, progress=options.progress)
    k_rule = resolve_k_exponent(study, data)  # operator.k_exponent: data, measured between proxy_K and target_K
    if k_rule is not None and options.progress:
        say(k_rule.describe())

    tracker = Tracker(resolve_tracking_uri(options.tracking_uri or study.tracking.uri))
    experiment_id = tracker.ensure_experiment(study.tracking.experiment)
    parent = create_run(
        tracker.client,
        experiment_id,
        {
            "mutransfer.kind": "landscape",
            "mutransfer.study": study.name,
            RUN_NAME_TAG: f"{study.name} landscape ({options.hyperparameter})",
        },
    )
    log_batch(
        tracker.client,
        parent,
        params={
            "hyperparameter": options.hyperparameter,
            "values": list(sorted(set(options.values))),
            "axis": axis,
            "scales": sorted(set(options.widths or options.modes)),
            "parametrizations": list(options.parametrizations),
            "operator": study.operator.type,
            "seeds": options.seeds,
            "epochs": epochs,
            "data": str(data_path),
        },
    )

    started_ray = start_ray(options.address or None, module_paths(study.operator.type, study.operator.factory_dir))
    wall = time.perf_counter()
    records: list[dict] = []
    try:
        remote = ray.remote(num_cpus=options.cpus_per_task, max_retries=1)(train_point)
        data_ref = ray.put(data)
        pending = {remote.remote(study, spec, data_ref, epochs, options.cpus_per_task): spec for spec in specs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            pending.pop(done[0])
            record = ray.get(done[0])
            records.append(record)
            _log_point(tracker, experiment_id, parent, study.name, options.hyperparameter, record, axis)
            if options.progress:
                say(
                    f"  [{len(records)}/{len(specs)}] {record['parametrization']} {axis}={record['scale']} "
                    f"{options.hyperparameter}={record['value']:.4g} seed={record['seed']}: "
                    f"{record['status']} {record['test_error']:.4g}"
                )
    except BaseException:
        tracker.set_status(parent, "KILLED")
        raise
    finally:
        if started_ray:
            ray.shutdown()
    wall = time.perf_counter() - wall

    curves, drifts, difference = analyze(records, options.hyperparameter, axis)
    out = Path(options.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figure = out / "landscape.png"
    if axis == "width":
        fixed = f"{study.model_text(False).rsplit(' width', 1)[0]}, base width {base_width}"
        model = f"{fixed}, width {', '.join(map(str, sorted(set(options.widths))))}"
    else:
        model = f"{study.model_text(False).split(' K=')[0]} width {study.operator.width}"
    plot_landscape(
        curves,
        drifts,
        options.hyperparameter,
        figure,
        axis=axis,
        difference=difference,
        title=f"{study.name}: {study.problem.name}, {model}, {epochs} epochs, {options.seeds} seeds",
    )
    payload = {
        "study": study.name,
        "problem": study.problem.name,
        "hyperparameter": options.hyperparameter,
        "axis": axis,
        "operator": study.operator.type,
        "base_width": base_width,
        "epochs": epochs,
        "wall_seconds": wall,
        "device_seconds": sum(r["seconds"] for r in records) * options.cpus_per_task,
        "seeds": options.seeds,
        "curves": [c.as_dict() for c in curves],
        "drift": [d.as_dict() for d in drifts],
        "drift_difference": None if difference is None else difference.as_dict(),
        "records": [{k: v for k, v in r.items() if k != "history"} for r in records],
        "figure": str(figure),
        "mlflow_parent_run": parent,
    }
    (out / "landscape.json").write_text(json.dumps(payload, indent=2))
    tracker.client.log_artifact(parent, str(figure))
    tracker.client.log_artifact(parent, str(out / "landscape.json"))
    now = int(time.time() * 1000)
    metrics = []
    for d in drifts:
        if d.slope is not None:  # slope per ln(scale); the CI ends (none with one seed) and the move over the span
            metrics += [
                (f"drift_{d.parametrization}{suffix}", value, now, 0)
                for suffix, value in (("", d.slope.mean), ("_decades", d.decades.mean)) + _ci_ends(d.slope)
            ]
    if difference is not None:
        metrics += [
            (f"drift_difference{suffix}", value, now, 0)
            for suffix, value in (("", difference.slope.mean),) + _ci_ends(difference.slope)
        ]
    log_batch(tracker.client, parent, metrics=metrics)
    tracker.set_status(parent, "FINISHED")
    return payload


def _ci_ends(estimate) -> tuple:
    """(("_lo", lo), ("_hi", hi)) of an estimate with an interval; () without one (one seed)."""
    return (("_lo", estimate.lo), ("_hi", estimate.hi)) if estimate.bounded else ()


def _log_point(
    tracker, experiment_id: str, parent: str, study_name: str, hyperparameter: str, record: dict, axis: str = "K"
) -> None:
    name = f"{record['parametrization']} {axis}={record['scale']} {hyperparameter}={record['value']:.4g} seed={record['seed']}"
    run_id = create_run(
        tracker.client,
        experiment_id,
        {
            PARENT_TAG: parent,
            RUN_NAME_TAG: name,
            "mutransfer.kind": "landscape_point",
            "mutransfer.study": study_name,
            "mutransfer.status": record["status"],
        },
    )
    now = int(time.time() * 1000)
    metrics = [("test_error", e, now, epoch) for epoch, e, _ in record["history"]]
    metrics += [("train_loss", loss, now, epoch) for epoch, _, loss in record["history"]]
    metrics += [("final_test_error", record["test_error"], now, 0), ("seconds", record["seconds"], now, 0)]
    log_batch(
        tracker.client,
        run_id,
        metrics=metrics,
        params={
            "parametrization": record["parametrization"],
            ("modes" if axis == "K" else "width"): record["scale"],
            hyperparameter: record["value"],
            "seed": record["seed"],
        },
    )
    tracker.set_status(run_id, "FINISHED")


def _star_ci(ci: list, inverse) -> str:
    """The star's CI in the hyperparameter's units, ``[lo, hi]``; ``[no CI]`` when a bound is missing (one seed)."""
    if any(t is None for t in ci):
        return "[no CI: 1 seed]"
    return "[{:.3g}, {:.3g}]".format(*sorted(inverse(t) for t in ci))


def format_table(payload: dict) -> str:
    """Plain-text table: the star per scale (mean of usable per-seed optima, CI), per-seed optima, the drift lines."""
    hyperparameter = payload["hyperparameter"]
    inverse = transform(hyperparameter)[2]
    axis = payload.get("axis", "K")
    lines = [
        f"optimal {hyperparameter} per {axis} ({payload['study']}, {payload['epochs']} epochs): mean of the "
        f"per-seed optima in {transform(hyperparameter)[0]} [95% CI]; (edge) = at the grid's edge, not used"
    ]
    lines.append(
        f"{'parametrization':<16}{axis:>6}  {'optimum':>9} {'[CI]':<21} {'edge':<12} {'per seed':<40} "
        f"{'best mean error':>15}"
    )
    for c in payload["curves"]:
        per_seed = ", ".join(
            "diverged" if o["value"] is None else f"{o['value']:.3g}" + ("(edge)" if o["at_edge"] else "")
            for o in c["seed_optima"]
        )
        star = c["star"]
        opt = "none" if star is None else f"{inverse(star['mean']):.3g}"
        ci = "" if star is None else _star_ci(star["ci"], inverse)
        edge = f"{c['edge']}/{len(c['seed_optima'])} seeds"
        lines.append(
            f"{c['parametrization']:<16}{c['scale']:>6}  {opt:>9} {ci:<21} {edge:<12} {per_seed:<40} "
            f"{min(c['mean_error']):>15.4g}"
        )
    for d in payload["drift"]:
        lines.append(d["text"])
        if d["excluded"]:
            lines.append(
                f"  excluded at the grid's edge (seed, {axis}): " + ", ".join(f"({s}, {k})" for s, k in d["excluded"])
            )
    if payload.get("drift_difference"):
        lines.append(payload["drift_difference"]["text"])
    return "\n".join(lines)
