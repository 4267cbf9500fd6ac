"""The transfer report: best proxy, the muP transfer table, target result, compute spent.

Compute is counted in device-seconds: for the proxies, the sum over trials of
Tune's wall time of the trial × the CPUs (or GPUs, when trials use GPUs) it
held; for the target, the wall time of Ray Train's ``fit`` × workers × devices
per worker (CPUs, or 1 GPU).

``trainer_seconds`` is time spent inside the trainer (training + evaluation).
Proxy trials run ``concurrency`` at a time, so the trainer time on the critical
path is ``proxy_trainer / concurrency + target_trainer``; the rest of the wall
time (imports, data, Ray start, MLflow, Tune and Ray Train scheduling, worker
start-up, checkpoints, idle slots) is reported as ``overhead_share``.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Sequence
from pathlib import Path

from mutransfer._study_folder.state import DEFAULT_RUNS_DIR
from mutransfer._sweep import strategies
from mutransfer._sweep._ledger import Booking
from mutransfer._sweep.cost import direct_wall_estimate, study_cost
from mutransfer._sweep.overheads import describe as describe_overheads
from mutransfer._sweep.overheads import overheads
from mutransfer._sweep.pareto import pareto_lines, pareto_section
from mutransfer._sweep.strategies.base import number as _g
from mutransfer._tracking.runs import default_tracking_uri


def target_summary(outcome, run_id: str | None) -> dict | None:
    """The target's outcome as the report shows it (its epoch history stays in MLflow)."""
    if outcome is None:
        return None
    target = dataclasses.asdict(outcome)
    target.pop("history", None)
    target["mlflow_run_id"] = run_id
    return target


def build_report(
    *,
    study,
    trials: list,
    best,
    transfer: dict | None,
    target_hp: dict | None,
    target,
    target_run_id: str | None = None,
    proxy_device: str,
    wall_seconds: float | None,
    mlflow: dict,
    study_dir: str,
    overrides: list[str],
    phases: dict | None = None,
    k_rule: dict | None = None,
    cost_estimate: dict | None = None,
    bookings: Sequence[Booking] = (),
    **sections,
) -> dict:
    """The report (a JSON-ready dict) from the phases' records: TrialRecords, the best one, the TargetOutcome;
    ``sections``: the search strategies' report values by report key (mutransfer._sweep.strategies.sections; a
    registered strategy not given has None), which also count in the cost and the gain."""
    values = {s.report_key: sections.get(s.report_key) for s in strategies.STRATEGIES}
    counts = {s: sum(1 for t in trials if t.status == s) for s in ("completed", "pruned", "diverged", "failed")}
    proxy_device_seconds = sum(t.device_seconds for t in trials)
    proxy_trainer = sum(t.trainer_seconds for t in trials)
    target = target_summary(target, target_run_id)
    compute = {
        "proxy_device": proxy_device,
        "proxy_device_seconds": proxy_device_seconds,
        "proxy_trainer_seconds": proxy_trainer,
        "target_device": ("gpu" if target and target.get("use_gpu") else "cpu") if target else None,
        "target_device_seconds": target["device_seconds"] if target else None,
        "target_trainer_seconds": target["trainer_seconds"] if target else None,
        "target_wall_seconds": target["wall_seconds"] if target else None,
        # Ray Train's start-up that ran while the last proxies trained (target.start_early), not in the wall above
        "target_head_start_seconds": target.get("head_start_seconds", 0.0) if target else None,
        "sweep_wall_seconds": wall_seconds,
        # what the study said before training: the proxy's cost per epoch vs the target's, the expected ratio
        "estimate_before_training": cost_estimate,
    }
    if target and target["device_seconds"]:
        compute["proxy_to_target_cost"] = proxy_device_seconds / target["device_seconds"]
    phases = phases or {}
    shape = phases.get("input_shape")
    compute.update(study_cost(study, trials, target, input_shape=None if shape is None else tuple(shape)))
    concurrency = max(1, int(phases.get("concurrency", 1)))
    # e.g. a ladder's rungs, top-k's other targets, any strategy's booked trainings (mutransfer._sweep._ledger)
    extra = strategies.count_costs(compute, values, bookings)
    compute["setup_seconds"] = phases.get("setup_seconds")
    compute["proxy_phase_seconds"] = phases.get("proxy_phase_seconds")
    compute["proxy_concurrency"] = concurrency
    if wall_seconds:
        critical = (proxy_trainer + extra.search) / concurrency + (target["trainer_seconds"] if target else 0.0)
        if extra.target:  # trained one after another, after the target
            critical += extra.target
        compute["trainer_seconds_critical_path"] = critical
        compute["overhead_share"] = max(0.0, 1.0 - critical / wall_seconds)
    # wall time only where this study's is muTransfer's alone: no strategy (a verification, a baseline, a ladder, top-k)
    # or coordinate check added its phases to it, and one session measured it all (setup is this session's)
    direct_wall = direct_wall_estimate(compute, trials, target)
    compute["direct_wall_seconds_estimate"] = direct_wall
    alone = not any(v is not None for v in values.values()) and not phases.get("prior_wall")
    if direct_wall and wall_seconds and alone and not phases.get("coord_check"):
        compute["mutransfer_vs_direct_wall_seconds"] = wall_seconds / direct_wall
    compute["overheads"] = overheads(
        trials,
        concurrency=concurrency,
        setup_seconds=phases.get("setup_seconds"),
        proxy_phase_seconds=phases.get("proxy_phase_seconds"),
        target_wall_seconds=target["wall_seconds"] if target else None,
        target_trainer_seconds=target["trainer_seconds"] if target else None,
        target_head_start_seconds=target.get("head_start_seconds", 0.0) if target else 0.0,
        wall_seconds=wall_seconds,
    )
    gain_from = strategies.gain_source(values, trials, best)  # e.g. top-k's winner is compared with its own proxy
    gain = proxy_to_target(gain_from, target)
    if gain is not None and gain_from is not None:
        strategies.refine_gain(gain, values, gain_from)
    out = {
        "study": study.name,
        "problem": study.problem.name,
        "dim": study.dim,
        **study.scaling(),
        "proxy_model": study.model_text(False),
        "target_model": study.model_text(True),
        "scaling": study.scale_text(),
        "grid": None if study.point_problem else list(study.grid_shape),
        "n_train": study.problem.n_train,
        "n_test": study.problem.n_test,
        "n_val": study.problem.n_val,
        "selection": selection_section(study),
        "k_rule": k_rule,
        "overrides": overrides,
        "trials": {"total": len(trials), **counts},
        "best_proxy": best.summary() if best is not None else None,
        "pareto_front": pareto_section(study.search.objectives, trials),
        "transfer": transfer,
        "target_hyperparameters": target_hp,
        "target": target,
        "compute": compute,
        "mlflow": mlflow,
        "study_dir": study_dir,
        "proxy_to_target": gain,
        **values,  # the strategies' sections (verification, direct_baseline, rungs, top_k, warm_start, ...)
        "trial_table": [t.as_dict() for t in trials],
    }
    out["verdict"] = transfer_verdict(out)  # in words; the summary's last lines and the top of the study page
    return out


