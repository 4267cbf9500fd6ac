"""Landscape analysis: the one estimator of an optimum, the star per scale, and the drift of the optimum.

Pure functions over plain records (no Ray, no MLflow). A record is one training:
{"parametrization", "scale", "value", "seed", "test_error", "status"}; ``scale``
is K (Fourier modes) or the width, whichever the landscape varies.

**Optimum of one seed's curve** (:func:`fit_optimum`, the only estimator used by the
table, the figure, the JSON, the drift and ``sweep --verify``). The coordinate is the
hyperparameter's transform (log10(lr), log10(batch size), log10(1 - beta2)). Take the
grid point with the lowest test error among the points that did not diverge; then

- if it is the first or last grid value, the optimum is that grid point, flagged
  ``at_edge`` (the true optimum may lie outside the grid): it is shown but never used
  for the star or the drift;
- else, if both grid neighbours trained (not diverged, finite error), the optimum is
  the vertex of the parabola through the three points in (coordinate, ln test error),
  clipped to the neighbours' interval;
- else (a neighbour diverged) the optimum is the best grid point itself. The same
  fallback applies if the parabola is not convex; since the best point is the first
  grid point with the lowest error, its left neighbour is strictly higher and the
  parabola is convex unless rounding says otherwise, so this is a guard only. (A tie
  with the right neighbour puts the vertex half-way between the two.)

A curve whose points all diverged has no optimum (``value`` None).

**Star per scale**: the mean over seeds of the usable per-seed optimum coordinates,
with a 95 % Student-t CI over those seeds (:func:`mutransfer._diagnostics.statistics.mean_ci`;
no CI when one seed is usable).

**Drift** (:func:`drift`): per seed, the least-squares slope of the optimum's
coordinate against ln(scale) over every scale at which that seed's optimum is usable
(a seed needs at least two such scales); then the mean over seeds with a 95 % Student-t CI.
Units: decades per unit of ln K (or ln width). The drift over the landscape's span,
slope × ln(scale_max / scale_min), is in decades. A drift whose CI covers 0, or that
rests on a single seed (no CI), is "not resolved at this scale". :func:`drift_difference`
compares SP and muP: mean(SP slopes) − mean(muP slopes), Welch's t CI over the two
independent seed sets (no CI when either side has one seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mutransfer._diagnostics.statistics import Estimate, difference_ci, fit_slope, mean_ci
from mutransfer._training import DIVERGED_METRIC
from mutransfer.errors import UserInputError

#: Hyperparameters a landscape can vary, with the coordinate the optimum and drift are measured in.
TRANSFORMS = {
    "lr": ("log10(lr)", np.log10, lambda t: 10.0**t),
    "batch_size": ("log10(batch size)", np.log10, lambda t: 10.0**t),
    "beta2": ("log10(1 - beta2)", lambda b: np.log10(1.0 - np.asarray(b, float)), lambda t: 1.0 - 10.0**t),
}
#: the coordinate of the optimum, as written in the drift line
OPTIMUM_LABELS = {"lr": "log10(lr*)", "batch_size": "log10(batch size*)", "beta2": "log10(1 - beta2*)"}
NOT_RESOLVED = "not resolved at this scale"


def transform(hyperparameter: str):
    """(label, forward, inverse) of the coordinate used for optima and drift."""
    try:
        return TRANSFORMS[hyperparameter]
    except KeyError:
        raise UserInputError(
            f"hyperparameter {hyperparameter!r}: a landscape varies one of {', '.join(TRANSFORMS)}"
        ) from None


@dataclass(frozen=True)
class Optimum:
    """Optimum of one curve; ``coordinate`` is ``value`` in the transformed coordinate (log10(lr), ...)."""

    value: float | None
    coordinate: float | None
    at_edge: bool

    @property
    def usable(self) -> bool:
        """Counts for the star and the drift: the curve trained somewhere and its best point is inside the grid."""
        return self.value is not None and not self.at_edge


def fit_optimum(values, errors, statuses, hyperparameter: str) -> Optimum:
    """The optimum of one curve (see the module docstring for the exact rule); values in any order."""
    _, forward, inverse = transform(hyperparameter)
    order = np.argsort(np.asarray(values, float))
    x = np.asarray(forward(np.asarray(values, float)[order]), float)
    y = np.asarray(errors, float)[order]
    status = np.asarray(statuses)[order]
    ok = np.array([s != "diverged" and math.isfinite(e) for s, e in zip(status, y)], bool)
    if not ok.any():
        return Optimum(None, None, False)
    y_log = np.where(ok, np.log(np.maximum(np.where(ok, y, 1.0), 1e-300)), np.inf)
    i = int(np.argmin(y_log))
    if i == 0 or i == len(x) - 1:
        return Optimum(float(inverse(x[i])), float(x[i]), True)
    coordinate = float(x[i])
    if ok[i - 1] and ok[i + 1]:
        x0, x1, x2 = x[i - 1 : i + 2]
        y0, y1, y2 = y_log[i - 1 : i + 2]
        denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
        a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
        b = (x2**2 * (y0 - y1) + x1**2 * (y2 - y0) + x0**2 * (y1 - y2)) / denom
        if a > 0:  # convex: the vertex is a minimum
            coordinate = float(np.clip(-b / (2 * a), x0, x2))
    return Optimum(float(inverse(coordinate)), coordinate, False)


@dataclass
class CurveSummary:
    """One (parametrization, scale) curve: seed-mean errors per value (drawn only), per-seed optima, the star.

    ``star`` is the mean over seeds of the usable per-seed optimum coordinates with its
    Student-t CI (None when no seed is usable; unbounded when one is); ``star_value`` is its mean in the
    hyperparameter's own units.
    """

    parametrization: str
    scale: int
    values: list[float]
    mean_error: list[float]
    min_error: list[float]
    max_error: list[float]
    diverged: list[int]
    seed_ids: list[int]
    seed_optima: list[Optimum]
    star: Estimate | None
    star_value: float | None

    @property
    def seeds(self) -> int:
        return len(self.seed_ids)

    @property
    def edge(self) -> int:
        """Seeds whose best point is at the grid's edge (shown, not used)."""
        return sum(o.at_edge for o in self.seed_optima)

    def as_dict(self) -> dict:
        return {
            "parametrization": self.parametrization,
            "scale": self.scale,
            "values": self.values,
            "mean_error": self.mean_error,
            "min_error": self.min_error,
            "max_error": self.max_error,
            "diverged": self.diverged,
            "seeds": self.seed_ids,
            "seed_optima": [
                {"value": o.value, "coordinate": o.coordinate, "at_edge": o.at_edge} for o in self.seed_optima
            ],
            "star": None if self.star is None else self.star.as_dict(),
            "star_value": self.star_value,
            "edge": self.edge,
        }


