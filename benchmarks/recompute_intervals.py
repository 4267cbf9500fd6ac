"""Recompute the intervals of docs/results.md with the t intervals that replaced the percentile bootstrap.

Two sources, printed side by side with what docs/results.md showed (old):

1. **Stored per-seed values.** The K-landscape JSON files in ``docs/results/`` keep every
   training (``records``); the curves, drifts and SP − μP difference are recomputed from
   them by the landscape's own analysis (:func:`mutransfer._landscape.analysis.analyze`, now
   Student-t over seeds and Welch's t for the difference), and the per-seed slopes are
   checked against the stored ones (the estimator did not change, only the interval).
2. **Per-seed values recovered from the printed intervals** (``sweep --verify`` over 2 seeds
   and the coordinate checks over 3 seeds, whose runs are not stored). For n = 2 and n = 3
   the percentile bootstrap's bounds are exactly the smallest and the largest seed (a
   resample of identical seeds has probability 1/n^n, 1/4 and 1/27, above the 2.5 % tail),
   so the seeds are [lo, hi] (n = 2) and [lo, 3·mean − lo − hi, hi] (n = 3). They carry the
   rounding of the printed numbers, so the recomputed bounds are good to about a unit in
   the last printed digit (times the t factor: 9 for n = 2, 2.5 for n = 3).

    python benchmarks/recompute_intervals.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from mutransfer._diagnostics.coord_check import classify_slopes
from mutransfer._diagnostics.statistics import Estimate, mean_ci
from mutransfer._landscape.analysis import analyze, transform

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
LANDSCAPES = (
    "burgers_k_landscape_5seeds.json",
    "darcy_k_landscape_5seeds.json",
    "burgers_rough_k_landscape_5seeds.json",
    "burgers_rough_k_landscape_3seeds_narrow_grid.json",
)
HALF_STEP = 0.125  # --verify: half of its 0.25-decade grid step

#: ``sweep --verify`` rows of docs/results.md as printed: (what, mean, lo, hi), each over 2 seeds
VERIFY_ROWS = (
    ("quick study seed 0: distance, decades", -0.07, -0.08, -0.06),
    ("quick study seed 1: distance, decades", 0.21, 0.09, 0.33),
    ("quick study seed 0: regret", 0.00, 0.00, 0.00),
    ("quick study seed 1: regret", 0.22, 0.00, 0.44),
    ("quick study seed 2: regret", 0.66, 0.60, 0.72),
    ("Darcy seed 0: distance, decades", 0.13, 0.00, 0.26),
    ("Darcy seed 0: regret", 0.017, 0.000, 0.033),
)
#: the distances of the three quick-study verifications (seed 2: one seed's optimum inside the grid)
VERIFY_STUDIES = (-0.07, 0.21, 0.27)

#: coordinate-check rows of docs/results.md as printed: (data, curve, parametrization, mean, lo, hi), 3 seeds
COORD_ROWS = (
    ("smooth", "output", "SP", 0.000, -0.000, 0.000),
    ("smooth", "output", "muP", -0.012, -0.015, -0.010),
    ("smooth", "fourier_1", "SP", -0.000, -0.002, 0.001),
    ("smooth", "fourier_1", "muP", -0.077, -0.102, -0.050),
    ("smooth", "fourier_2", "SP", 0.000, -0.000, 0.000),
    ("smooth", "fourier_2", "muP", -0.136, -0.142, -0.133),
    ("smooth", "fourier_3", "SP", 0.000, 0.000, 0.000),
    ("smooth", "fourier_3", "muP", -0.091, -0.116, -0.068),
    ("smooth", "fourier_4", "SP", -0.000, -0.000, 0.000),
    ("smooth", "fourier_4", "muP", -0.066, -0.073, -0.060),
    ("rough", "output", "SP", -0.009, -0.016, 0.001),
    ("rough", "output", "muP", 0.005, -0.014, 0.021),
    ("rough", "fourier_1", "SP", 0.144, 0.141, 0.149),
    ("rough", "fourier_1", "muP", 0.014, -0.028, 0.035),
    ("rough", "fourier_2", "SP", 0.058, 0.048, 0.065),
    ("rough", "fourier_2", "muP", -0.068, -0.109, -0.042),
    ("rough", "fourier_3", "SP", 0.017, 0.007, 0.033),
    ("rough", "fourier_3", "muP", -0.093, -0.136, -0.051),
    ("rough", "fourier_4", "SP", 0.021, 0.004, 0.057),
    ("rough", "fourier_4", "muP", -0.077, -0.092, -0.067),
    ("rough", "spectral_1", "SP", 0.216, 0.185, 0.235),
    ("rough", "spectral_1", "muP", -0.016, -0.041, -0.000),
)
TOLERANCE = 0.1  # coord-check's default


def seeds_from_bootstrap(mean: float, lo: float, hi: float, n: int) -> list[float]:
    """The seeds behind a percentile-bootstrap interval over n = 2 or 3 seeds (its bounds are their min and max)."""
    if n == 2:
        return [lo, hi]
    if n == 3:
        return [lo, float(np.clip(3 * mean - lo - hi, lo, hi)), hi]
    raise ValueError("only n = 2 and n = 3 are recoverable from the bounds")


def verify_verdict(e: Estimate) -> str:
    """``sweep --verify``'s rule (:func:`mutransfer._sweep.verify._verdict`) for a distance in decades."""
    if not e.bounded:
        return "one seed: no CI"
    if -HALF_STEP <= e.lo and e.hi <= HALF_STEP:
        return "held within half a grid step"
    if not e.covers_zero:
        return f"optimum {'above' if e.mean > 0 else 'below'} the transferred lr"
    return "not resolved"