def selection_section(study) -> dict:
    """Which split every selection read, and the sizes: the report's ``selection``."""
    n_val = int(study.problem.n_val or 0)
    if n_val == 0:
        return {
            "split": "test",
            "n_val": 0,
            "n_fit": study.problem.n_fit,
            "note": "a study made before validation splits: its selections read the test split, so its reported "
            "errors are optimistic",
        }
    return {
        "split": "validation",
        "n_val": n_val,
        "n_fit": study.problem.n_fit,
        "note": f"every model trained on the first {study.problem.n_fit} samples; the search, ASHA and every "
        f"other selection compared errors on the next {n_val} (validation); the test split was read only by the "
        "final models",
    }


def proxy_to_target(best, target: dict | None) -> dict | None:
    """Best proxy error / target error on the same split, the validation split (the gain of training the larger
    model); a strategy may add to it (``--verify``: the target's seed spread at the transferred LR,
    mutransfer._sweep.strategies.verify). A study made before validation splits compares test errors."""
    if best is None or target is None or best.val_error is None:
        return None
    key = "val_error" if target.get("val_error") is not None else "test_error"
    if not target.get(key):
        return None
    return {
        "split": "validation" if key == "val_error" else "test",
        "proxy_error": best.val_error,
        "target_error": target[key],
        "gain": best.val_error / target[key],
    }


def _split_label(report: dict) -> str:
    """What the proxies' errors were measured on: "val" (a study made before validation splits: "test")."""
    return "val" if (report.get("selection") or {}).get("split") == "validation" else "test"


def _split_sizes(report: dict) -> str:
    """ "320 train / 80 val / 100 test" (a study made before validation splits: "400 train / 100 test")."""
    n_val = int(report.get("n_val") or 0)
    if n_val == 0:
        return f"{report['n_train']} train / {report['n_test']} test"
    return f"{int(report['n_train']) - n_val} train / {n_val} val / {report['n_test']} test"


