"""The study report: one self-contained HTML page (inline CSS, figures as base64 PNG, no external references).

Sections, in order: the study's settings, the muP transfer table, the result (target vs best proxy),
the proxy trials (table, optimization history, learning curves with ASHA's stops, importances, slice
plots), the target's learning curve, the sections its caller passes in (the sweep's search strategies: the
verification and the direct-tuning baseline when the study ran them, mutransfer._sweep.strategies), the compute
spent, and notes on anything missing. This package sits below the sweep and imports none of it.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from mutransfer._reporting import figures
from mutransfer._reporting.study_files import StudyFiles, load_study_files
from mutransfer._reporting.trials_table import trials_frame
from mutransfer._study_folder.state import write_atomic

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; } td.text, th.text { text-align: left; }
.lead { color: #555; } .note { background: #fff6dd; padding: 0.4em 0.8em; border-left: 4px solid #e0b000; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #555; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
"""


def _e(value) -> str:
    return html.escape(str(value))


def fmt(value) -> str:
    """A cell: floats to 6 significant digits, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if not math.isfinite(value) else format(value, ".6g")
    return str(value)


def key_table(rows: list[tuple[str, object]], table_id: str | None = None) -> str:
    """A two-column table of (name, value) rows."""
    ident = f' id="{table_id}"' if table_id else ""
    body = "".join(f'<tr><th class="text">{_e(k)}</th><td class="text">{_e(fmt(v))}</td></tr>' for k, v in rows)
    return f"<table{ident}>{body}</table>"


def frame_table(frame: pd.DataFrame, table_id: str) -> str:
    """A DataFrame as an HTML table (pandas' to_html; floats to 6 significant digits)."""
    return frame.to_html(index=False, table_id=table_id, border=0, na_rep="-", float_format=lambda v: format(v, ".6g"))


def figure_html(fig: figures.Figure, caption: str = "", ident: str = "") -> str:
    """The figure as an inline PNG (``ident``: its anchor, page.html#ident), or the sentence that says why it is
    missing."""
    if fig.png is None:
        return f'<p class="note">{_e(fig.title)}: {_e(fig.missing)}</p>'
    data = base64.b64encode(fig.png).decode("ascii")
    extra = f' data-curves="{fig.curves}"' if fig.curves else ""
    extra += f' id="{_e(ident)}"' if ident else ""
    text = f"{fig.title}. {caption}".strip()
    return (
        f'<figure{extra}><img alt="{_e(fig.title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(text)}</figcaption></figure>"
    )


def _settings(files: StudyFiles) -> str:
    s, r = files.study, files.report or {}
    search, budget, target = s.get("search") or {}, s.get("budget") or {}, s.get("target") or {}
    problem, operator = s.get("problem") or {}, s.get("operator") or {}
    grid = "" if problem.get("resolution") is None else f"resolution {problem['resolution']}, "
    rows = [
        ("problem", f"{problem.get('name')} ({grid}{problem.get('n_train')} train / {problem.get('n_test')} test)"),
        ("operator", f"{operator.get('type')} width {operator.get('width')}, {operator.get('layers')} layers"),
        ("proxy model", r.get("proxy_model") or f"K {s.get('proxy_K')}"),
        ("target model", r.get("target_model") or f"K {s.get('target_K')}"),
        ("parametrization", _parametrization_text(s.get("parametrization"), r.get("k_rule"), operator)),
        (
            "search",
            f"{search.get('algorithm')}, {search.get('num_trials')} trials, {search.get('max_concurrent')} at "
            f"a time, seed {search.get('seed')}",
        ),
        ("search space", "; ".join(f"{k}: {_space_text(d)}" for k, d in files.search_space.items())),
        (
            "budget (ASHA)",
            f"{budget.get('epochs')} epochs, grace period {budget.get('grace_period')}, reduction "
            f"factor {budget.get('reduction_factor')}",
        ),
        ("target training", f"{target.get('epochs')} epochs on {target.get('num_workers')} worker(s)"),
    ]
    rows += [("override", o) for o in r.get("overrides") or files.state.get("overrides") or []]
    return (
        key_table(rows, "settings")
        + f"<details><summary>study.yaml</summary><pre>{_e(files.study_text)}</pre></details>"
    )


def _parametrization_text(parametrization, k_rule: dict | None, operator: dict) -> str | None:
    """e.g. "mup" or "mup, K rule exponent rho = 0.42 (measured on the data; the paper's is 1)"."""
    if k_rule:
        return f"{parametrization}, K rule exponent rho = {k_rule['exponent']:.3g} (measured on the data; the paper's is 1)"
    rho = operator.get("k_exponent")
    if parametrization == "mup" and rho not in (None, 1, 1.0):
        return f"{parametrization}, K rule exponent rho = {rho}"
    return parametrization


def _pareto(report: dict | None) -> str:
    """A two-objective search's Pareto front: its trials, then the figure (nothing for a one-objective search)."""
    section = (report or {}).get("pareto_front")
    if not section or report is None:
        return ""
    rows: list[tuple[str, object]] = [
        (str(p["trial_id"]), f"validation error {p['val_error']:.4g}, {p['trainer_seconds']:.1f} s of training")
        for p in section["trials"]
    ]
    caption = (
        f"{len(rows)} of {section['completed']} completed trials no other beats on both objectives; the target "
        "trains the first (the lowest validation error)."
    )
    return (
        "<h3>Pareto front</h3>"
        + key_table(rows, "pareto")
        + figure_html(figures.pareto_figure(report), caption, "pareto-figure")
    )


def _space_text(d: dict) -> str:
    if d.get("type") == "choice":
        return "choice of " + ", ".join(map(str, d.get("values") or []))
    return f"{d.get('type')} [{d.get('low')}, {d.get('high')}]"


def _transfer(report: dict | None) -> str:
    transfer = (report or {}).get("transfer")
    if not transfer:
        return '<p class="note">No transfer yet: the study has not finished its proxy phase.</p>'
    text = ' class="text"'
    head = "".join(
        f"<th{text if c in ('quantity', 'rule') else ''}>{c}</th>"
        for c in ("quantity", "proxy", "factor", "target", "rule")
    )
    rows = "".join(
        f'<tr><td class="text">{_e(q["name"])}</td><td>{fmt(q["proxy"])}</td><td>{fmt(q["factor"])}</td>'
        f'<td>{fmt(q["target"])}</td><td class="text">{_e(q["rule"])}</td></tr>'
        for q in transfer["quantities"]
    )
    notes = "".join(f"<li>{_e(n)}</li>" for n in transfer.get("notes") or [])
    return f'<table id="transfer"><tr>{head}</tr>{rows}</table><ul>{notes}</ul>'


def _result(report: dict | None) -> str:
    if not report:
        return (
            '<p class="note">No result yet: the study is still running (or was interrupted; resume it with '
            "<code>mutransfer sweep --resume</code>).</p>"
        )
    best, target, gain = report.get("best_proxy") or {}, report.get("target") or {}, report.get("proxy_to_target")
    rows = [
        ("best proxy trial", f"{best.get('index')} ({best.get('trial_id')})"),
        ("best proxy configuration", ", ".join(f"{k}={fmt(v)}" for k, v in (best.get("config") or {}).items())),
        (
            f"best proxy {'val' if (report.get('selection') or {}).get('split') == 'validation' else 'test'} rel. L2",
            best.get("val_error", best.get("test_error")),
        ),
        ("target status", target.get("status")),
        ("target test rel. L2", target.get("test_error")),
        ("target val rel. L2", target.get("val_error")),
        ("target epochs", target.get("epochs")),
    ]
    if gain:
        rows.append(("proxy error / target error", gain["gain"]))
    model = report.get("model") or {}
    if model.get("dir"):  # the trained target: where it is and how to use it (docs/sweep.md, Using the trained model)
        folder = Path(report.get("study_dir") or ".") / model["dir"]
        rows.append(("trained model", f"{folder} (mutransfer evaluate {report.get('study')} --data FILE)"))
        for key, label in (("run_uri", "MLflow run model"), ("model_uri", "MLflow logged model")):
            if model.get(key):
                rows.append((label, f"{model[key]} (mlflow.pyfunc.load_model)"))
    return key_table(rows, "result")


#: the compute section's rows: (report key, label, unit formatter)
_COMPUTE_ROWS = (
    ("proxy_device_seconds", "proxy trials, device time", lambda v: f"{v:.1f} device-seconds"),
    ("target_device_seconds", "target, device time", lambda v: f"{v:.1f} device-seconds"),
    ("proxy_to_target_cost", "proxy trials / target, device time", lambda v: f"{v:.2f}x"),
    ("proxy_flops", "proxy trials, training FLOPs", lambda v: f"{v:.3g} FLOPs"),
    ("target_flops", "target, training FLOPs", lambda v: f"{v:.3g} FLOPs"),
    ("direct_sweep_flops", "tuning the target directly, training FLOPs (estimated)", lambda v: f"{v:.3g} FLOPs"),
    ("mutransfer_vs_direct_flops", "muTransfer / tuning directly, FLOPs (estimated)", lambda v: f"{v:.2f}x"),
    (
        "mutransfer_vs_direct_training_seconds",
        "muTransfer / tuning directly, training time (estimated)",
        lambda v: f"{v:.2f}x",
    ),
    ("sweep_wall_seconds", "wall time of the study", lambda v: f"{v:.1f} s"),
    ("overhead_share", "Ray, MLflow and start-up share of the wall time", lambda v: f"{100 * v:.0f} %"),
    (
        "overheads",
        "fixed overhead: setup, trial start-up, proxy scheduling, target start-up",
        lambda v: (
            f"{v['fixed_seconds']:.1f} s ({100 * v['fixed_share']:.0f} %): {v['setup_seconds']:.1f} + "
            f"{v['trial_startup_seconds']:.1f} + {v['proxy_scheduling_seconds']:.1f} + {v['target_startup_seconds']:.1f} s"
        ),
    ),
)


def _compute(report: dict | None) -> str:
    c = (report or {}).get("compute") or {}
    rows: list[tuple[str, object]] = [
        (label, show(c[key])) for key, label, show in _COMPUTE_ROWS if c.get(key) is not None
    ]
    return key_table(rows, "compute") if rows else "<p>Not known until the study is done.</p>"


#: below this many trials the importance bars carry a caveat (PED-ANOVA splits the trials into a top and the rest)
IMPORTANCE_TRIALS = 30


def importance_caption(trials: int, finished: int) -> str:
    """The importance plot's caption for ``trials`` proxy trials, ``finished`` of them run to the end: under
    :data:`IMPORTANCE_TRIALS` it says the bars are a rough hint."""
    caveat = (
        f": from {trials} trials ({finished} ran to the end) these bars are a rough hint, not a measurement."
        if trials < IMPORTANCE_TRIALS
        else "."
    )
    return "Optuna's PED-ANOVA importances of the searched hyperparameters for the validation error" + caveat


def render_report(files: StudyFiles, sections: Sequence[str] = ()) -> str:
    """The whole page for the study in ``files``; ``sections``: HTML the caller adds before the compute (the sweep's
    search strategies: the verification, the direct baseline; mutransfer._sweep.strategies.html_sections)."""
    report = files.report
    search, notes = figures.search_figures(files)
    frame = trials_frame(files)
    counts = frame["status"].value_counts().to_dict() if not frame.empty else {}
    lead = (
        f"phase {files.phase}; {len(frame)} proxy trials ("
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + f"); folder {files.root}"
    )
    finished = int((frame["status"] == "completed").sum()) if not frame.empty else 0
    captions = [
        "Each point: a trial's last reported validation error (what the sampler was told).",
        "One line per trial: its validation error by epoch; X: the epoch where ASHA stopped the trial (decided on "
        "the error of that single epoch, which can swing between epochs).",
        importance_caption(len(frame), finished),
        "Each trial's last reported validation error against each searched hyperparameter; colour: trial order.",
    ]
    verdict = (report or {}).get("verdict") or []
    parts = [
        f'<h1>Study {_e(files.name)}</h1><p class="lead">{_e(lead)}</p>',
        '<section id="verdict"><h2>Verdict</h2><ul>' + "".join(f"<li>{_e(v)}</li>" for v in verdict) + "</ul></section>"
        if verdict
        else "",
        "<h2>Settings</h2>",
        _settings(files),
        "<h2>muP transfer</h2>",
        _transfer(report),
        "<h2>Result</h2>",
        _result(report),
        "<h2>Proxy trials</h2>",
        frame_table(frame, "trials") if not frame.empty else "",
        *[figure_html(f, c, i) for f, c, i in zip(search, captions, ("history", "curves", "importances", "slices"))],
        _pareto(report),
        "<h2>Target</h2>",
        figure_html(figures.target_curve(files)),
    ]
    parts += list(sections)
    parts += ["<h2>Compute</h2>", _compute(report)]
    all_notes = files.notes + notes
    if all_notes:
        parts += ['<h2>Notes</h2><ul id="notes">', *[f"<li>{_e(n)}</li>" for n in all_notes], "</ul>"]
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>mutransfer study {_e(files.name)}'
        f"</title><style>{CSS}</style></head><body>\n{body}\n</body></html>\n"
    )


def write_report_page(files: StudyFiles, out: Path, sections: Sequence[str] = ()) -> Path:
    """Render the page (with the caller's ``sections``) and write it to ``out`` atomically; returns ``out``."""
    write_atomic(Path(out), render_report(files, sections))
    return Path(out)


def write_study_page(root: Path, say, sections: Callable[[StudyFiles], Sequence[str]] | None = None) -> Path | None:
    """The sweep's last step: ``<study folder>/report.html``, with ``sections(files)`` added (the sweep's
    strategies'). A page that cannot be drawn costs the sweep nothing: ``say`` gets one line (with the command
    that retries it) and None is returned."""

    out = Path(root) / "report.html"
    try:
        files = load_study_files(str(root))
        return write_report_page(files, out, sections(files) if sections is not None else ())
    except Exception as exc:  # noqa: BLE001 - the study's results are already saved; the page is a view of them
        say(f"report page not written ({type(exc).__name__}: {exc}); retry with `mutransfer report {root}`")
        return None