def _ci(mean: float, ci, digits: int = 2) -> str:
    lo, hi = ci
    if lo is None or hi is None:
        return f"{mean:+.{digits}f} [no CI]"
    return f"{mean:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _star(star: dict | None, inverse) -> str:
    """The star in units of 1e-3 of the hyperparameter with its CI, as the docs' tables show it."""
    if star is None:
        return "none"
    value = inverse(star["mean"]) * 1e3
    if None in star["ci"]:
        return f"{value:.2f}e-3 [no CI] (n={star['n']})"
    lo, hi = sorted(inverse(t) * 1e3 for t in star["ci"])
    return f"{value:.2f}e-3 [{lo:.2f}, {hi:.2f}] (n={star['n']})"


def landscape_lines(path: Path) -> list[str]:
    """Old (stored) and new intervals of one stored landscape: the star per curve, the drifts, SP − μP."""
    stored = json.loads(path.read_text())
    hyperparameter, axis = stored["hyperparameter"], stored.get("axis", "K")
    curves, drifts, difference = analyze(stored["records"], hyperparameter, axis)
    inverse = transform(hyperparameter)[2]
    lines = [f"## {path.name} ({stored['seeds']} seeds)", "star per curve, 1e-3: old bootstrap -> new t"]
    for old, new in zip(stored["curves"], curves):
        lines.append(
            f"  {new.parametrization:<9} {axis}={new.scale:<3} {_star(old['star'], inverse):<32} -> "
            f"{_star(new.as_dict()['star'], inverse)}"
        )
    lines.append(
        f"drift of log10(lr*) per ln {axis}; over the span in decades: old bootstrap -> new t (Welch for SP - muP)"
    )
    for old, new in zip(stored["drift"], drifts):
        if not np.allclose(old["per_seed"], new.per_seed):
            raise RuntimeError(f"{path.name}: the per-seed slopes of {new.parametrization} differ from the stored ones")
        lines.append(
            f"  {new.parametrization:<9} per ln {axis} {_ci(old['slope']['mean'], old['slope']['ci'])} -> "
            f"{_ci(new.slope.mean, new.slope.ci)}; decades {_ci(old['decades']['mean'], old['decades']['ci'])}"
            f" -> {_ci(new.decades.mean, new.decades.ci)} ({len(new.per_seed)} seeds; "
            f"{'resolved' if new.resolved else 'not resolved'})"
        )
    if difference is not None:
        old = stored["drift_difference"]
        lines.append(
            f"  SP - muP  per ln {axis} {_ci(old['slope']['mean'], old['slope']['ci'])} -> "
            f"{_ci(difference.slope.mean, difference.slope.ci)}; decades "
            f"{_ci(old['decades']['mean'], old['decades']['ci'])} -> "
            f"{_ci(difference.decades.mean, difference.decades.ci)} "
            f"({'resolved' if difference.resolved else 'not resolved'})"
        )
    return lines


def verify_lines() -> list[str]:
    """The ``sweep --verify`` intervals over 2 seeds, recomputed from the seeds their bounds are."""
    lines = ["## sweep --verify, 2 seeds each (seeds recovered from the printed bootstrap bounds)"]
    for what, mean, lo, hi in VERIFY_ROWS:
        e = mean_ci(seeds_from_bootstrap(mean, lo, hi, 2))
        verdict = f"; verdict: {verify_verdict(e)}" if "distance" in what else ""
        lines.append(f"  {what:<40} {_ci(mean, (lo, hi), 3)} -> {_ci(e.mean, e.ci, 3)}{verdict}")
    e = mean_ci(VERIFY_STUDIES)
    lines.append(
        f"  mean over the 3 quick-study verifications: {VERIFY_STUDIES} -> {_ci(e.mean, e.ci)} "
        f"(std {np.std(VERIFY_STUDIES, ddof=1):.2f})"
    )
    return lines


def coord_lines() -> list[str]:
    """The coordinate checks' slopes over 3 seeds, recomputed from the seeds their bounds are, with the verdict."""
    lines = [
        f"## coordinate checks, 3 seeds (seeds recovered from the printed bootstrap bounds), tolerance {TOLERANCE}"
    ]
    for data, curve, parametrization, mean, lo, hi in COORD_ROWS:
        verdict, e = classify_slopes(seeds_from_bootstrap(mean, lo, hi, 3), TOLERANCE)
        lines.append(
            f"  {data:<7} {curve:<11} {parametrization:<4} {_ci(mean, (lo, hi), 3)} -> {_ci(e.mean, e.ci, 3)} {verdict}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()
    for name in LANDSCAPES:
        print("\n".join(landscape_lines(RESULTS / name)), end="\n\n")
    print("\n".join(verify_lines()), end="\n\n")
    print("\n".join(coord_lines()))


if __name__ == "__main__":
    main()