def _selected_error(trial: dict):
    """A trial summary's error (``val_error``; a report written before validation splits: ``test_error``)."""
    return trial.get("val_error", trial.get("test_error"))


def format_report(report: dict) -> str:
    lines = []
    grid = f"grid {'x'.join(map(str, report['grid']))}" if report.get("grid") else "point sets"
    family = str(report.get("proxy_model") or report["operator"]).split(" K=")[0]  # its family's label
    operator = f"{family} ({report['parametrization']})" if report.get("proxy_K") is not None else report["operator"]
    lines.append(
        f"study {report['study']}: {report['problem']} {operator}, {grid}, {_split_sizes(report)}, "
        f"{report.get('scaling') or 'K ' + str(report['proxy_K']) + ' -> ' + str(report['target_K'])}"
    )
    if report.get("k_rule"):
        k = report["k_rule"]
        lo, hi = k["modes"]
        lines.append(
            f"  K rule: rho = {k['exponent']:.3g} measured on {k['samples']} training samples (K {lo} -> {hi}; the "
            "paper's rule is rho = 1): spectral init std and LR x (d log K)^(-rho/2)"
        )
    if _split_label(report) == "test":
        lines.append("  note: a study made before validation splits: it selected on the test split (errors optimistic)")
    for note in report.get("overrides") or []:
        lines.append(f"  override: {note}")
    t = report["trials"]
    lines.append(
        f"proxy trials: {t['total']} ({t['completed']} completed, {t['pruned']} pruned by ASHA, "
        f"{t['diverged']} diverged, {t['failed']} failed)"
    )
    if report.get("search_summary"):  # a population executor's: how many trained together, why others alone
        lines.append(f"  {report['search_summary']}")
    best = report.get("best_proxy")
    if best:
        cfg = ", ".join(f"{k}={_g(v)}" for k, v in best["config"].items())
        lines.append(
            f"best proxy: trial {best['trial_id']}  {_split_label(report)} rel. L2 {_g(_selected_error(best))} after "
            f"{best['epochs']} epochs  ({cfg})"
        )
    lines += strategies.text_lines(report, "search")  # e.g. the ladder's rungs
    transfer = report.get("transfer")
    if transfer:
        lines.append("")
        lines.append(transfer["table"])
    target = report.get("target")
    if target:
        lines.append("")
        lines.append(
            f"target ({report.get('target_model') or 'K=' + str(report['target_K'])}): status {target['status']}, test rel. L2 {_g(target['test_error'])} after "
            f"{target['epochs']} epochs on {target['num_workers']} worker(s) x "
            f"{'1 GPU' if target['use_gpu'] else str(target['cpus_per_worker']) + ' CPU'}"
        )
        gain = report.get("proxy_to_target")
        if gain:
            text = (
                f"proxy -> target {'val' if gain.get('split', 'test') == 'validation' else 'test'} error: "
                f"{_g(gain.get('proxy_error', gain.get('proxy_test_error')))} -> "
                f"{_g(gain.get('target_error', gain.get('target_test_error')))} "
                f"({gain['gain']:.2f}x {'lower' if gain['gain'] >= 1 else 'HIGHER: the target is no better than its proxy'})"
            )
            if gain.get("target_seeds"):
                lo, hi = gain["gain_range"]
                text += (
                    f"; the target at the transferred LR over {gain['target_seeds']} seeds (--verify): "
                    f"{_g(gain['target_error_mean'])} ± {_g(gain['target_error_std'], '.2g')}, gain {lo:.2f}-{hi:.2f}x"
                )
            lines.append(text)
    lines += strategies.text_lines(report, "result")  # e.g. top-k, the verification, the baseline, the warm start
    lines += pareto_lines(report.get("pareto_front"))
    cc = report.get("coord_check")
    if cc:
        lines.append(
            f"coordinate check at K = {cc['modes']}: {cc['verdict']}"
            + (f" ({'; '.join(cc['flagged'][:2])})" if cc["flagged"] else "")
            + " — reported only, it does not gate (docs/results.md, the rule panel)"
        )
    c = report["compute"]
    lines.append("")
    lines.append(
        f"compute: proxies {_g(c['proxy_device_seconds'], '.1f')} {c['proxy_device']}-s "
        f"(trainer {_g(c['proxy_trainer_seconds'], '.1f')} s), target {_g(c['target_device_seconds'], '.1f')} "
        f"{c['target_device'] or ''}-s (trainer {_g(c['target_trainer_seconds'], '.1f')} s)"
    )
    if c.get("proxy_to_target_cost") is not None:
        lines.append(f"proxy sweep cost = {c['proxy_to_target_cost']:.2f} x the target training")
    lines.append(
        f"training FLOPs ({c.get('flops_method', 'analytic')}): proxies {_g(c.get('proxy_flops'), '.3g')}, target {_g(c.get('target_flops'), '.3g')}; "
        f"tuning the target directly (same trials and epochs on the target model) {_g(c.get('direct_sweep_flops'), '.3g')}"
    )
    if c.get("mutransfer_vs_direct_flops") is not None:
        seconds = c.get("mutransfer_vs_direct_training_seconds")
        lines.append(
            f"muTransfer study (proxies + target) vs direct tuning (estimated): {c['mutransfer_vs_direct_flops']:.2f}x in FLOPs"
            + (
                f", {seconds:.2f}x in training time (from the target's trainer seconds per epoch; start-up left out)"
                if seconds
                else ""
            )
        )
    before = c.get("estimate_before_training") or {}
    if before.get("study_ratio") is not None:
        lines.append(
            f"  said before training: the proxy {before['flop_ratio']:.2f}x the target per epoch in FLOPs, the study "
            f"about {before['study_ratio']:.2f}x of direct tuning (all trials run to the end)"
        )
    if c.get("sweep_wall_seconds"):
        share = c.get("overhead_share")
        parts = [f"wall {c['sweep_wall_seconds']:.1f} s"]
        if c.get("setup_seconds") is not None and c.get("proxy_phase_seconds") is not None:
            unit = " population(s)" if report.get("search_summary") else ""  # a population executor's lanes
            parts.append(
                f"(setup {c['setup_seconds']:.1f} s, proxies {c['proxy_phase_seconds']:.1f} s, {c['proxy_concurrency']}"
                f"{unit} at a time, target {_g(c['target_wall_seconds'], '.1f')} s)"
            )
        if share is not None:
            parts.append(
                f"trainer on the critical path {c['trainer_seconds_critical_path']:.1f} s, "
                f"everything else {100 * share:.0f}% of the wall time"
            )
        lines.append(" ".join(parts[:2]) + ("; " + parts[2] if len(parts) > 2 else ""))
    if c.get("overheads"):
        lines.append(describe_overheads(c["overheads"]))
    m = report.get("mlflow") or {}
    if m:
        lines.append(
            f"MLflow: {m.get('tracking_uri')}  experiment {m.get('experiment_id')}  parent run {m.get('parent_run_id')}"
        )
    lines.append(f"study directory: {report['study_dir']}")
    lines += summary_lines(report)
    return "\n".join(lines)


