"""Coverage of a nominal 95 % interval over a few seeds: the old percentile bootstrap against the t intervals.

For n = 2, 3, 5 seeds, ``--reps`` replications of normal samples with a known mean;
the coverage is the share of replications whose interval contains the true mean
(true difference). Intervals:

- one set of seeds, mean N(1, 2²): the old percentile bootstrap (``scipy.stats.bootstrap``,
  ``method="percentile"``, what ``mean_ci`` computed before) against
  :func:`mutransfer._diagnostics.statistics.mean_ci` (Student-t);
- two independent sets, N(1, 1) minus N(0, 3²), n each: the old two-sample percentile
  bootstrap against :func:`mutransfer._diagnostics.statistics.difference_ci` (Welch's t).

The draws, seeds and replications are those of ``tests/diagnostics/test_statistics.py``, so the
table is the test's simulation.

    python benchmarks/interval_coverage.py
"""

from __future__ import annotations

import argparse

import numpy as np

from mutransfer._diagnostics.statistics import LEVEL, difference_ci, mean_ci

SIZES = (2, 3, 5)
REPS = 2000
MEAN, SIGMA = 1.0, 2.0  # one set of seeds
A_MEAN, A_SIGMA, B_MEAN, B_SIGMA = 1.0, 1.0, 0.0, 3.0  # two sets, unequal variances


def one_sample_draws(n: int, reps: int, seed: int = 0) -> np.ndarray:
    """(reps, n) normal samples of mean ``MEAN``."""
    return np.random.default_rng([seed, n]).normal(MEAN, SIGMA, (reps, n))


def two_sample_draws(n: int, reps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two independent (reps, n) normal samples whose means differ by ``A_MEAN - B_MEAN``."""
    rng = np.random.default_rng([seed, n, 2])
    return rng.normal(A_MEAN, A_SIGMA, (reps, n)), rng.normal(B_MEAN, B_SIGMA, (reps, n))


def covered(lo, hi, truth: float) -> float:
    """Share of the intervals [lo, hi] that contain ``truth``."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return float(np.mean((lo <= truth) & (truth <= hi)))


def t_coverage(n: int, reps: int = REPS, seed: int = 0) -> float:
    """Coverage of :func:`mean_ci` (one call per replication)."""
    estimates = [mean_ci(row) for row in one_sample_draws(n, reps, seed)]
    return covered([e.lo for e in estimates], [e.hi for e in estimates], MEAN)


def welch_coverage(n: int, reps: int = REPS, seed: int = 0) -> float:
    """Coverage of :func:`difference_ci` (one call per replication)."""
    a, b = two_sample_draws(n, reps, seed)
    estimates = [difference_ci(x, y) for x, y in zip(a, b)]
    return covered([e.lo for e in estimates], [e.hi for e in estimates], A_MEAN - B_MEAN)


def _mean_difference(x, y, axis=-1):
    return x.mean(axis) - y.mean(axis)


def bootstrap_coverage(n: int, reps: int = REPS, seed: int = 0, resamples: int = 1000) -> float:
    """Coverage of the old percentile bootstrap of the mean (all replications in one vectorised call)."""
    from scipy.stats import bootstrap

    ci = bootstrap(
        (one_sample_draws(n, reps, seed),),
        np.mean,
        axis=-1,
        vectorized=True,
        method="percentile",
        confidence_level=LEVEL,
        n_resamples=resamples,
        batch=100,
        random_state=np.random.default_rng(seed),
    ).confidence_interval
    return covered(ci.low, ci.high, MEAN)


def bootstrap_difference_coverage(n: int, reps: int = REPS, seed: int = 0, resamples: int = 1000) -> float:
    """Coverage of the old two-sample percentile bootstrap of mean(a) − mean(b) (vectorised)."""
    from scipy.stats import bootstrap

    ci = bootstrap(
        two_sample_draws(n, reps, seed),
        _mean_difference,
        axis=-1,
        vectorized=True,
        method="percentile",
        confidence_level=LEVEL,
        n_resamples=resamples,
        batch=100,
        random_state=np.random.default_rng(seed),
    ).confidence_interval
    return covered(ci.low, ci.high, A_MEAN - B_MEAN)


def coverage_table(reps: int = REPS, seed: int = 0) -> list[dict]:
    """One row per n: the four coverages."""
    return [
        {
            "n": n,
            "bootstrap_mean": bootstrap_coverage(n, reps, seed),
            "t_mean": t_coverage(n, reps, seed),
            "bootstrap_difference": bootstrap_difference_coverage(n, reps, seed),
            "welch_difference": welch_coverage(n, reps, seed),
        }
        for n in SIZES
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=REPS, help=f"replications per n (default {REPS})")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"coverage of a nominal {LEVEL:.0%} interval, {args.reps} normal replications per n (seed {args.seed})")
    print(
        f"{'n':>3}  {'mean: bootstrap':>15}  {'mean: t':>8}  {'difference: bootstrap':>21}  {'difference: Welch':>17}"
    )
    for row in coverage_table(args.reps, args.seed):
        print(
            f"{row['n']:>3}  {row['bootstrap_mean']:>15.3f}  {row['t_mean']:>8.3f}  "
            f"{row['bootstrap_difference']:>21.3f}  {row['welch_difference']:>17.3f}"
        )


if __name__ == "__main__":
    main()
