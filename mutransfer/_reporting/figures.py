"""The report's figures as PNG bytes: Optuna's matplotlib plots of the search, pandas plots of the target.

The proxy trials are put into an in-memory Optuna study as Ray's OptunaSearch told its sampler:
a trial that reported an error is COMPLETE with its last reported validation error (a trial ASHA stopped
included: its error is at fewer epochs), one that never reported is FAIL; its evaluations are the
intermediate values (step = epoch). The plots are Optuna's (``optuna.visualization.matplotlib``);
this module only marks where ASHA stopped a trial, sets log axes and labels.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402
import pandas as pd  # noqa: E402

from mutransfer._reporting.study_files import StudyFiles  # noqa: E402
from mutransfer._study.distribution import Distribution  # noqa: E402

STYLE = "ggplot"
SIZE = (7.0, 3.8)  # inches
DPI = 80  # PNGs of ~20-40 kB each


@dataclass
class Figure:
    """One figure of the page: its PNG, or why there is none (a sentence for the reader)."""

    title: str
    png: bytes | None = None
    missing: str | None = None
    curves: int = 0  # the learning-curve figure: how many trials it draws


def distributions(search_space: dict) -> dict:
    """Optuna distributions from a study's ``search_space`` mapping (loguniform | uniform | int | choice)."""
    return {name: Distribution.from_dict(d).to_optuna() for name, d in search_space.items()}