def transfer_verdict(report: dict) -> list[str]:
    """What the study found, in words: the proxy -> target gain, each strategy that ran (a verification, the
    direct baseline, ...), the coordinate check, and the cost against tuning the target directly."""
    out = []
    g = report.get("proxy_to_target") or {}
    target = report.get("target_model") or "the target"
    if g.get("gain") is not None:
        split = "validation" if g.get("split") == "validation" else "test"
        if g["gain"] > 1:
            out.append(f"{target} reached a {g['gain']:.2f}x lower {split} error than its proxy")
        else:
            t_epochs = (report.get("target") or {}).get("epochs")
            p_epochs = (report.get("best_proxy") or {}).get("epochs")
            shorter = (
                f" or its {t_epochs} epochs to the proxy's {p_epochs} were too few"
                if t_epochs is not None and p_epochs is not None and t_epochs < p_epochs
                else ""
            )
            out.append(
                f"{target} is no better than its proxy ({split} error {1 / g['gain']:.2f}x the proxy's): the "
                f"transferred hyperparameters may not suit it{shorter}"
            )
    elif (report.get("target") or {}).get("status") not in (None, "completed"):
        out.append(f"{target} did not complete ({report['target']['status']})")
    out += strategies.verdicts(report)
    cc = report.get("coord_check")
    if cc:
        out.append(f"coordinate check: {cc.get('verdict')} (it reports and never blocks)")
    if not report.get("verification"):
        out.append("whether the target's optimum sits at the transferred LR is not measured")
    out += _cost_verdict(report, target)
    return out


