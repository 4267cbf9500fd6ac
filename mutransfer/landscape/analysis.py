"""Landscape analysis: optimum per curve, optimal value per scale (K or width), drift of the optimum.

Pure functions over plain records (no Ray, no MLflow). A record is one training:
{"parametrization", "scale", "value", "seed", "test_error", "status"}; ``scale``
is K (Fourier modes) or the width, whichever the landscape varies.

The optimum of a curve (one parametrization, one K, one seed, or the seed-mean
curve) is the grid point with the lowest test error, refined by a parabola
through it and its two neighbours in the transformed coordinate (log10 of the
learning rate), so optima are not quantised to the grid. Diverged points never
count as optima; in the mean curve they count as the diverged sentinel.

Drift = transformed optimum at the largest scale minus that at the smallest, per
seed; reported as mean and standard deviation across seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mutransfer.errors import UserInputError
from mutransfer.training import DIVERGED_METRIC

#: Hyperparameters a landscape can vary, with the coordinate the optimum and drift are measured in.
TRANSFORMS = {
    "lr": ("log10(lr)", np.log10, lambda t: 10.0**t),
    "batch_size": ("log10(batch size)", np.log10, lambda t: 10.0**t),
    "beta2": ("log10(1 - beta2)", lambda b: np.log10(1.0 - np.asarray(b, float)), lambda t: 1.0 - 10.0**t),
}


def transform(hyperparameter: str):
    """(label, forward, inverse) of the coordinate used for optima and drift."""
    try:
        return TRANSFORMS[hyperparameter]
    except KeyError:
        raise UserInputError(f"hyperparameter {hyperparameter!r}: a landscape varies one of {', '.join(TRANSFORMS)}") from None


def curve_optimum(values: list[float], errors: list[float], statuses: list[str], hyperparameter: str) -> float | None:
    """Refined location (in the hyperparameter's own units) of the minimum of one curve; None if all diverged."""
    _, forward, inverse = transform(hyperparameter)
    order = np.argsort(values)
    x = np.asarray(forward(np.asarray(values, float)[order]), float)
    y = np.asarray(errors, float)[order]
    ok = np.array([s != "diverged" and math.isfinite(e) for s, e in zip(np.asarray(statuses)[order], y)])
    if not ok.any():
        return None
    y_log = np.where(ok, np.log(np.maximum(y, 1e-12)), np.inf)
    i = int(np.argmin(y_log))
    if 0 < i < len(x) - 1 and ok[i - 1] and ok[i + 1]:
        x0, x1, x2 = x[i - 1 : i + 2]
        y0, y1, y2 = y_log[i - 1 : i + 2]
        denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
        a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
        b = (x2**2 * (y0 - y1) + x1**2 * (y2 - y0) + x0**2 * (y1 - y2)) / denom
        if a > 0:
            vertex = -b / (2 * a)
            return float(inverse(np.clip(vertex, x0, x2)))
    return float(inverse(x[i]))


@dataclass
class CurveSummary:
    """One (parametrization, scale) curve: seed-mean errors per value, the optimum and its spread across seeds."""

    parametrization: str
    scale: int
    values: list[float]
    mean_error: list[float]
    min_error: list[float]
    max_error: list[float]
    diverged: list[int]
    seeds: int
    optimum: float | None
    seed_optima: list[float | None]


def summarize(records: list[dict], hyperparameter: str) -> list[CurveSummary]:
    """Group records into curves and find each curve's optimum (seed-mean curve and per seed)."""
    curves = []
    keys = sorted({(r["parametrization"], r["scale"]) for r in records})
    for parametrization, scale in keys:
        rows = [r for r in records if r["parametrization"] == parametrization and r["scale"] == scale]
        values = sorted({r["value"] for r in rows})
        seeds = sorted({r["seed"] for r in rows})
        per_value = {v: [r for r in rows if r["value"] == v] for v in values}

        def err(r):
            return DIVERGED_METRIC if r["status"] == "diverged" else r["test_error"]

        mean = [float(np.mean([err(r) for r in per_value[v]])) for v in values]
        all_diverged = ["diverged" if all(r["status"] == "diverged" for r in per_value[v]) else "ok" for v in values]
        seed_optima = []
        for seed in seeds:
            seed_rows = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["value"])
            seed_optima.append(curve_optimum([r["value"] for r in seed_rows], [r["test_error"] for r in seed_rows],
                                             [r["status"] for r in seed_rows], hyperparameter))
        curves.append(CurveSummary(
            parametrization=parametrization,
            scale=scale,
            values=values,
            mean_error=mean,
            min_error=[float(min(err(r) for r in per_value[v])) for v in values],
            max_error=[float(max(err(r) for r in per_value[v])) for v in values],
            diverged=[sum(r["status"] == "diverged" for r in per_value[v]) for v in values],
            seeds=len(seeds),
            optimum=curve_optimum(values, mean, all_diverged, hyperparameter),
            seed_optima=seed_optima,
        ))
    return curves


@dataclass
class Drift:
    """Shift of the optimum from the smallest to the largest scale, in the transformed coordinate."""

    parametrization: str
    coordinate: str
    scale_from: int
    scale_to: int
    mean: float | None
    std: float | None
    per_seed: list[float | None]


def drift(curves: list[CurveSummary], hyperparameter: str) -> list[Drift]:
    """Per parametrization: optimum(largest scale) − optimum(smallest) per seed, with mean and std across seeds."""
    label, forward, _ = transform(hyperparameter)
    out = []
    for parametrization in dict.fromkeys(c.parametrization for c in curves):
        mine = sorted((c for c in curves if c.parametrization == parametrization), key=lambda c: c.scale)
        if len(mine) < 2:
            continue
        lo, hi = mine[0], mine[-1]
        per_seed = [
            None if a is None or b is None else float(forward(b) - forward(a))
            for a, b in zip(lo.seed_optima, hi.seed_optima)
        ]
        finite = [d for d in per_seed if d is not None]
        out.append(Drift(
            parametrization=parametrization,
            coordinate=label,
            scale_from=lo.scale,
            scale_to=hi.scale,
            mean=float(np.mean(finite)) if finite else None,
            std=float(np.std(finite, ddof=1)) if len(finite) > 1 else (0.0 if finite else None),
            per_seed=per_seed,
        ))
    return out
