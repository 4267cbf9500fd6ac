"""A study folder that turns unwritable while the sweep runs (edge case 6 of "A team deployment"): before, a
234-line traceback from the proxies' bookkeeping (plan.record -> write_atomic); now one line naming the folder,
exit 2, and `--resume` finishes the study once the folder is writable again.

Unwritable for real: ``chattr +i`` (the tests run as root, whom permissions do not stop; an immutable folder
refuses root too). Skipped where the file system has no immutable flag.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.sweep_helpers import IN_PROCESS, write_tiny_study

pytestmark = pytest.mark.slow


def _immutable(path, on: bool) -> bool:
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True, check=False)
    return done.returncode == 0


def _sweep(cwd, study, *extra, wait=True):
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    # in process: the writes that fail are the driver's, whichever executor trains
    args = [
        sys.executable,
        "-m",
        "mutransfer",
        "sweep",
        "--study",
        str(study),
        "--runs-dir",
        "runs",
        *IN_PROCESS,
        *extra,
    ]
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc.communicate(timeout=900) + (proc.returncode,) if wait else proc


def test_a_runs_folder_that_refuses_writes_is_one_line_naming_it(tmp_path, tiny_data):
    study = write_tiny_study(tmp_path, tiny_data, name="ro", trials=1, epochs=1, target_epochs=1)
    runs = tmp_path / "runs"
    runs.mkdir()
    if not _immutable(runs, True):
        pytest.skip("no immutable flag here (chattr +i)")
    try:
        _out, err, rc = _sweep(tmp_path, study)
    finally:
        _immutable(runs, False)
    lines = err.strip().splitlines()
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    # refused before any training: the flag named, with its fix
    assert lines[-1].startswith("mutransfer sweep: error: --runs-dir runs: cannot write in runs"), lines[-1]
    assert lines[-1].endswith("choose another --runs-dir") and len(lines) == 1, err
    assert not any(runs.iterdir())


def test_a_study_folder_that_turns_unwritable_during_the_proxies(tmp_path, tiny_data):
    """The study folder is made immutable once the first trial has started: the driver's next write there fails
    as one line; made writable again, --resume completes the study with every trial."""
    study = write_tiny_study(tmp_path, tiny_data, name="ro", trials=4, epochs=6, grace=6, max_concurrent=1)
    folder = tmp_path / "runs" / "ro"
    proc = _sweep(tmp_path, study, wait=False)
    try:
        deadline = time.time() + 300
        while not (folder / "trials").is_dir() or not any((folder / "trials").iterdir()):
            assert proc.poll() is None and time.time() < deadline, "no trial started"
            time.sleep(0.2)
        if not _immutable(folder, True):
            proc.kill()
            pytest.skip("no immutable flag here (chattr +i)")
        _out, err = proc.communicate(timeout=900)
    finally:
        _immutable(folder, False)
    assert proc.returncode == 2 and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(f"mutransfer sweep: error: cannot write in {folder}")
    out, err, rc = _sweep(tmp_path, study, "--resume", "--json")
    assert rc == 0, err[-2000:]
    import json

    report = json.loads(out)
    assert report["trials"]["total"] == 4 and report["target"]["status"] == "completed"
