"""The ``alone`` marker (tests/conftest.py): on two pytest workers, a test marked ``alone`` runs while no other test
does; the same test unmarked overlaps the other worker's tests (the check can fail). And the order the two workers
take the files in (tests/xdist_order.py): the longest first, one file ahead, where xdist's own order differs."""

from __future__ import annotations

import json

import pytest

from tests.repo_paths import ROOT


def _windows(log: str) -> dict[str, tuple[float, float]]:
    spans: dict[str, list[float]] = {}
    for line in log.splitlines():
        name, _, at = line.split()
        spans.setdefault(name, []).append(float(at))
    return {name: (min(t), max(t)) for name, t in spans.items()}


def _project(pytester) -> None:
    """The suite's conftest and scheduler in a pytester folder (``tests/`` importable, as in the repository)."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.mkpydir("tests")
    (pytester.path / "tests" / "xdist_order.py").write_text((ROOT / "tests" / "xdist_order.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    alone: runs alone\n    slow: heavy\n")


_SPAN = """
import time

import pytest


def _span(name, seconds):
    with open({log!r}, "a") as f:
        f.write(f"{{name}} start {{time.time()}}\\n")
    time.sleep(seconds)
    with open({log!r}, "a") as f:
        f.write(f"{{name}} end {{time.time()}}\\n")
"""


def _run(pytester, marked: bool) -> tuple[tuple[float, float], dict[str, tuple[float, float]]]:
    """Two files on two workers: one with the (``alone``-marked) 4 s test and a 2 s test, one with four 2 s tests."""
    log = pytester.path / "log.txt"
    log.unlink(missing_ok=True)
    body = _SPAN.format(log=str(log))
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
    _project(pytester)
    alone, spans = _run(pytester, marked=True)
    assert _overlapping(alone, spans) == [], (alone, spans)
    alone, spans = _run(pytester, marked=False)
    assert _overlapping(alone, spans), (alone, spans)  # the other worker's tests ran meanwhile


@pytest.mark.slow  # two nested pytest runs on two workers each
def test_the_longest_files_go_out_first_one_file_ahead(pytester):
    """Four one-test files (``long1`` the longest by tests/slow_files.json, ``long4`` the shortest) and a file of six
    quick tests: ours starts ``long1`` and ``long2`` first and the later long files only as those end; xdist's own
    order (the most tests first, up to three files queued on a worker) starts ``long4`` before ``long2`` ends."""
    _project(pytester)
    log = pytester.path / "log.txt"
    body = _SPAN.format(log=str(log))
    files = {
        f"test_long{i}": body + f"\n\n@pytest.mark.slow\ndef test_long():\n    _span('long{i}', 1.5)\n"
        for i in (1, 2, 3, 4)
    }
    files["test_many"] = (
        body + "\n\n@pytest.mark.parametrize('i', range(6))\ndef test_many(i):\n    _span(f'many{i}', 0.1)\n"
    )
    pytester.makepyfile(**files)
    (pytester.path / "slow_files.json").write_text(json.dumps({f"test_long{i}.py": 10.0 - i for i in (1, 2, 3, 4)}))

    def order(*flags: str) -> dict[str, tuple[float, float]]:
        log.unlink(missing_ok=True)
        result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", *flags)
        result.assert_outcomes(passed=10)
        return _windows(log.read_text())

    ours = order()
    first = min(start for start, _ in ours.values())
    assert ours["long1"][0] - first < 1.0 and ours["long2"][0] - first < 1.0, ours  # both workers start long
    first_end = min(ours["long1"][1], ours["long2"][1])
    assert ours["long3"][0] >= first_end and ours["long4"][0] >= first_end, ours  # then a file as one ends

    theirs = order("--noconftest")  # xdist's own scheduler and order
    assert theirs["long4"][0] < theirs["long2"][1], theirs
