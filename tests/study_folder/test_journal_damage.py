"""A damaged Optuna journal (``optuna.journal``, the search's one store of its trials; found by the study-folder fuzz:
a journal cut short was an ``AssertionError`` traceback inside Optuna on `sweep --resume`, after Optuna had appended
to it). A last write cut short (a driver killed during it) is set aside (``optuna.journal.cut``) by the next process
that writes, and the study goes on; any other damage is refused in one line before anything is written to it, by
every reader: `sweep --resume`, ``Study.optuna_study``, `mutransfer dashboard`; restored from a copy, the study goes
on. A missing journal is refused: the trial folders keep checkpoints only."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from mutransfer.cli.main import main
from tests.journal_helpers import set_trial_attr
from tests.sweep_helpers import IN_PROCESS, write_tiny_data, write_tiny_study

pytestmark = pytest.mark.slow  # one small in-process study (about 10 s)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("journal")
    study = write_tiny_study(root, write_tiny_data(root / "tiny.h5"), name="jn", trials=2)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    assert (
        main(["sweep", "--study", str(study), "--runs-dir", str(root / "runs"), "--tracking-uri", uri, *IN_PROCESS])
        == 0
    )
    return root


def _journal_trials(path: Path) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    return optuna.load_study(study_name="jn", storage=storage).trials


def _trials(path: Path) -> list[tuple[int, dict, float | None]]:
    return [(t.number, t.params, t.value) for t in _journal_trials(path)]


def _set_back_to_proxies(root: Path) -> None:
    """The study's state set back to its proxies, so that a resume reads every trial from the journal again."""
    state = root / "runs" / "jn" / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "phase": "proxies"}))


DAMAGE = {
    "a line that is not an entry": (lambda data: data + b"[1, 2]\n", "is not an Optuna journal entry"),
    "bytes": (lambda data: b"\x80\x81\n" + data, "line 1 is not an Optuna journal entry"),
}


def _reopened(finished: Path, tmp_path: Path) -> tuple[Path, Path, bytes, list]:
    """A copy of the finished study, its state set back to its proxies so that a resume reads every trial from the
    journal again: (its root, its journal, the journal's bytes, its trials)."""
    import shutil

    shutil.copytree(finished, tmp_path / "copy")
    root = tmp_path / "copy"
    _set_back_to_proxies(root)
    journal = root / "runs" / "jn" / "optuna.journal"
    return root, journal, journal.read_bytes(), _trials(journal)


def test_a_damaged_journal_is_one_line_and_goes_on_once_restored(finished, tmp_path, capsys):
    import mutransfer as mt

    root, journal, whole, before = _reopened(finished, tmp_path)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    resume = ["sweep", "--resume", "--name", "jn", "--runs-dir", str(root / "runs"), "--tracking-uri", uri]
    capsys.readouterr()
    for case, (damage, said) in DAMAGE.items():
        journal.write_bytes(damaged := damage(whole))
        assert main([*resume, *IN_PROCESS]) == 2, case
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err and "restore it from a copy" in err, (case, err)
        assert journal.read_bytes() == damaged, case  # nothing appended
        with mt.load_study("jn", storage=root / "runs", executor="inprocess") as study:
            with pytest.raises(mt.UserInputError, match=said):
                study.optuna_study  # noqa: B018
        assert main(["dashboard", "jn", "--runs-dir", str(root / "runs")]) == 2, case
        assert said in capsys.readouterr().err, case

    journal.unlink()  # the trials' one store gone: refused, not a search started again
    assert main([*resume, *IN_PROCESS]) == 2
    assert "optuna.journal is missing, and it alone holds the trials of" in capsys.readouterr().err
    journal.write_bytes(whole)  # restored from a copy
    assert main([*resume, *IN_PROCESS]) == 0
    assert _trials(journal) == before  # the same trials, numbers, parameters and values
    assert json.loads((root / "runs" / "jn" / "state.json").read_text())["phase"] == "done"


