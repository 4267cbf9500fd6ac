"""The trials' Optuna journal (mutransfer._sweep._trial_journal): a refused write is an OSError naming the journal."""

from __future__ import annotations

import errno
import subprocess

import pytest
from optuna.distributions import FloatDistribution

from mutransfer._sweep._journal_file import refused_writes as _refused_writes
from mutransfer._sweep._trial_journal import TrialJournal
from mutransfer.cli.main import UNWRITABLE

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
    journal.finished(0, "t0000", {"lr": 1e-3}, "completed", 0.5, [(1, 0.7), (2, 0.5)], {"val_error": 0.5})
    (trial,) = journal.study.get_trials()
    assert trial.value == 0.5 and trial.intermediate_values == {1: 0.7, 2: 0.5}


def test_a_value_outside_its_distribution_is_widened_or_kept_as_an_attribute_never_refused(tmp_path):
    """A warm-started trial from another study's space: a float range widens to hold it; a choice not in the list, a
    log range that would reach 0 or an integer off its step cannot, and is kept as ``param.<name>`` (Optuna refused
    such a parameter with a traceback before)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    space = {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "wd": FloatDistribution(0.0, 0.1),
        "batch_size": CategoricalDistribution([16, 32]),
        "layers": IntDistribution(2, 8, step=2),
    }
    journal = TrialJournal(tmp_path / "optuna.journal", "s", space)
    journal.finished(0, "t0000", {"lr": 0.5, "wd": 0.3, "batch_size": 64, "layers": 3}, "completed", 0.4, [], {})
    journal.finished(1, "t0001", {"lr": 0.0, "wd": 0.05, "batch_size": 16, "layers": 10}, "completed", 0.3, [], {})
    first, second = journal.study.get_trials()
    assert first.params == {"lr": 0.5, "wd": 0.3} and first.distributions["lr"].high == 0.5
    assert first.user_attrs["param.batch_size"] == 64 and first.user_attrs["param.layers"] == 3
    assert second.params == {"wd": 0.05, "batch_size": 16, "layers": 10} and second.user_attrs["param.lr"] == 0.0
    assert journal.study.best_trial.number == 1