def summarize(records: list[dict], hyperparameter: str) -> list[CurveSummary]:
    """Group records into curves; fit each seed's optimum and the star per curve."""
    _, _, inverse = transform(hyperparameter)
    curves = []
    for parametrization, scale in sorted({(r["parametrization"], r["scale"]) for r in records}):
        rows = [r for r in records if r["parametrization"] == parametrization and r["scale"] == scale]
        values = sorted({r["value"] for r in rows})
        seeds = sorted({r["seed"] for r in rows})
        per_value = {v: [r for r in rows if r["value"] == v] for v in values}

        def err(r):
            return DIVERGED_METRIC if r["status"] == "diverged" else r["test_error"]

        optima = []
        for seed in seeds:
            mine = [r for r in rows if r["seed"] == seed]
            optima.append(
                fit_optimum(
                    [r["value"] for r in mine],
                    [r["test_error"] for r in mine],
                    [r["status"] for r in mine],
                    hyperparameter,
                )
            )
        usable = [o.coordinate for o in optima if o.usable]
        star = mean_ci(usable) if usable else None
        curves.append(
            CurveSummary(
                parametrization=parametrization,
                scale=scale,
                values=values,
                mean_error=[float(np.mean([err(r) for r in per_value[v]])) for v in values],
                min_error=[float(min(err(r) for r in per_value[v])) for v in values],
                max_error=[float(max(err(r) for r in per_value[v])) for v in values],
                diverged=[sum(r["status"] == "diverged" for r in per_value[v]) for v in values],
                seed_ids=seeds,
                seed_optima=optima,
                star=star,
                star_value=None if star is None else float(inverse(star.mean)),
            )
        )
    return curves


@dataclass
class Drift:
    """Drift of one parametrization's optimum: per-seed slopes of the coordinate against ln(scale).

    ``slope`` is in coordinate units (decades, for the log10 coordinates) per unit of
    ln(scale); ``decades`` = slope × ln(span[1] / span[0]), the move over the landscape's
    span. ``scales``: the scales at which at least one seed's optimum entered a fit;
    ``excluded``: (seed, scale) pairs whose optimum was at the grid's edge;
    ``diverged``: (seed, scale) pairs where every point diverged. ``resolved``: the CI
    excludes 0 and rests on at least two seeds.
    """

    parametrization: str
    coordinate: str
    axis: str
    span: tuple[int, int]
    scales: list[int]
    seeds: list[int]
    per_seed: list[float]
    slope: Estimate | None
    decades: Estimate | None
    excluded: list[tuple[int, int]] = field(default_factory=list)
    diverged: list[tuple[int, int]] = field(default_factory=list)
    resolved: bool = False

    def as_dict(self) -> dict:
        return {
            "parametrization": self.parametrization,
            "coordinate": self.coordinate,
            "axis": self.axis,
            "span": list(self.span),
            "scales": self.scales,
            "seeds": self.seeds,
            "per_seed": self.per_seed,
            "slope": None if self.slope is None else self.slope.as_dict(),
            "decades": None if self.decades is None else self.decades.as_dict(),
            "excluded": [list(p) for p in self.excluded],
            "diverged": [list(p) for p in self.diverged],
            "resolved": self.resolved,
            "text": describe_drift(self),
        }


