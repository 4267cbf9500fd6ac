"""The direct-tuning baseline as a strategy (``sweep --baseline direct``; mutransfer._sweep.baseline).

Its phase runs after the verification: the same search at the target's size, its costs measured against
μTransfer's, which include the other strategies' trainings (:func:`registry.extra_costs`). Report key
``direct_baseline`` (after the target, and a section of the HTML page). It logs its own metrics when it finishes.
"""

from __future__ import annotations

import html
from typing import Any

from mutransfer._sweep.baseline import NAME, DirectBaseline, summary_line
from mutransfer._sweep.baseline import direct_baseline_phase as run_baseline
from mutransfer._sweep.session import Made, Prepared, Session
from mutransfer._sweep.strategies.base import Placement, Strategy, number
from mutransfer._sweep.strategies.registry import extra_costs


def direct_baseline_phase(session: Session, made: Made) -> Made:
    """Run the baseline with the other strategies' trainings on μTransfer's side (a ladder's rungs, top-k's targets)."""
    return made.with_record(NAME, run_baseline(session, made, lambda: extra_costs(session, made)))


def baseline_lines(b: dict | None) -> list[str]:
    """The text report's baseline: the summary, the direct search, device-seconds and FLOPs of both sides."""
    if not b:
        return []
    m, d = b["mutransfer"], b["cost"]
    cfg = ", ".join(f"{k}={number(v)}" for k, v in b["best_config"].items())
    return [
        "",
        summary_line(b),
        f"  direct: {b['search']['trials']} trials at the target's size, best ({cfg}); "
        + ("its error after the search" if not b.get("final_training") else "winner retrained for the target's epochs")
        + (
            "; the SAME configuration as muTransfer's: the errors differ by run-to-run noise only"
            if b.get("same_configuration")
            else ""
        ),
        f"  device-seconds  muTransfer {m['device_seconds']:.1f} (training {m['trainer_device_seconds']:.1f} "
        f"+ overhead {m['overhead_device_seconds']:.1f})  direct {d['device_seconds']:.1f} "
        f"(training {d['trainer_device_seconds']:.1f} + overhead {d['overhead_device_seconds']:.1f})",
        f"  FLOPs           muTransfer {number(m.get('flops'), '.3g')}  direct {number(d.get('flops'), '.3g')}",
    ]


def baseline_verdict(b: dict) -> str:
    """The baseline in words: muTransfer's measured cost and test error against tuning the target directly."""
    r = b["mutransfer_vs_direct"]
    error, cost, flops = r.get("error"), r.get("trainer_device_seconds"), r.get("flops")
    if error is None:
        return "--baseline direct: no error ratio (a side did not finish)"
    parts = [f"{flops:.2f}x in FLOPs"] if flops is not None else []
    if cost is not None:
        parts.append(f"{cost:.2f}x in training time")
    text = "--baseline direct (measured): muTransfer cost " + (
        " and ".join(parts) + " of tuning the target directly" if parts else "an unknown share of direct tuning"
    )
    if cost is not None:
        text += " (a saving)" if cost < 1 else " (no saving)"
    quality = "as good as" if error <= 1.02 else "worse than"
    return text + f"; its target is {quality} direct tuning's winner (test error ratio {error:.2f}x)"


def baseline_html(b: dict) -> str:
    """The HTML page's baseline section: the summary and a muTransfer-vs-direct table."""
    import pandas as pd  # noqa: PLC0415 -- deferred: pandas + reporting load ~0.5-1 s; only a drawn page needs them, not `import mutransfer._sweep`

    from mutransfer._reporting.html import frame_table  # noqa: PLC0415 -- deferred: the page's helpers (pandas, matplotlib) load only when a page is drawn

    m, d = b["mutransfer"], b["cost"]
    frame = pd.DataFrame(
        [
            {
                "": "muTransfer",
                "test_error": m.get("test_error"),
                "device_seconds": m["device_seconds"],
                "trainer_device_seconds": m["trainer_device_seconds"],
                "flops": m.get("flops"),
            },
            {
                "": "direct tuning",
                "test_error": b.get("test_error"),
                "device_seconds": d["device_seconds"],
                "trainer_device_seconds": d["trainer_device_seconds"],
                "flops": d.get("flops"),
            },
        ]
    )
    return (
        f'<section id="baseline"><h2>Direct-tuning baseline (--baseline direct)</h2>'
        f"<p>{html.escape(summary_line(b))}</p>" + frame_table(frame, "baseline-table") + "</section>"
    )


class Baseline(Strategy):
    name = NAME
    report_key = "direct_baseline"
    flag = "--baseline direct"
    cost_side = "direct"  # the direct side itself: it measures what the ratios estimate
    suggestion = "runs the same search on the target itself and compares error and cost with muTransfer's"

    def active(self, study: Prepared) -> bool:
        return study.options.baseline == "direct"

    def phases(self) -> tuple[Placement, ...]:
        return (Placement("log_model_phase", direct_baseline_phase),)

    def section(self, made: Made) -> dict | None:
        record = made.record(NAME, DirectBaseline)
        return record.section() if record is not None else None

    def text_lines(self, section: Any, report: dict) -> list[str]:
        return baseline_lines(section)

    def verdict(self, section: Any, report: dict) -> str | None:
        return baseline_verdict(section)

    def html_section(self, section: Any) -> str:
        return baseline_html(section)
