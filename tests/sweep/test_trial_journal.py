"""The trials' Optuna journal (mutransfer.sweep._trial_journal): a refused write is an OSError naming the journal."""

from __future__ import annotations

import errno
import subprocess

import pytest
from optuna.distributions import FloatDistribution

from mutransfer.cli.main import UNWRITABLE
from mutransfer.sweep._trial_journal import TrialJournal, _refused_writes

SPACE = {"lr": FloatDistribution(1e-4, 1e-1, log=True)}


def test_optunas_refused_lock_release_becomes_the_os_error_naming_the_journal(tmp_path):
    """Optuna's lock turns a refused rename into RuntimeError("did not possess lock"): that was a traceback."""
    path = tmp_path / "optuna.journal"
    with pytest.raises(OSError) as refused:
        with _refused_writes(path):
            try:
                raise PermissionError(errno.EPERM, "Operation not permitted", str(path) + ".lock")
            except OSError:
                raise RuntimeError("Error: did not possess lock") from None
    assert refused.value.errno in UNWRITABLE and refused.value.filename == str(path)
    with pytest.raises(RuntimeError, match="unrelated"):  # anything else passes as it is
        with _refused_writes(path):
            raise RuntimeError("unrelated")


def test_a_journal_in_a_folder_that_refuses_writes_raises_an_os_error_naming_it(tmp_path):
    folder = tmp_path / "study"
    folder.mkdir()
    journal = TrialJournal(folder / "optuna.journal", "s", SPACE)
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False).returncode != 0:
        pytest.skip("no immutable flag here (chattr +i)")
    try:
        with pytest.raises(OSError) as refused:
            journal.handed_out(0, "t0000", {"lr": 1e-3})
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert refused.value.errno in UNWRITABLE and refused.value.filename == str(folder / "optuna.journal")
    journal.handed_out(0, "t0000", {"lr": 1e-3})  # writable again: the same call goes through
    journal.finished(0, "t0000", {"lr": 1e-3}, "completed", 0.5, [(1, 0.7), (2, 0.5)])
    (trial,) = journal.study.get_trials()
    assert trial.value == 0.5 and trial.intermediate_values == {1: 0.7, 2: 0.5}
