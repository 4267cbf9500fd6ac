"""The studies in a tracking store: the ``mutransfer studies`` table and the ``mutransfer ui`` helpers."""

from __future__ import annotations

from mutransfer._tracking._sqlite_file import sqlite_path
from mutransfer._tracking.runs import KIND_TAG, STATUS_TAG, STUDY_TAG, _client
from mutransfer.errors import UserInputError


def list_studies(uri: str) -> list[dict]:
    """One row per study parent run in the store, newest first."""
    path = sqlite_path(uri)
    if path is not None and not path.exists():
        raise UserInputError(
            f"tracking store {path} not found; run `mutransfer sweep` in this directory first or pass --tracking-uri"
        )
    client = _client(uri)
    experiments = client.search_experiments()
    if not experiments:
        return []
    ids = [e.experiment_id for e in experiments]
    names = {e.experiment_id: e.name for e in experiments}
    runs = client.search_runs(
        ids, filter_string=f"tags.`{KIND_TAG}` = 'study'", max_results=1000, order_by=["attributes.start_time DESC"]
    )
    rows = []
    for run in runs:
        p, m, t = run.data.params, run.data.metrics, run.data.tags
        rows.append(
            {
                "study": t.get(STUDY_TAG, run.info.run_name),
                "status": t.get(STATUS_TAG, run.info.status.lower()),
                "problem": p.get("problem"),
                "proxy_K": _int(p.get("proxy_K")),
                "target_K": _int(p.get("target_K")),
                "operator": p.get("operator") or "fno",
                "proxy_width": _int(p.get("proxy_width", p.get("width"))),
                "target_width": _int(p.get("target_width")),
                "best_proxy_error": m.get("best_proxy_val_error", m.get("best_proxy_test_error")),
                "target_error": m.get("target_test_error"),
                "proxy_device_seconds": m.get("proxy_device_seconds"),
                "target_device_seconds": m.get("target_device_seconds"),
                "device": p.get("device_kind") or t.get("mutransfer.device_kind"),
                "trials": _int(m.get("trials_total")),
                "experiment": names.get(run.info.experiment_id),
                "experiment_id": run.info.experiment_id,
                "run_id": run.info.run_id,
                "started": run.info.start_time,
            }
        )
    return rows


def _int(value) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def format_studies(rows: list[dict]) -> str:
    if not rows:
        return "no studies recorded yet; run `mutransfer sweep`"

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    def widths_text(r):
        w0, w1 = r.get("proxy_width"), r.get("target_width")
        if w0 is None:
            return "-"
        return str(w0) if w1 in (None, w0) else f"{w0}->{w1}"

    table = [
        (
            "study",
            "status",
            "problem",
            "proxy K",
            "target K",
            "operator",
            "width",
            "best proxy err",
            "target err",
            "cost proxy/target (device-s)",
        )
    ]
    for r in rows:
        cost = "-"
        if r["proxy_device_seconds"] is not None or r["target_device_seconds"] is not None:
            cost = f"{num(r['proxy_device_seconds'], '.0f')} / {num(r['target_device_seconds'], '.0f')} {r.get('device') or ''}".rstrip()
        table.append(
            (
                str(r["study"]),
                str(r["status"]),
                str(r["problem"] or "-"),
                num(r["proxy_K"], "d"),
                num(r["target_K"], "d"),
                str(r.get("operator") or "fno"),
                widths_text(r),
                num(r["best_proxy_error"], ".4g"),
                num(r["target_error"], ".4g"),
                cost,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


# --------------------------------------------------------------------------- UI


def study_to_show(
    uri: str, experiment: str | None = None, rows: list[dict] | None = None
) -> tuple[str | None, dict | None]:
    """(experiment id, newest study row in it) for ``mutransfer ui``: ``experiment`` by name, else the newest study's.

    The row is None when the experiment holds no study; the id is None when the store holds none. ``rows``: the
    store's :func:`list_studies`, where the caller has them already.
    """
    rows = list_studies(uri) if rows is None else rows
    if experiment is None:
        return (rows[0]["experiment_id"], rows[0]) if rows else (None, None)
    exp = _client(uri).get_experiment_by_name(experiment)
    if exp is None:
        raise UserInputError(f"--experiment {experiment!r}: no such MLflow experiment in {uri}; check the name")
    mine = [r for r in rows if r["experiment_id"] == exp.experiment_id]
    return exp.experiment_id, (mine[0] if mine else None)
