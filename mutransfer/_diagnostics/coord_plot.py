"""Plot of a coordinate check (:mod:`mutransfer._diagnostics.coord_check`).

Columns: parametrizations. Rows: the gated update sizes (``output`` and every
``fourier_ℓ``), the spectral part of each layer's update (``spectral_ℓ``), and the
init-only ``probe_arithmetic_ℓ``. One line per curve (mean over seeds per K, log-log),
error bars spanning the seeds' min..max; the legend gives verdict and slope [CI].
"""

from __future__ import annotations

import math

ROWS = (
    (("output", "fourier"), "gated: RMS change after the steps"),
    (("spectral",), "spectral part of the change (reported)"),
    (("probe_arithmetic",), "probe at init: b(K) arithmetic (never gated)"),
)


def plot_coord_check(result, path) -> None:
    """Save the grid of log-log plots of ``result`` (a CoordCheckResult) to ``path`` (PNG)."""
    import matplotlib  # noqa: PLC0415 -- deferred: matplotlib, only when a figure is drawn (Agg backend chosen first)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 -- deferred: matplotlib, only when a figure is drawn (Agg backend chosen first)

    params = result.parametrizations()
    fig, axes = plt.subplots(len(ROWS), len(params), figsize=(4.6 * len(params), 3.3 * len(ROWS)), squeeze=False)
    for col, parametrization in enumerate(params):
        for row, (kinds, title) in enumerate(ROWS):
            ax = axes[row][col]
            curves = [c for c in result.curves if c.parametrization == parametrization and c.kind in kinds]
            shown = [c for c in curves if all(v > 0 for seed in c.values_per_seed for v in seed)]
            for curve in shown:
                means = curve.values
                lows = [m - min(col_) for m, col_ in zip(means, zip(*curve.values_per_seed))]
                highs = [max(col_) - m for m, col_ in zip(means, zip(*curve.values_per_seed))]
                label = curve.describe().replace(f"{curve.name} ", f"{curve.name}: ", 1)
                ax.errorbar(
                    curve.modes,
                    means,
                    yerr=[lows, highs],
                    fmt="-" if curve.verdict == "flat" else "--",
                    marker="o",
                    ms=3,
                    capsize=2,
                    label=label,
                )
            missing = [c.name for c in curves if c not in shown]
            if missing:
                ax.text(
                    0.02,
                    0.02,
                    "no-signal (zero change): " + ", ".join(missing),
                    transform=ax.transAxes,
                    fontsize=6,
                    color="red",
                )
            heading = f"{parametrization}: {title}"
            if row == 0:
                heading += f"\n{parametrization} verdict: {result.verdict(parametrization).upper()}"
            ax.set_title(heading, fontsize=8)
            if shown:
                _fixed_axes(ax, shown)
            ax.set_xlabel("K (modes)")
            ax.set_ylabel("RMS")
            if shown:
                ax.legend(fontsize=5)
    fig.suptitle(
        f"coordinate check: {result.steps} Adam steps at lr {result.lr:g}, {result.seeds} seeds; "
        f"flat = 95% CI of the log-log slope within ±{result.tolerance}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _fixed_axes(ax, curves) -> None:
    """K ticks as plain numbers; a y-window spanning at least 10x so flat curves look flat."""
    from matplotlib.ticker import NullLocator  # noqa: PLC0415 -- deferred: matplotlib, only when a figure is drawn

    modes = curves[0].modes
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(modes, [str(k) for k in modes])
    ax.xaxis.set_minor_locator(NullLocator())
    values = [v for c in curves for seed in c.values_per_seed for v in seed]
    lo, hi = min(values), max(values)
    centre = math.sqrt(lo * hi)
    ax.set_ylim(min(lo / 1.2, centre / math.sqrt(10)), max(hi * 1.2, centre * math.sqrt(10)))
