"""The ``alone`` marker (tests/conftest.py): on two pytest workers, a test marked ``alone`` runs while no other test
does; the same test unmarked overlaps the other worker's tests (the check can fail)."""

from __future__ import annotations

import pytest

from tests.repo_paths import ROOT


def _windows(log: str) -> dict[str, tuple[float, float]]:
    spans: dict[str, list[float]] = {}
    for line in log.splitlines():
        name, _, at = line.split()
        spans.setdefault(name, []).append(float(at))
    return {name: (min(t), max(t)) for name, t in spans.items()}


def _run(pytester, marked: bool) -> tuple[tuple[float, float], dict[str, tuple[float, float]]]:
    """Two files on two workers: one with the (``alone``-marked) 4 s test and a 2 s test, one with four 2 s tests."""
    log = pytester.path / "log.txt"
    log.unlink(missing_ok=True)
    body = f"""
import time

import pytest


def _span(name, seconds):
    with open({str(log)!r}, "a") as f:
        f.write(f"{{name}} start {{time.time()}}\\n")
    time.sleep(seconds)
    with open({str(log)!r}, "a") as f:
        f.write(f"{{name}} end {{time.time()}}\\n")
"""
    mark = "@pytest.mark.alone\n" if marked else ""
    pytester.makepyfile(
        test_one=body + f"\n\n{mark}def test_alone():\n    _span('alone', 4)\n\n\n"
        "def test_first():\n    _span('first', 2)\n",
        test_two=body + "\n\n@pytest.mark.parametrize('i', range(4))\ndef test_other(i):\n    _span(f'other{i}', 2)\n",
    )
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    spans = _windows(log.read_text())
    return spans.pop("alone"), spans


def _overlapping(alone: tuple[float, float], spans: dict[str, tuple[float, float]]) -> list[str]:
    return [name for name, (start, end) in spans.items() if start < alone[1] and end > alone[0]]


@pytest.mark.slow  # two nested pytest runs on two workers each
def test_a_test_marked_alone_overlaps_no_other_and_unmarked_it_does(pytester):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    alone: runs alone\n    slow: heavy\n")
    alone, spans = _run(pytester, marked=True)
    assert _overlapping(alone, spans) == [], (alone, spans)
    alone, spans = _run(pytester, marked=False)
    assert _overlapping(alone, spans), (alone, spans)  # the other worker's tests ran meanwhile
