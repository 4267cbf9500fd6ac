"""The report phase: the transfer report (JSON, text, plot), its MLflow logging, and the study marked done.

The report is built once from the phases' records (mutransfer._sweep.report.build_report),
written into the study directory, logged on the MLflow parent run with the study's
summary metrics, and kept in ``state.json`` so that resuming a completed study prints it.
It is kept in ``state.json`` before it is written and logged, so a driver killed in this
phase resumes with the same report and logs each of its values once.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

from mutransfer._study_folder.state import write_atomic
from mutransfer._sweep import strategies
from mutransfer._sweep._memo import Memo, remembered
from mutransfer._sweep.context import COST_KEY, K_RULE_KEY
from mutransfer._sweep.holds import hold_if_asked
from mutransfer._sweep.repeat import repeat_command
from mutransfer._sweep.report import build_report, format_report, plot_trials
from mutransfer._sweep.session import Made, Session
from mutransfer._tracking.runs import log_batch
from mutransfer._tracking.views import VERDICT_TAG

#: the longest run tag value MLflow stores (mlflow.utils.validation.MAX_TAG_VAL_LENGTH)
MAX_TAG_CHARS = 8000


#: state.json's key of the study's report
REPORT_KEY = "report"


def write_report(session: Session, made: Made) -> Made:
    """Build, store and log the report; ``made`` with it (``made.report``), the study's phase set to done."""

    study, proxies, wall = session.study, made.proxies, session.wall_seconds
    # built once for the study's target: a session killed before it marked the study done left the same report
    inputs = {"target_run_id": made.target_run_id, "best": proxies.best.trial_id}
    report = remembered(session, Memo(REPORT_KEY, dict, dict), inputs, lambda: _build(session, made, wall))
    root = session.study_dir.root
    write_atomic(root / "report.json", json.dumps(report, indent=2, default=str))
    write_atomic(root / "report.txt", format_report(report) + "\n")
    plot_trials(
        proxies.trials,
        root / "proxy_trials.png",
        searched_lr="lr" in study.search_space,
        title=f"{study.name}: proxies, {study.model_text(False)}",
    )
    _write_page(session)
    _log(session, made, report, wall)
    hold_if_asked(root, "report_logged")  # fault tests only (MUTRANSFER_HOLD_AT)
    session.update_state(phase="done", report=report, wall_seconds=wall)
    return replace(made, report=report)


def _build(session: Session, made: Made, wall: float) -> dict:
    study, proxies = session.study, made.proxies
    report = build_report(
        study=study,
        trials=proxies.trials,
        best=proxies.best,
        transfer=made.transfer.record,
        target_hp=made.transfer.hp,
        target=made.target,
        target_run_id=made.target_run_id,
        proxy_device="gpu" if study.resources.gpus_per_trial > 0 else "cpu",
        wall_seconds=wall,
        mlflow={
            "tracking_uri": session.tracking_uri,
            "experiment_id": session.experiment_id,
            "parent_run_id": session.parent_id,
            "target_run_id": made.target_run_id,
        },
        study_dir=str(session.study_dir.root),
        overrides=[o.describe() for o in session.overrides],
        k_rule=session.state.get(K_RULE_KEY),
        cost_estimate=session.state.get(COST_KEY),
        bookings=session.executor.ledger.bookings(),  # every training the study ran (mutransfer._sweep._ledger)
        **strategies.sections(made),  # each search strategy's section (mutransfer._sweep.strategies)
        phases={
            "setup_seconds": session.setup_seconds,
            "proxy_phase_seconds": proxies.seconds,
            "concurrency": proxies.concurrency,
            "input_shape": list(session.data.train_x.shape[1:]),
            "prior_wall": session.prior_wall,  # earlier sessions' wall time (a resumed study)
            "coord_check": bool(session.options.coord_check),  # a phase of its own in the wall time
        },
    )
    report["model"] = session.state.get("model")  # mutransfer._sweep.model_log: the target as an MLflow model
    report["command"] = repeat_command(
        session.options, session.study.resources.executor
    )  # the summary's next commands paste as printed
    report["coord_check"] = session.state.get("coord_check")  # sweep --coord-check: reported, never blocking
    report["search_summary"] = session.state.get("search_summary")  # a population executor's: who trained together
    return report


def _write_page(session: Session) -> None:
    """The HTML report (mutransfer._reporting.html) in the study folder, logged on the parent run."""
    from mutransfer._reporting.html import write_study_page  # noqa: PLC0415 -- deferred: pandas + reporting load ~0.5-1 s; only a drawn page needs them, not `import mutransfer._sweep`

    page = write_study_page(
        session.study_dir.root, session.say, sections=lambda files: strategies.html_sections(files.report, files.state)
    )
    if page is not None:
        session.tracker.client.log_artifact(session.parent_id, str(page), "report")


def _log(session: Session, made: Made, report: dict, wall: float) -> None:
    c, best, record = report["compute"], made.proxies.best, made.transfer.record
    now = int(time.time() * 1000)
    metrics = [
        ("best_proxy_val_error", best.val_error, now, 0),
        ("target_test_error", made.target.test_error, now, 0),
        ("proxy_device_seconds", c["proxy_device_seconds"], now, 0),
        ("target_device_seconds", c["target_device_seconds"], now, 0),
        ("proxy_trainer_seconds", c["proxy_trainer_seconds"], now, 0),
        ("target_trainer_seconds", c["target_trainer_seconds"], now, 0),
        ("sweep_wall_seconds", wall, now, 0),
        ("trials_total", report["trials"]["total"], now, 0),
        *[(f"trials_{k}", report["trials"][k], now, 0) for k in ("completed", "pruned", "diverged", "failed")],
        *[
            (key, c[key], now, 0)
            for key in (
                "proxy_flops",
                "target_flops",
                "direct_sweep_flops",
                "mutransfer_vs_direct_flops",
                "mutransfer_vs_direct_training_seconds",
                "mutransfer_vs_direct_wall_seconds",
            )
            if c.get(key) is not None
        ],
        *strategies.metrics(report, now),  # e.g. the ladder's rungs, top-k's candidates
    ]
    params = {
        "transfer.lr_factor": record["lr_factor"],
        "transfer.init_variance_factor": record["init_variance_factor"],
        "best_trial_id": best.trial_id,
    }
    params.update({f"best.{k}": v for k, v in best.config.items()})
    tracker, parent = session.tracker, session.parent_id
    logged = tracker.client.get_run(parent).data  # a resumed report phase logs each value once
    metrics = [m for m in metrics if m[0] not in logged.metrics]
    params = {k: v for k, v in params.items() if k not in logged.params}
    verdict = "; ".join(report.get("verdict") or [])[:MAX_TAG_CHARS]  # the studies' view shows it (tracking.views)
    tags = {"mutransfer.status": "done", VERDICT_TAG: verdict}
    log_batch(tracker.client, parent, metrics=metrics, params=params, tags=tags)
    gain = (report.get("proxy_to_target") or {}).get("gain")  # the target's own proxy (with --top-k: the winner's)
    if gain is not None and "proxy_to_target_gain" not in logged.metrics:
        log_batch(tracker.client, parent, metrics=[("proxy_to_target_gain", gain, now, 0)])
    for name in ("report.json", "report.txt", "proxy_trials.png"):
        tracker.client.log_artifact(parent, str(session.study_dir.root / name), "report")
    tracker.set_status(parent, "FINISHED")