@dataclass
class DriftDifference:
    """mean(SP slopes) − mean(muP slopes), same units as :class:`Drift`, with its Welch's t CI."""

    coordinate: str
    axis: str
    span: tuple[int, int]
    slope: Estimate
    decades: Estimate
    resolved: bool

    def as_dict(self) -> dict:
        return {
            "coordinate": self.coordinate,
            "axis": self.axis,
            "span": list(self.span),
            "slope": self.slope.as_dict(),
            "decades": self.decades.as_dict(),
            "resolved": self.resolved,
            "text": describe_difference(self),
        }


def _resolved(estimate: Estimate | None) -> bool:
    """A CI was measured (two or more seeds) and it excludes 0."""
    return estimate is not None and estimate.n >= 2 and estimate.resolved


def drift(curves: list[CurveSummary], hyperparameter: str, axis: str = "K") -> list[Drift]:
    """Per parametrization with at least two scales: the drift of the optimum (module docstring)."""
    out = []
    for parametrization in dict.fromkeys(c.parametrization for c in curves):
        mine = sorted((c for c in curves if c.parametrization == parametrization), key=lambda c: c.scale)
        if len(mine) < 2:
            continue
        span = (int(mine[0].scale), int(mine[-1].scale))
        points: dict[int, list[tuple[int, float]]] = {}
        excluded, diverged = [], []
        for curve in mine:
            for seed, optimum in zip(curve.seed_ids, curve.seed_optima):
                if optimum.usable:
                    points.setdefault(seed, []).append((curve.scale, optimum.coordinate))
                elif optimum.at_edge:
                    excluded.append((seed, curve.scale))
                else:
                    diverged.append((seed, curve.scale))
        seeds, per_seed, used = [], [], set()
        for seed in sorted(points):
            if len({s for s, _ in points[seed]}) < 2:
                continue
            scales, coords = zip(*points[seed])
            seeds.append(seed)
            per_seed.append(fit_slope(np.log(np.asarray(scales, float)), coords))
            used.update(scales)
        slope = mean_ci(per_seed) if per_seed else None
        out.append(
            Drift(
                parametrization=parametrization,
                coordinate=OPTIMUM_LABELS[hyperparameter],
                axis=axis,
                span=span,
                scales=sorted(used),
                seeds=seeds,
                per_seed=per_seed,
                slope=slope,
                decades=None if slope is None else slope.scaled(math.log(span[1] / span[0])),
                excluded=excluded,
                diverged=diverged,
                resolved=_resolved(slope),
            )
        )
    return out


def drift_difference(drifts: list[Drift], a: str = "standard", b: str = "mup") -> DriftDifference | None:
    """Drift of ``a`` minus drift of ``b`` (SP − muP by default); None unless both have per-seed slopes."""
    by_name = {d.parametrization: d for d in drifts}
    if a not in by_name or b not in by_name or not by_name[a].per_seed or not by_name[b].per_seed:
        return None
    first, second = by_name[a], by_name[b]
    slope = difference_ci(first.per_seed, second.per_seed)
    span = first.span
    return DriftDifference(
        first.coordinate, first.axis, span, slope, slope.scaled(math.log(span[1] / span[0])), _resolved(slope)
    )


def _ci(e: Estimate, digits: int = 2) -> str:
    """``+0.12 [+0.05, +0.19]``, or ``+0.12 [no interval: 1 seed]``."""
    return f"{e.mean:+.{digits}f} {e.interval(f'+.{digits}f')}"


def _verdict(resolved: bool, estimate: Estimate) -> str:
    if resolved:
        return "resolved (CI excludes 0)"
    return NOT_RESOLVED + (" (one seed: no interval)" if not estimate.bounded else "")


def describe_drift(d: Drift) -> str:
    """One line: drift per ln(scale) with CI, seeds, the same in decades over the span, the verdict."""
    head = f"{d.parametrization}: drift of {d.coordinate} per ln {d.axis}: "
    if d.slope is None:
        return head + f"undefined (no seed has a usable optimum at two or more {d.axis} values)"
    return (
        head + f"{_ci(d.slope)} ({d.slope.n} seed{'s' if d.slope.n != 1 else ''}) = {_ci(d.decades)} decades "
        f"over {d.axis} {d.span[0]}->{d.span[1]} -- {_verdict(d.resolved, d.slope)}"
    )


def describe_difference(d: DriftDifference) -> str:
    """One line: SP − muP drift difference with CI, in decades over the span, the verdict."""
    return (
        f"SP - muP drift of {d.coordinate} per ln {d.axis}: {_ci(d.slope)} = {_ci(d.decades)} decades "
        f"over {d.axis} {d.span[0]}->{d.span[1]} -- {_verdict(d.resolved, d.slope)}"
    )


def analyze(records: list[dict], hyperparameter: str, axis: str = "K"):
    """(curves, drifts, SP − muP difference or None) of a landscape's records."""
    curves = summarize(records, hyperparameter)
    drifts = drift(curves, hyperparameter, axis)
    return curves, drifts, drift_difference(drifts)