def test_a_write_cut_short_is_set_aside_and_the_trial_it_ended_goes_on(finished, tmp_path, capsys):
    """The journal's last entry cut short, as a driver killed while it wrote the last trial's end leaves it: the
    resume sets the bytes aside (optuna.journal.cut), the trial is running again as the journal now holds it, and
    continues from its checkpoint; the study ends with the same trials and parameters."""
    root, journal, whole, before = _reopened(finished, tmp_path)
    ends = [n for n, line in enumerate(whole.splitlines()) if json.loads(line)["op_code"] == 6]
    last_end = whole.splitlines()[ends[-1]]
    cut = b"\n".join(whole.splitlines()[: ends[-1]]) + b"\n" + last_end[:-9]  # the last trial's end, cut short
    journal.write_bytes(cut)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    resume = ["sweep", "--resume", "--name", "jn", "--runs-dir", str(root / "runs"), "--tracking-uri", uri]
    assert main([*resume, *IN_PROCESS]) == 0, capsys.readouterr().err
    assert journal.with_name("optuna.journal.cut").read_bytes() == last_end[:-9] + b"\n"
    assert journal.read_bytes().startswith(cut[: cut.rindex(b"\n") + 1])
    assert [(n, p) for n, p, _v in _trials(journal)] == [(n, p) for n, p, _v in before]
    assert all(v is not None for _n, _p, v in _trials(journal))


def test_a_lock_another_process_holds_on_the_journal_is_waited_for_not_broken(tmp_path):
    """A process writing the journal (an enqueue_trial, the dashboard) holds Optuna's lock for milliseconds: a driver
    starting then waits for it to be released (here after 0.3 s) rather than breaking it under the writer."""
    import threading
    import time

    from mutransfer._sweep._trial_journal import TrialJournal

    journal = tmp_path / "optuna.journal"
    lock = journal.with_name("optuna.journal.lock")
    lock.symlink_to(journal)
    released: list[BaseException | None] = []

    def writer() -> None:
        time.sleep(0.3)
        try:
            lock.unlink()  # the writer releases its own lock: FileNotFoundError had the driver broken it
            released.append(None)
        except BaseException as exc:  # noqa: BLE001 -- reported to the test below
            released.append(exc)

    thread = threading.Thread(target=writer)
    start = time.monotonic()
    thread.start()
    TrialJournal(journal, "s", {})
    thread.join()
    assert released == [None] and time.monotonic() - start >= 0.3


def test_the_lock_a_killed_driver_leaves_on_the_journal_is_not_refused_and_is_removed_by_the_next_driver(
    finished, tmp_path, capsys
):
    """Optuna locks the journal for each write with a symbolic link (``optuna.journal.lock``, pointing to the
    journal). A driver killed during a write leaves it (found by the full suite: a kill during the proxies, then
    `--resume` refused "optuna.journal.lock is a symbolic link"). Every command reads the folder with it; the next
    driver's journal removes it and writes (Optuna alone would wait 30 s before breaking it). Any other link is still
    refused (tests/study_folder/test_state_shapes.py)."""
    import shutil

    from mutransfer._sweep._trial_journal import TrialJournal

    shutil.copytree(finished, tmp_path / "copy")
    root = tmp_path / "copy"
    journal = root / "runs" / "jn" / "optuna.journal"
    lock = journal.with_name("optuna.journal.lock")
    lock.symlink_to(journal)  # as Optuna's JournalFileSymlinkLock makes it
    before = _trials(journal)
    capsys.readouterr()
    assert main(["trials", "jn", "--runs-dir", str(root / "runs")]) == 0
    assert "symbolic link" not in capsys.readouterr().err
    TrialJournal(journal, "jn", {}).study.set_user_attr("written", True)  # the next driver writes
    assert not lock.exists() and not lock.is_symlink()
    assert _trials(journal) == before
    (root / "runs" / "jn" / "report.json").rename(root / "report.json")
    (root / "runs" / "jn" / "report.json").symlink_to(root / "report.json")
    assert main(["trials", "jn", "--runs-dir", str(root / "runs")]) == 2
    assert "report.json is a symbolic link" in capsys.readouterr().err


