"""One pandas row per proxy trial: ``mutransfer trials`` and the report page's trial table.

Columns: ``number`` (the trial's index in the search), ``trial_id``, ``status`` (completed | pruned |
diverged | failed), one column per searched hyperparameter (its value in the trial's configuration),
``epochs`` (epochs reached), ``best_error`` (lowest validation relative L2 over the trial's evaluations, from
its history.json; NaN when that file is missing), ``final_error`` (the last reported validation error, as in
state.json) and ``device_seconds`` (wall time x the devices the trial held).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from mutransfer._reporting.study_files import StudyFiles
from mutransfer.errors import UserInputError

FIXED_COLUMNS = ("number", "trial_id", "status")
RESULT_COLUMNS = ("epochs", "best_error", "final_error", "device_seconds")


def _nan(value) -> float:
    return math.nan if value is None else float(value)


def trials_frame(files: StudyFiles) -> pd.DataFrame:
    """The trials of ``files`` as a DataFrame (one row per trial, in search order)."""
    searched = list(files.search_space) or sorted({k for t in files.trials for k in t.config})
    rows = []
    for t in files.trials:
        history = files.histories.get(t.trial_id)
        best = min((r.test_error for r in history), default=None) if history else None
        rows.append(
            {
                "number": t.index,
                "trial_id": t.trial_id,
                "status": t.status,
                **{name: t.config.get(name) for name in searched},
                "epochs": t.epochs,
                "best_error": _nan(best),
                "final_error": _nan(t.val_error),
                "device_seconds": float(t.device_seconds),
            }
        )
    columns = [*FIXED_COLUMNS, *searched, *RESULT_COLUMNS]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values("number", kind="stable").reset_index(drop=True)


def sort_trials(frame: pd.DataFrame, column: str | None) -> pd.DataFrame:
    """``frame`` sorted by ``column`` (ascending, missing values last); one-line error naming the valid columns."""
    if column is None:
        return frame
    if column not in frame.columns:
        raise UserInputError(f"--sort {column!r} is not a column; use one of: {', '.join(frame.columns)}")
    return frame.sort_values(column, kind="stable", na_position="last").reset_index(drop=True)


def trials_records(frame: pd.DataFrame) -> list[dict]:
    """The rows as JSON-ready records (NaN -> None)."""
    clean = frame.astype(object).where(frame.notna(), None)
    return clean.to_dict(orient="records")


def _value_text(value: object) -> str:
    """A searched value in the table: a number to 4 significant digits, a name (a schedule) as it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value) if isinstance(value, str) else f"{value:.4g}"


def format_trials(frame: pd.DataFrame) -> str:
    """The table as aligned text (errors to 4 significant digits, seconds to 0.1)."""
    if frame.empty:
        return "no proxy trials recorded yet"
    formatters: dict[str, Callable[[object], str]] = {
        "best_error": "{:.4g}".format,
        "final_error": "{:.4g}".format,
        "device_seconds": "{:.1f}".format,
    }
    for name in frame.columns.difference([*FIXED_COLUMNS, *RESULT_COLUMNS]):
        formatters[name] = _value_text
    return frame.to_string(index=False, formatters=formatters, na_rep="-")
