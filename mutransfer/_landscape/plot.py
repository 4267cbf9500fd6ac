"""The landscape figure: test error vs the hyperparameter, one line per scale (K or width), parametrizations side by side."""

from __future__ import annotations

import numpy as np

from mutransfer._landscape.analysis import CurveSummary, Drift, DriftDifference, transform


def _x(values, hyperparameter: str):
    """Plot coordinate: the value itself (log axis), or 1 − β2 for beta2."""
    values = np.asarray(values, float)
    return 1.0 - values if hyperparameter == "beta2" else values


def _on_curve(coordinate: float, xs, log_mean) -> float:
    """The seed-mean error at ``coordinate``, interpolated in (coordinate, ln error)."""
    return float(np.exp(np.interp(coordinate, xs, log_mean)))


def plot_landscape(
    curves: list[CurveSummary],
    drifts: list[Drift],
    hyperparameter: str,
    path,
    *,
    title: str = "",
    axis: str = "K",
    difference: DriftDifference | None = None,
) -> None:
    """Save the figure: mean test error with the min-max seed band, diverged points as red x, and the optimum.

    The star at each scale is the landscape's one estimator (mean of the usable per-seed
    optima, horizontal bar: its CI over seeds), drawn on the seed-mean curve; seeds whose
    optimum sits at the grid's edge are hollow circles at that grid point (not used).
    """
    import matplotlib  # noqa: PLC0415 -- deferred: matplotlib, only when a figure is drawn (Agg backend chosen first)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 -- deferred: matplotlib, only when a figure is drawn (Agg backend chosen first)
    from matplotlib.transforms import blended_transform_factory  # noqa: PLC0415 -- deferred: matplotlib, only when a figure is drawn (Agg backend chosen first)

    params = list(dict.fromkeys(c.parametrization for c in curves))
    fig, axes = plt.subplots(1, len(params), figsize=(5.2 * len(params), 4.2), squeeze=False, sharey=True)
    scales = sorted({c.scale for c in curves})
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(scales)))
    color_of = dict(zip(scales, colors))
    _, forward, inverse = transform(hyperparameter)
    label = {"lr": "learning rate", "batch_size": "batch size", "beta2": "1 - beta2"}[hyperparameter]
    for ax, parametrization in zip(axes[0], params):
        drift_row = next((d for d in drifts if d.parametrization == parametrization), None)
        for curve in sorted((c for c in curves if c.parametrization == parametrization), key=lambda c: c.scale):
            color = color_of[curve.scale]
            x = _x(curve.values, hyperparameter)
            ok = np.asarray(curve.diverged) < curve.seeds  # at least one seed did not diverge
            ax.plot(x[ok], np.asarray(curve.mean_error)[ok], "-o", ms=3, color=color, label=f"{axis}={curve.scale}")
            ax.fill_between(
                x[ok], np.asarray(curve.min_error)[ok], np.asarray(curve.max_error)[ok], color=color, alpha=0.2
            )
            trans = blended_transform_factory(ax.transData, ax.transAxes)
            for xi, n_div in zip(x, curve.diverged):
                if n_div:
                    ax.plot([xi], [0.96], "x", color="red", ms=7, transform=trans, clip_on=False)
            xs = np.asarray(forward(np.asarray(curve.values, float)))[ok]
            log_mean = np.log(np.asarray(curve.mean_error)[ok])
            if curve.star is not None and ok.any():
                x_star = _x([inverse(curve.star.mean)], hyperparameter)[0]
                y_star = _on_curve(curve.star.mean, xs, log_mean)
                if curve.star.bounded:  # one usable seed: a star without a bar
                    bar = sorted(_x([inverse(curve.star.lo), inverse(curve.star.hi)], hyperparameter))
                    ax.plot(bar, [y_star, y_star], "-", color=color, lw=1.5, alpha=0.9)
                ax.plot([x_star], [y_star], "*", ms=14, color=color, mec="black", mew=0.6)
            for optimum in curve.seed_optima:
                if optimum.at_edge and ok.any():
                    ax.plot(
                        _x([optimum.value], hyperparameter),
                        [_on_curve(optimum.coordinate, xs, log_mean)],
                        "o",
                        ms=9,
                        mfc="none",
                        mec=color,
                        mew=1.2,
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        heading = parametrization
        if drift_row is not None and drift_row.slope is not None:
            slope = drift_row.slope
            heading += (
                f": drift of {drift_row.coordinate} per ln {axis} {slope.mean:+.2f} {slope.interval('+.2f')} "
                f"({slope.n} seed{'s' if slope.n != 1 else ''})\n= {drift_row.decades.mean:+.2f} decades over {axis} "
                f"{drift_row.span[0]}->{drift_row.span[1]}" + ("" if drift_row.resolved else ", not resolved")
            )
        ax.set_title(heading, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("test relative L2 (mean over seeds; band: min-max)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], ls="", marker="*", ms=10, color="gray", mec="black"))
    labels.append("optimum (mean of per-seed fits, bar: CI)")
    handles.append(plt.Line2D([], [], ls="", marker="o", mfc="none", mec="gray"))
    labels.append("seed optimum at grid edge (not used)")
    handles.append(plt.Line2D([], [], ls="", marker="x", color="red"))
    labels.append("diverged")
    axes[0][-1].legend(handles, labels, fontsize=7, loc="best")
    if difference is not None:
        title = (title + "\n" if title else "") + (
            f"SP - muP drift {difference.slope.mean:+.2f} {difference.slope.interval('+.2f')} per ln {axis}"
            + ("" if difference.resolved else ", not resolved at this scale")
        )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
