"""The verification as a strategy (``sweep --verify``; mutransfer._sweep.verify).

Its phase runs after the target (and its model's logging): the target trained on an LR grid around the transferred
LR, and the proxy on the same master-LR grid around the search winner's (the transfer error and the search gap,
mutransfer._sweep.verify_transfer). Report key ``verification`` (after the target, and a section of the HTML page); with more than one seed the
gain reports the target's seed spread at the transferred LR. It logs its own metrics when it finishes.
"""

from __future__ import annotations

import html
import math
from typing import Any

from mutransfer._config.checks import VERIFY_POINTS, VERIFY_SEEDS
from mutransfer._study_folder.records import TrialRecord
from mutransfer._sweep.session import Made, Prepared
from mutransfer._sweep.strategies.base import Placement, Strategy, number
from mutransfer._sweep.verify import NAME, Verification, transfer_metrics, verify_phase


def verification_lines(v: dict | None) -> list[str]:
    """The text report's verification: the summary line, seeds whose optimum lay at the grid's edge, the cost."""
    if not v:
        return []
    record = Verification.from_dict(v)
    lines = ["", record.summary_line()]
    edge = [s for s in v["seed_optima"] if s["at_edge"]]
    if edge:
        lines.append(f"  optimum at the grid's edge for seed(s) {', '.join(str(s['seed']) for s in edge)}: not used")
    transfer = record.transfer_line()
    if transfer:
        lines.append(f"  {transfer}")
    c = v.get("cost") or {}
    if c:
        proxy = (c.get("proxy") or {}).get("trainings", 0)
        kinds = f"{c['trainings'] - proxy} target + {proxy} proxy" if proxy else f"{c['trainings']} target"
        lines.append(
            f"  extra cost: {kinds} trainings, {c['device_seconds']:.1f} device-s "
            f"(training {c['trainer_device_seconds']:.1f}, overhead {c['overhead_device_seconds']:.1f}), "
            f"FLOPs {number(c.get('flops'), '.3g')}"
        )
    return lines


def seed_spread(gain: dict, verification: dict, best: TrialRecord) -> None:
    """The target's seed spread at the transferred LR (--verify with more than one seed) added to the gain."""
    lr = verification["transferred_lr"]
    errors = [
        r["val_error"]
        for r in verification["records"]
        if math.isclose(r["lr"], lr, rel_tol=1e-9)
        and r["status"] != "diverged"
        and math.isfinite(r["val_error"])
        and r["val_error"] > 0
    ]
    if len(errors) > 1:
        mean = sum(errors) / len(errors)
        std = math.sqrt(sum((e - mean) ** 2 for e in errors) / (len(errors) - 1))
        gain.update(
            target_seeds=len(errors),
            target_error_mean=mean,
            target_error_std=std,
            gain_range=[best.val_error / max(errors), best.val_error / min(errors)],
        )


def verification_html(v: dict) -> str:
    """The HTML page's verification section: the summary, the error-vs-LR curve, the trainings."""
    import pandas as pd  # noqa: PLC0415 -- deferred: pandas + reporting load ~0.5-1 s; only a drawn page needs them, not `import mutransfer._sweep`

    from mutransfer._reporting import figures  # noqa: PLC0415 -- deferred: the page's helpers (pandas, matplotlib) load only when a page is drawn
    from mutransfer._reporting.html import figure_html, frame_table  # noqa: PLC0415 -- deferred: the page's helpers (pandas, matplotlib) load only when a page is drawn

    record = Verification.from_dict(v)
    frame = pd.DataFrame(v.get("records") or [])
    proxies = pd.DataFrame(v.get("proxy_records") or [])
    transfer = record.transfer_line()
    return (
        f'<section id="verification"><h2>Verification (--verify)</h2>'
        f"<p>{html.escape(record.summary_line())}</p>"
        + (f'<p class="verdict">{html.escape(transfer)}</p>' if transfer else "")
        + figure_html(
            figures.verification_curve(v),
            "Dashed: the transferred LR" + ("; dotted: the proxy on the same master LRs." if transfer else "."),
        )
        + (frame_table(frame, "verification-records") if not frame.empty else "")
        + (frame_table(proxies, "verification-proxy-records") if not proxies.empty else "")
        + "</section>"
    )


class Verify(Strategy):
    name = NAME
    report_key = "verification"
    flag = "--verify"
    cost_side = "check"  # a check of the transfer, not part of tuning: outside the ratios
    suggestion = (
        "trains the target around the transferred LR to measure whether its optimum is where the transfer put it"
    )

    def cost_hint(self, report: dict) -> str | None:
        """Its default grid (``--verify-points`` x ``--verify-seeds`` LRs and seeds, each at the target's and the
        proxy's size) in this study's measured training seconds."""
        c, trials = report.get("compute") or {}, (report.get("trials") or {}).get("total")
        target, proxies = c.get("target_trainer_seconds"), c.get("proxy_trainer_seconds")
        if not target or not proxies or not trials:
            return None
        n = VERIFY_POINTS * VERIFY_SEEDS
        seconds = n * (target + proxies / trials)
        return f"costs {n} target and {n} proxy trainings, about {seconds:.0f} s of training here ({seconds / target:.0f}x the target's)"

    def active(self, study: Prepared) -> bool:
        return bool(study.options.verify)

    def phases(self) -> tuple[Placement, ...]:
        return (Placement("log_model_phase", verify_phase),)

    def section(self, made: Made) -> dict | None:
        record = made.record(NAME, Verification)
        return record.as_dict() if record is not None else None

    def refine_gain(self, gain: dict, section: Any, best: TrialRecord) -> None:
        if section:
            seed_spread(gain, section, best)

    def text_lines(self, section: Any, report: dict) -> list[str]:
        return verification_lines(section)

    def verdict(self, section: Any, report: dict) -> str | None:
        text = section.get("target_verdict") or section.get("verdict")
        transfer = section.get("verdict") if section.get("target_verdict") else None
        return f"--verify: {transfer or text}"

    def html_section(self, section: Any) -> str:
        return verification_html(section)

    def metrics(self, section: Any, timestamp_ms: int) -> list[tuple]:
        return transfer_metrics(section, timestamp_ms)
