"""Small statistics shared by the coordinate check, the landscape and ``sweep --verify``.

- :func:`fit_slope`: least-squares slope of y against x (one seed's trend).
- :func:`mean_ci`: mean over seeds with a Student-t confidence interval,
  mean ± t_{(1+level)/2, n−1} · s / √n (s the sample standard deviation over the seeds).
- :func:`difference_ci`: mean(a) − mean(b) for two independent seed sets with Welch's
  t interval (each side's own variance; Welch–Satterthwaite degrees of freedom).

Why t and not a bootstrap: the samples are a handful of seeds. A percentile bootstrap
over n = 2 seeds returns the two values themselves, over n = 3 their min and max, and a
nominal 95 % interval then covers the true mean about 50 % (n = 2), 75 % (n = 3) and
84 % (n = 5) of the time for normal data. The t interval has its nominal coverage at
every n ≥ 2 for normal data (``python benchmarks/interval_coverage.py`` simulates both;
``tests/diagnostics/test_statistics.py`` checks it).

**One sample has no interval.** With one finite sample (on either side of a difference)
no spread is measured: the estimate has ``lo = -inf``, ``hi = +inf`` and ``method``
``"none"``, so :attr:`Estimate.covers_zero` is True, :attr:`Estimate.resolved` False and
every verdict built on it reads "not resolved"; :meth:`Estimate.as_dict` writes the
missing bounds as ``null`` (valid JSON). Zero spread with n ≥ 2 gives a zero-width
interval, which is what the t interval says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
#: ``Estimate.method`` values
STUDENT_T, WELCH_T, NO_INTERVAL = "t", "welch-t", "none"


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
    """A mean over ``n`` seeds with its confidence interval ``[lo, hi]`` at ``level``.

    ``method``: ``"t"`` (Student-t over seeds), ``"welch-t"`` (a difference of two seed
    sets) or ``"none"``: one sample, no interval (``lo``/``hi`` are ∓inf).
    """

    mean: float
    lo: float
    hi: float
    n: int
    level: float = LEVEL
    method: str = STUDENT_T

    @property
    def bounded(self) -> bool:
        """An interval was measured (both bounds finite)."""
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def covers_zero(self) -> bool:
        """0 lies in the interval; always True without an interval."""
        return self.lo <= 0.0 <= self.hi

    @property
    def resolved(self) -> bool:
        """An interval was measured and it excludes 0."""
        return self.bounded and not self.covers_zero

    @property
    def ci(self) -> list[float | None]:
        """``[lo, hi]`` with a missing (infinite) bound as None, as JSON writes it."""
        return [_finite_or_none(self.lo), _finite_or_none(self.hi)]

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in other units (``factor`` > 0: the interval scales with it)."""
        if not factor > 0:
            raise ValueError("the factor must be positive")
        return Estimate(self.mean * factor, self.lo * factor, self.hi * factor, self.n, self.level, self.method)

    def interval(self, spec: str = "+.3f") -> str:
        """``[lo, hi]`` formatted with ``spec``, or ``[no interval: 1 seed]``."""
        if not self.bounded:
            return f"[no interval: {self.n} seed{'s' if self.n != 1 else ''}]"
        return f"[{self.lo:{spec}}, {self.hi:{spec}}]"

    def as_dict(self) -> dict:
        return {"mean": self.mean, "ci": self.ci, "n": self.n, "level": self.level, "method": self.method}

    def __str__(self) -> str:
        return f"{self.mean:+.3f} {self.interval()} (n={self.n})"


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def finite_samples(samples) -> np.ndarray:
    """The finite entries of ``samples`` (None, NaN and ±inf dropped) as a float array."""
    return np.asarray([s for s in samples if s is not None and np.isfinite(s)], float)


def t_quantile(level: float, df: float) -> float:
    """The two-sided Student-t critical value: the ``(1 + level) / 2`` quantile with ``df`` degrees of freedom."""
    from scipy.stats import t  # noqa: PLC0415 -- deferred: scipy.stats (~1 s), only when an interval is asked for

    return float(t.ppf(0.5 + level / 2.0, df))


def welch_df(var_a: float, n_a: int, var_b: float, n_b: int) -> float:
    """Welch–Satterthwaite degrees of freedom of mean(a) − mean(b) (sample variances, sizes ≥ 2)."""
    sa, sb = var_a / n_a, var_b / n_b
    if sa + sb == 0:
        return float(n_a + n_b - 2)  # no spread on either side: the interval has zero width whatever df
    return float((sa + sb) ** 2 / (sa**2 / (n_a - 1) + sb**2 / (n_b - 1)))


def mean_ci(samples, level: float = LEVEL) -> Estimate:
    """Mean of ``samples`` (one per seed) with its Student-t interval; no interval with one finite sample."""
    values = finite_samples(samples)
    if values.size == 0:
        raise ValueError("no finite samples to average")
    mean = float(values.mean())
    n = int(values.size)
    if n == 1:
        return Estimate(mean, -math.inf, math.inf, n, level, NO_INTERVAL)
    half = t_quantile(level, n - 1) * float(values.std(ddof=1)) / math.sqrt(n)
    return Estimate(mean, mean - half, mean + half, n, level, STUDENT_T)


def difference_ci(a, b, level: float = LEVEL) -> Estimate:
    """mean(a) − mean(b) for two independent sets of per-seed samples, with Welch's t interval.

    ``n`` is the smaller side's size. A side with one finite sample has no measured
    variance: then there is no interval (method ``"none"``).
    """
    a, b = finite_samples(a), finite_samples(b)
    if a.size == 0 or b.size == 0:
        raise ValueError("both sides need at least one finite sample")
    mean = float(a.mean() - b.mean())
    n = int(min(a.size, b.size))
    if n < 2:
        return Estimate(mean, -math.inf, math.inf, n, level, NO_INTERVAL)
    var_a, var_b = float(a.var(ddof=1)), float(b.var(ddof=1))
    se = math.sqrt(var_a / a.size + var_b / b.size)
    half = t_quantile(level, welch_df(var_a, a.size, var_b, b.size)) * se
    return Estimate(mean, mean - half, mean + half, n, level, WELCH_T)


def contrast_ci(a, b, c, d, level: float = LEVEL) -> Estimate:
    """(mean(a) − mean(b)) − (mean(c) − mean(d)) for four independent sets of per-seed samples, with a Welch–
    Satterthwaite t interval (the two-set rule of :func:`difference_ci` carried to four): how much one effect
    (a − b, e.g. a transfer error under one rule) differs from another (c − d). ``n`` is the smallest set's size;
    a set with fewer than two finite samples leaves no interval."""
    groups = [finite_samples(g) for g in (a, b, c, d)]
    if any(g.size == 0 for g in groups):
        raise ValueError("every set needs at least one finite sample")
    means = [float(g.mean()) for g in groups]
    mean = (means[0] - means[1]) - (means[2] - means[3])
    n = int(min(g.size for g in groups))
    if n < 2:
        return Estimate(mean, -math.inf, math.inf, n, level, NO_INTERVAL)
    v = [float(g.var(ddof=1)) / g.size for g in groups]
    total = sum(v)
    if total == 0:
        return Estimate(mean, mean, mean, n, level, WELCH_T)
    df = total**2 / sum(vi**2 / (g.size - 1) for vi, g in zip(v, groups, strict=True))
    half = t_quantile(level, df) * math.sqrt(total)
    return Estimate(mean, mean - half, mean + half, n, level, WELCH_T)