def test_a_folder_in_place_of_the_journals_lock_is_one_line(tmp_path):
    """A folder named ``optuna.journal.lock`` would make Optuna wait for its lock, then fail to break it: refused in
    one line naming it, before the journal is opened; a plain file there (a stale lock of another kind) is removed."""
    from mutransfer._sweep._trial_journal import TrialJournal
    from mutransfer.errors import UserInputError

    journal = tmp_path / "optuna.journal"
    (tmp_path / "optuna.journal.lock").mkdir()
    with pytest.raises(UserInputError, match=r"optuna\.journal\.lock is not Optuna's lock \(a symbolic link\); move"):
        TrialJournal(journal, "s", {})
    assert not journal.exists()
    (tmp_path / "optuna.journal.lock").rmdir()
    (tmp_path / "optuna.journal.lock").write_text("")
    TrialJournal(journal, "s", {}).study.set_user_attr("written", True)
    assert not (tmp_path / "optuna.journal.lock").exists() and journal.is_file()


def test_a_lost_journal_is_rebuilt_from_the_studys_mlflow_runs(tmp_path, capsys):
    """The journal deleted, or damaged inside: `--resume --rebuild-state` writes it again from the trials' MLflow runs
    (the same trials, numbers, parameters, values and evaluations; a damaged one kept as optuna.journal.damaged) and
    the study ends as before. A store that holds none of the study's runs is refused in one line, nothing written;
    so is the folder moved elsewhere (its runs were made for the folder where it ran)."""
    import shutil

    root = tmp_path / "own"  # a study of its own: the runs name the folder they were made for
    study = write_tiny_study(root, write_tiny_data(root / "tiny.h5"), name="jn", trials=2)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    made = ["sweep", "--study", str(study), "--runs-dir", str(root / "runs"), "--tracking-uri", uri, *IN_PROCESS]
    assert main(made) == 0
    _set_back_to_proxies(root)
    journal = root / "runs" / "jn" / "optuna.journal"
    before = _trials(journal)
    values = {t.number: t.intermediate_values for t in _journal_trials(journal)}
    resume = ["sweep", "--resume", "--name", "jn", "--runs-dir", str(root / "runs"), *IN_PROCESS]
    journal.unlink()
    shutil.copytree(root / "runs", root / "moved")  # the data where its study.yaml finds it (../../tiny.h5)
    capsys.readouterr()
    for store, runs in ((f"sqlite:///{root / 'other.db'}", root / "runs"), (uri, root / "moved")):
        assert main([*resume, "--runs-dir", str(runs), "--tracking-uri", store, "--rebuild-state"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "holds no MLflow parent run made for" in err, err
    assert not journal.exists() and not (root / "other.db").exists()
    assert main([*resume, "--tracking-uri", uri, "--rebuild-state"]) == 0, capsys.readouterr().err
    assert "rebuilt" in capsys.readouterr().err and _trials(journal) == before
    assert {t.number: t.intermediate_values for t in _journal_trials(journal)} == values
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([*lines[:2], b"{not json", *lines[2:]]))  # damaged inside
    _set_back_to_proxies(root)
    assert main([*resume, "--tracking-uri", uri]) == 2
    assert "rebuild it from the study's MLflow runs" in capsys.readouterr().err
    assert main([*resume, "--tracking-uri", uri, "--rebuild-state"]) == 0, capsys.readouterr().err
    assert _trials(journal) == before and (journal.with_name("optuna.journal.damaged")).exists()
    set_trial_attr(root / "runs" / "jn" / "trials", "jn", 0, "mutransfer.trial_id", None)  # a gap: t0001 without t0000
    _set_back_to_proxies(root)
    assert main([*resume, "--tracking-uri", uri]) == 2
    assert "holds trial t0001 but not t0000 before it" in capsys.readouterr().err
    assert main([*resume, "--tracking-uri", uri, "--rebuild-state"]) == 0, capsys.readouterr().err
    assert _trials(journal) == before
