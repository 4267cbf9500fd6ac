"""Small statistics shared by the coordinate check, the landscape and ``sweep --verify``.

- :func:`fit_slope`: least-squares slope of y against x (one seed's trend).
- :func:`mean_ci`: mean over seeds with a percentile-bootstrap confidence interval
  (``scipy.stats.bootstrap``). With one sample the CI is that sample (no spread
  can be measured: callers report the seed count beside it).
- :func:`ci_covers_zero`: the words "not resolved at this scale" hang on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: bootstrap resamples; fixed seed so a report is reproducible
RESAMPLES = 4000
LEVEL = 0.95


def fit_slope(x, y) -> float:
    """Least-squares slope of ``y`` against ``x`` (both 1-D, at least two distinct x)."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError("a slope needs at least two distinct x values")
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc * xc).sum())


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` seeds with its bootstrap confidence interval ``[lo, hi]`` at ``level``."""

    mean: float
    lo: float
    hi: float
    n: int
    level: float = LEVEL

    @property
    def covers_zero(self) -> bool:
        return self.lo <= 0.0 <= self.hi

    def as_dict(self) -> dict:
        return {"mean": self.mean, "ci": [self.lo, self.hi], "n": self.n, "level": self.level}

    def __str__(self) -> str:
        return f"{self.mean:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}] (n={self.n})"


def mean_ci(samples, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> Estimate:
    """Mean of ``samples`` (one per seed) with a percentile-bootstrap CI over them."""
    values = np.asarray([s for s in samples if s is not None and np.isfinite(s)], float)
    if values.size == 0:
        raise ValueError("no finite samples to average")
    mean = float(values.mean())
    if values.size == 1 or np.ptp(values) == 0:
        return Estimate(mean, mean, mean, int(values.size), level)
    from scipy.stats import bootstrap

    result = bootstrap((values,), np.mean, confidence_level=level, n_resamples=resamples, method="percentile",
                       random_state=np.random.default_rng(seed))
    ci = result.confidence_interval
    return Estimate(mean, float(ci.low), float(ci.high), int(values.size), level)


def difference_ci(a, b, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> Estimate:
    """mean(a) − mean(b) for two independent sets of per-seed samples, with a bootstrap CI (each resampled apart)."""
    a = np.asarray([s for s in a if s is not None and np.isfinite(s)], float)
    b = np.asarray([s for s in b if s is not None and np.isfinite(s)], float)
    if a.size == 0 or b.size == 0:
        raise ValueError("both sides need at least one finite sample")
    mean = float(a.mean() - b.mean())
    n = int(min(a.size, b.size))
    if a.size < 2 or b.size < 2:  # one side has no measurable spread: shift the other side's CI
        if a.size < 2:
            other = mean_ci(b, level, resamples, seed)
            return Estimate(mean, float(a.mean() - other.hi), float(a.mean() - other.lo), n, level)
        other = mean_ci(a, level, resamples, seed)
        return Estimate(mean, float(other.lo - b.mean()), float(other.hi - b.mean()), n, level)
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return Estimate(mean, mean, mean, n, level)
    from scipy.stats import bootstrap

    result = bootstrap((a, b), lambda x, y, axis=-1: x.mean(axis) - y.mean(axis), confidence_level=level,
                       n_resamples=resamples, method="percentile", vectorized=True,
                       random_state=np.random.default_rng(seed))
    ci = result.confidence_interval
    return Estimate(mean, float(ci.low), float(ci.high), n, level)
