"""The ``fresh_process`` marker (tests/conftest.py): the test body runs in a child pytest only, and the child's
failure or crash fails the test in the parent, which carries on."""

from __future__ import annotations

from tests.repo_paths import ROOT


def test_a_fresh_process_test_runs_in_a_child_and_its_crash_fails_it(pytester):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(
        test_marked="""
import os
import signal

import pytest


@pytest.mark.fresh_process
def test_runs_in_the_child():
    assert os.environ.get("MUTRANSFER_TEST_FRESH_PROCESS") == "1"  # fails if the parent ran the body


@pytest.mark.fresh_process
def test_crashes():
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.fresh_process
def test_fails():
    assert False, "the child's own failure"


@pytest.mark.fresh_process
def test_skips():
    pytest.skip("not here")


def test_after_the_crash():
    assert not os.environ.get("MUTRANSFER_TEST_FRESH_PROCESS")  # unmarked: the parent runs it
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=2, failed=2, skipped=1)
    result.stdout.fnmatch_lines(["*test_crashes in a fresh process: exit code -11*", "*the child's own failure*"])
    result.stdout.fnmatch_lines(["*skipped in a fresh process*"])


def test_a_test_that_writes_the_tracking_store_in_the_repository_fails(pytester):
    """The guard of tests/conftest.py: a test that leaves ./mlflow.db beside the repository's tests/ fails, naming
    the fix; one that writes in its tmp_path passes (the check can fail, and need not)."""
    pytester.mkdir("tests")
    (pytester.path / "tests" / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(
        **{
            "tests/test_writes": """
from pathlib import Path


def test_writes_in_the_root():
    (Path(__file__).resolve().parent.parent / "mlflow.db").write_text("")


def test_writes_in_tmp_path(tmp_path):
    (tmp_path / "mlflow.db").write_text("")
"""
        }
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*the repository's mlflow.db changed during this test*monkeypatch.chdir*"])
