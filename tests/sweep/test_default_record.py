"""The seeded default study trains what it trained before the sweep's internals changed: the same proxy trials (keys,
statuses, configurations), validation errors within 1e-3 relative, the same winner, the same transferred
hyperparameters and a target test error within 1e-3 relative, against the record made at the commit before
(``tests/fixtures/default_study_record.json``, written by ``tests/fixtures/make_default_record.py``).

Measured when the record was made: the run at the commit after the change gave every number bit for bit. The
tolerance leaves room for another CPU's float32 sums; the configurations, drawn from the study's seeds before any
result (all 8 trials in one window), must be equal.
"""

from __future__ import annotations

import copy
import json
import math

import pytest

from tests.fixtures.make_default_record import RECORD, record_of, run_default_study

RELATIVE = 1e-3


def differences(expected: dict, got: dict) -> list[str]:
    """What ``got`` (a record) changes from ``expected``, one line each ([]: the same study)."""
    out = []
    keys = [t["trial_id"] for t in expected["trials"]], [t["trial_id"] for t in got["trials"]]
    if keys[0] != keys[1]:
        return [f"trials {keys[0]} became {keys[1]}"]
    for e, g in zip(expected["trials"], got["trials"], strict=True):
        for field in ("status", "config"):
            if e[field] != g[field]:
                out.append(f"{e['trial_id']}: {field} {e[field]} became {g[field]}")
        if not _close(e["val_error"], g["val_error"]):
            out.append(f"{e['trial_id']}: val_error {e['val_error']} became {g['val_error']}")
    if expected["best"] != got["best"]:
        out.append(f"best trial {expected['best']} became {got['best']}")
    if expected["target_hyperparameters"] != got["target_hyperparameters"]:
        out.append(
            f"target hyperparameters {expected['target_hyperparameters']} became {got['target_hyperparameters']}"
        )
    if not _close(expected["target_test_error"], got["target_test_error"]):
        out.append(f"target test error {expected['target_test_error']} became {got['target_test_error']}")
    return out


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=RELATIVE)


def test_the_comparison_names_each_change_and_passes_the_record_itself():
    record = json.loads(RECORD.read_text())
    assert differences(record, record) == []
    changed = copy.deepcopy(record)
    changed["trials"][2]["config"]["lr"] *= 1.0001
    changed["trials"][3]["val_error"] *= 1.01
    changed["best"] = "t0007"
    changed["target_test_error"] *= 0.99
    found = differences(record, changed)
    assert [line.split(":")[0].split(" ")[0] for line in found] == ["t0002", "t0003", "best", "target"], found
    assert differences(record, {**record, "trials": record["trials"][:-1]})[0].startswith("trials [")


@pytest.mark.slow
def test_the_seeded_default_study_trains_what_it_trained_before(tmp_path):
    expected = json.loads(RECORD.read_text())
    got = record_of(run_default_study(tmp_path))
    assert differences(expected, got) == [], f"against the record of {expected['commit']}"