def _cost_verdict(report: dict, target: str) -> list[str]:
    """The saving against tuning the target directly, rated on the dearer of training time (device-seconds) and
    wall time (estimated), FLOPs beside them and never alone, and how much of the wall time was fixed overhead and
    what would shrink it."""
    c = report.get("compute") or {}
    seconds, flops = c.get("mutransfer_vs_direct_training_seconds"), c.get("mutransfer_vs_direct_flops")
    wall = c.get("mutransfer_vs_direct_wall_seconds") if seconds is not None else None
    out = []
    ratio = seconds if seconds is not None else flops
    if wall is not None and ratio is not None:  # rated on the dearer of training time and wall time
        ratio = max(ratio, wall)
    if ratio is not None:
        saving = "a saving" if ratio < 0.5 else "a small saving" if ratio < 1 else "no saving"
        if ratio >= 0.5:
            saving += ": a proxy smaller in width or grid would pay more (docs/sweep.md, Cheap proxies)"
        if seconds is not None:
            beside = f", {flops:.2f}x in FLOPs" if flops is not None else ""
            walled = (
                f"; about {wall:.2f}x in wall time (the direct search's trainings in place of the proxies', at the "
                "same concurrency and start-up)"
                if wall is not None
                else ""
            )
            out.append(
                f"muTransfer cost about {seconds:.2f}x of tuning {target} directly in training time "
                f"(device-seconds; direct tuning estimated from the target's seconds per epoch{beside}){walled}: "
                f"{saving}"
            )
        else:
            out.append(
                f"muTransfer cost about {flops:.2f}x of tuning {target} directly in FLOPs (estimated; its training "
                f"time was not measured, so the saving in time is not known): {saving}"
            )
    o = c.get("overheads") or {}
    if o.get("fixed_share") is not None:
        out.append(
            f"fixed overhead (setup, trial start-up, scheduling, the target's start-up) was "
            f"{100 * o['fixed_share']:.0f}% of the {c.get('sweep_wall_seconds', 0):.0f} s wall time; it does not "
            "grow with the trials, so more trials or a longer budget spread it, and a cluster runs more at once"
        )
    return out


def summary_lines(report: dict) -> list[str]:
    """The summary's last lines: the verdict in words, then the next commands with real paths."""
    lines = ["", "verdict:"] + [f"  - {text}" for text in report.get("verdict") or transfer_verdict(report)]
    study, folder = report["study"], Path(report["study_dir"])
    runs_dir = "" if folder.parent == Path(DEFAULT_RUNS_DIR).absolute() else f" --runs-dir {folder.parent}"
    uri = (report.get("mlflow") or {}).get("tracking_uri")
    store = "" if uri in (None, default_tracking_uri()) else f" --tracking-uri {uri}"
    commands = [
        (f"mutransfer report {study}{runs_dir}", f"the study page, {folder / 'report.html'}"),
        (f"mutransfer ui{store}", "the MLflow UI at http://127.0.0.1:5000: this study's runs under its parent run"),
    ]
    again = report.get("command")
    commands += [
        (
            shlex.join([*again, *shlex.split(flag), "--name", f"{study}-2"])
            if again
            else f"mutransfer sweep <this study's flags> {flag} --name {study}-2",
            what,
        )
        for flag, what in strategies.suggestions(report)
    ]
    lines.append("next:")
    lines += [f"  {command}\n      {what}" for command, what in commands]
    return lines


def plot_trials(trials: list, path, *, searched_lr: bool, title: str) -> None:
    """PNG of proxy validation error vs master LR (or vs trial index when LR is fixed), by outcome."""
    import matplotlib  # noqa: PLC0415 -- deferred: matplotlib (~0.3 s) only when a plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 -- deferred: after matplotlib.use("Agg"), only when a plot is drawn

    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    markers = {
        "completed": ("o", "tab:blue"),
        "pruned": ("v", "tab:gray"),
        "diverged": ("x", "tab:red"),
        "failed": ("s", "black"),
    }
    for status, (marker, color) in markers.items():
        rows = [t for t in trials if t.status == status and t.val_error is not None and math.isfinite(t.val_error)]
        if not rows:
            continue
        xs = [t.config.get("lr", t.hp["lr"]) if searched_lr else t.index for t in rows]
        ys = [t.val_error for t in rows]
        ax.scatter(xs, ys, marker=marker, color=color, label=f"{status} ({len(rows)})")
    best = [t for t in trials if t.best]
    if best:
        b = best[0]
        ax.scatter(
            [b.config.get("lr", b.hp["lr"]) if searched_lr else b.index],
            [b.val_error],
            s=160,
            facecolors="none",
            edgecolors="tab:green",
            linewidths=2,
            label="best",
        )
    if searched_lr:
        ax.set_xscale("log")
        ax.set_xlabel("master learning rate")
    else:
        ax.set_xlabel("trial")
    ax.set_yscale("log")
    ax.set_ylabel("validation relative L2 (last reported)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
