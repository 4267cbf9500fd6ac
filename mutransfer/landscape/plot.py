"""The landscape figure: test error vs the hyperparameter, one line per scale (K or width), parametrizations side by side."""

from __future__ import annotations

import numpy as np

from mutransfer.landscape.analysis import CurveSummary, Drift, transform


def _x(values, hyperparameter: str):
    """Plot coordinate: the value itself (log axis), or 1 − β2 for beta2."""
    values = np.asarray(values, float)
    return 1.0 - values if hyperparameter == "beta2" else values


def plot_landscape(
    curves: list[CurveSummary], drifts: list[Drift], hyperparameter: str, path, *, title: str = "", axis: str = "K"
) -> None:
    """Save the figure: mean test error with the min-max seed band, optima starred, diverged points as red x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    params = list(dict.fromkeys(c.parametrization for c in curves))
    fig, axes = plt.subplots(1, len(params), figsize=(5.2 * len(params), 4.2), squeeze=False, sharey=True)
    scales = sorted({c.scale for c in curves})
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(scales)))
    color_of = dict(zip(scales, colors))
    label = {"lr": "learning rate", "batch_size": "batch size", "beta2": "1 - beta2"}[hyperparameter]
    for ax, parametrization in zip(axes[0], params):
        drift_row = next((d for d in drifts if d.parametrization == parametrization), None)
        for curve in sorted((c for c in curves if c.parametrization == parametrization), key=lambda c: c.scale):
            color = color_of[curve.scale]
            x = _x(curve.values, hyperparameter)
            ok = np.asarray(curve.diverged) < curve.seeds  # at least one seed did not diverge
            ax.plot(x[ok], np.asarray(curve.mean_error)[ok], "-o", ms=3, color=color, label=f"{axis}={curve.scale}")
            ax.fill_between(x[ok], np.asarray(curve.min_error)[ok], np.asarray(curve.max_error)[ok], color=color, alpha=0.2)
            trans = blended_transform_factory(ax.transData, ax.transAxes)
            for xi, n_div in zip(x, curve.diverged):
                if n_div:
                    ax.plot([xi], [0.96], "x", color="red", ms=7, transform=trans, clip_on=False)
            if curve.optimum is not None and ok.sum() >= 1:
                _, forward, _ = transform(hyperparameter)
                xs = np.asarray(forward(np.asarray(curve.values, float)))[ok]
                y_opt = float(np.exp(np.interp(float(forward(curve.optimum)), xs, np.log(np.asarray(curve.mean_error)[ok]))))
                ax.plot([_x([curve.optimum], hyperparameter)[0]], [y_opt], "*", ms=14, color=color, mec="black", mew=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        heading = parametrization
        if drift_row is not None and drift_row.mean is not None:
            heading += f": optimum drift {drift_row.mean:+.2f} ± {drift_row.std:.2f} in {drift_row.coordinate}"
            heading += f" ({axis} {drift_row.scale_from}->{drift_row.scale_to})"
        ax.set_title(heading, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("test relative L2 (mean over seeds; band: min-max)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], ls="", marker="*", ms=10, color="gray", mec="black"))
    labels.append("optimum")
    handles.append(plt.Line2D([], [], ls="", marker="x", color="red"))
    labels.append("diverged")
    axes[0][-1].legend(handles, labels, fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