def optuna_study(files: StudyFiles) -> tuple[optuna.Study, list[str]]:
    """The proxy trials as an in-memory Optuna study (trial number = table number - 1), and notes on trials left out."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", study_name=files.name)
    dists, notes = distributions(files.search_space), []
    for t in sorted(files.trials, key=lambda t: t.index):
        value = t.val_error if t.val_error is not None and math.isfinite(t.val_error) else None
        history = files.histories.get(t.trial_id, [])
        state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
        try:
            study.add_trial(
                optuna.trial.create_trial(
                    state=state,
                    value=value,
                    params={k: t.config[k] for k in dists},
                    distributions=dists,
                    intermediate_values={r.epoch: r.test_error for r in history if math.isfinite(r.test_error)},
                    user_attrs={"number": t.index, "status": t.status},
                )
            )
        except (KeyError, ValueError) as exc:
            notes.append(
                f"trial {t.index} ({t.trial_id}) is left out of the search plots: its configuration does not "
                f"fit the study's search_space ({exc})"
            )
    return study, notes


def _png(ax_or_axes) -> bytes:
    """The PNG of the figure holding ``ax_or_axes`` (one Axes, or Optuna's array of them: 3.5 inches each), closed;
    a figure that placed axes of its own (a colour bar) keeps its layout."""
    axes = list(ax_or_axes.flat) if hasattr(ax_or_axes, "flat") else [ax_or_axes]
    fig = axes[0].figure
    if len(fig.axes) == len(axes):
        fig.set_size_inches(max(SIZE[0], 3.5 * len(axes) + 1.0), SIZE[1])
        fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    plt.close(fig)
    return buffer.getvalue()


def _draw(title: str, plot) -> Figure:
    """Run ``plot()`` (returns Axes) under the page style; a figure, or the library's refusal as a sentence."""
    with plt.style.context(STYLE), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's ExperimentalWarning on its matplotlib backend
        try:
            return Figure(title, png=_png(plot()))
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            plt.close("all")
            return Figure(title, missing=f"not drawn: {' '.join(str(exc).split())}")


def _complete(study: optuna.Study) -> list:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def _if_reported(study: optuna.Study, title: str, plot) -> Figure:
    """``plot`` drawn when at least one trial reported an error; else the sentence that says none did."""
    if not _complete(study):
        return Figure(title, missing="no trial reported an error: nothing to plot")
    return _draw(title, plot)


def optimization_history(study: optuna.Study) -> Figure:
    def plot():
        ax = optuna.visualization.matplotlib.plot_optimization_history(study, target_name="val rel. L2")
        ax.set_yscale("log")
        ax.set_xlabel("trial number - 1 (Optuna counts from 0)")
        return ax

    return _if_reported(study, "Optimization history", plot)


def learning_curves_axes(study: optuna.Study):
    """Optuna's intermediate-values plot: one line per trial with evaluations, labelled by the table's numbers;
    a black X where ASHA stopped a trial (status pruned) and a black P where one diverged."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ExperimentalWarning
        ax = optuna.visualization.matplotlib.plot_intermediate_values(study)
    trials = [t for t in study.trials if t.intermediate_values]
    for line in ax.get_lines():  # Optuna labels Trial<number - 1>: use the table's numbers
        number = line.get_label().removeprefix("Trial")
        if number.isdigit():
            line.set_label(f"trial {study.trials[int(number)].user_attrs['number']}")
    for status, marker, label in (("pruned", "X", "stopped by ASHA"), ("diverged", "P", "diverged")):
        ends = [max(t.intermediate_values.items()) for t in trials if t.user_attrs["status"] == status]
        if ends:
            ax.scatter(*zip(*ends), marker=marker, s=90, color="black", zorder=5, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("val rel. L2")
    ax.legend(bbox_to_anchor=(1.02, 1), loc="upper left", fontsize=8)
    return ax


def learning_curves(study: optuna.Study) -> Figure:
    """Every trial's validation error by epoch, ASHA's stops marked (:func:`learning_curves_axes`)."""
    title = "Learning curves of the proxy trials"
    curves = sum(1 for t in study.trials if t.intermediate_values)
    if not curves:
        return Figure(title, missing="no trial has a readable history: nothing to plot")
    figure = _draw(title, lambda: learning_curves_axes(study))
    figure.curves = curves if figure.png else 0
    return figure


def importances(study: optuna.Study) -> Figure:
    title = "Hyperparameter importances"
    values = [t.value for t in _complete(study)]
    if len(values) < 2:
        return Figure(
            title,
            missing=f"not computed: importance needs at least 2 trials that reported an error "
            f"(this study has {len(values)})",
        )
    if len(set(values)) < 2:
        return Figure(
            title,
            missing="not computed: every trial reported the same error, so no hyperparameter explains a difference",
        )
    if not any(len({t.params[k] for t in _complete(study)}) > 1 for k in study.trials[0].distributions):
        return Figure(title, missing="not computed: every trial used the same configuration")
    return _draw(
        title, lambda: optuna.visualization.matplotlib.plot_param_importances(study, target_name="val rel. L2")
    )


def slices(study: optuna.Study) -> Figure:
    """One panel per searched hyperparameter: each completed trial's error against its value, coloured by trial
    number. Every panel has its own labelled error axis, and the colour bar takes its own room beside the panels
    (Optuna's drew it over the last one)."""

    def plot():
        trials = _complete(study)
        names = sorted({name for t in trials for name in t.params})
        fig, axes = plt.subplots(1, len(names), squeeze=False)
        errors = [float(t.value) for t in trials]
        log_y = min(errors) > 0 and max(errors) / min(errors) > 10
        points = None
        for ax, name in zip(axes.flat, names, strict=True):
            rows = [t for t in trials if name in t.params]
            points = ax.scatter(
                [t.params[name] for t in rows],
                [float(t.value) for t in rows],
                c=[t.number for t in rows],
                cmap="viridis",
                vmin=0,
                vmax=max(1, max(t.number for t in trials)),
                edgecolors="black",
                linewidths=0.4,
                zorder=3,
            )
            if getattr(rows[0].distributions[name], "log", False):
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # log-x minor labels overlap
            if log_y:
                ax.set_yscale("log")
            ax.set_xlabel(name)
            ax.set_ylabel("val rel. L2")
        fig.set_size_inches(max(SIZE[0], 3.5 * len(names) + 1.5), SIZE[1])
        fig.tight_layout(rect=(0, 0, 0.9, 1))  # the colour bar's room on the right
        bar = fig.add_axes((0.92, 0.2, 0.015, 0.65))
        fig.colorbar(points, cax=bar, label="trial")
        return axes

    return _if_reported(study, "Slice plots: error against each searched hyperparameter", plot)


def target_curve(files: StudyFiles) -> Figure:
    """The target's test error and training loss by epoch (pandas' plot of its history)."""
    title = "The target's learning curve"
    history = files.target_history
    if not history:
        return Figure(title, missing="the target has not been trained yet (or its history was not kept)")
    frame = pd.DataFrame([r.as_dict() for r in history]).rename(
        columns={"test_error": "test rel. L2", "train_loss": "train loss"}
    )
    return _draw(
        title,
        lambda: frame.plot(x="epoch", y=["test rel. L2", "train loss"], logy=True, marker="o", ylabel="error / loss"),
    )


def verification_curve(verification: dict) -> Figure:
    """The target's validation error on the --verify LR grid, one line per seed, the transferred LR marked; the proxy's
    on the same master LRs (dotted, on the target's axis) when the verification trained it."""
    title = "Verification: the target's error around the transferred LR"
    records = pd.DataFrame(verification.get("records") or [])
    if records.empty:
        return Figure(title, missing="the verification has no trainings recorded")
    error = "val_error" if "val_error" in records else "test_error"  # a report written before validation splits
    table = records.pivot_table(index="lr", columns="seed", values=error).add_prefix("target seed ")
    proxies = pd.DataFrame(verification.get("proxy_records") or [])
    if not proxies.empty:
        # the proxy's grid point i is the target's grid point i (the same master LR, mutransfer._sweep.verify_transfer)
        ratio = verification["transferred_lr"] / (verification.get("search_lr") or verification["transferred_lr"])
        proxies = proxies.assign(lr=proxies["lr"] * ratio)
        proxy_table = proxies.pivot_table(index="lr", columns="seed", values=error).add_prefix("proxy seed ")

    def plot():
        ax = table.plot(logx=True, logy=True, marker="o", xlabel="master LR", ylabel=f"{error.split('_')[0]} rel. L2")
        if not proxies.empty:
            proxy_table.plot(ax=ax, logx=True, logy=True, marker="s", linestyle=":")
        ax.axvline(verification["transferred_lr"], color="black", linestyle="--", label="transferred LR")
        ax.legend(fontsize=8)
        return ax

    return _draw(title, plot)


def pareto_figure(report: dict) -> Figure:
    """A two-objective search (``search.objectives: error+seconds``): every completed proxy trial's validation error
    against its training seconds, the Pareto front joined and the winner (lowest error) ringed."""
    title = "Pareto front: validation error vs training seconds"
    rows = [
        t
        for t in report.get("trial_table") or []
        if t.get("status") == "completed" and t.get("val_error") is not None and (t.get("trainer_seconds") or 0) > 0
    ]
    front = (report.get("pareto_front") or {}).get("trials") or []
    if not rows:
        return Figure(title, missing="no completed trial yet")

    def plot():
        fig, ax = plt.subplots(figsize=SIZE)
        ax.scatter(
            [t["trainer_seconds"] for t in rows], [t["val_error"] for t in rows], color="tab:gray", label="trial"
        )
        xs, ys = [p["trainer_seconds"] for p in front], [p["val_error"] for p in front]
        order = sorted(range(len(xs)), key=xs.__getitem__)
        ax.plot([xs[i] for i in order], [ys[i] for i in order], "o-", color="tab:blue", label="Pareto front")
        if front:
            ax.scatter([xs[0]], [ys[0]], s=160, facecolors="none", edgecolors="black", label="winner (lowest error)")
        ax.set(xlabel="training seconds", ylabel="validation rel. L2", yscale="log")
        ax.legend(fontsize=8)
        return ax

    return _draw(title, plot)


def search_figures(files: StudyFiles) -> tuple[list[Figure], list[str]]:
    """The figures of the proxy search, in page order, and notes on trials they leave out."""
    study, notes = optuna_study(files)
    if not files.trials:
        return [], notes
    return [optimization_history(study), learning_curves(study), importances(study), slices(study)], notes
