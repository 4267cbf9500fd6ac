"""Hostile or careless inputs found by the attack run of issue "Nothing lost" (finding 5): each is now one line and
exit 2, before anything is made, where it was a traceback, a hang or a stray file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mutransfer.cli.main import main
from tests.repo_paths import ROOT


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "argv", [["data", "inspect", "fifo.h5"], ["train", "--problem", "burgers", "--data", "fifo.h5"]]
)
def test_a_fifo_as_the_data_file_is_refused_not_waited_on(tmp_path, argv):
    os.mkfifo(tmp_path / "fifo.h5")  # nothing ever writes it: reading it would wait for ever
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUTRANSFER_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "mutransfer", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().endswith(
        "fifo.h5 is not a regular file (a FIFO, a device or a socket); pass a data file"
    )


def test_a_study_nested_thousands_deep_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.yaml").write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    assert main(["sweep", "--study", "deep.yaml"]) == 2
    assert "study deep.yaml: nested too deeply to read" in _one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.yaml"]


@pytest.mark.parametrize(
    "uri,expected",
    [
        ("sqlite:///:memory:", "an in-memory store ends with the command and keeps nothing"),
        ("./runs-folder", "a folder store, which MLflow no longer writes; use a database file, e.g. sqlite:///"),
        ("file:///tmp/mlruns-here", "a folder store, which MLflow no longer writes"),
        ("--help", "looks like a flag, not a URI"),
    ],
)
@pytest.mark.parametrize("command", [["sweep"], ["studies"], ["ui"]])
def test_tracking_uris_mlflow_cannot_keep_are_refused(tmp_path, monkeypatch, capsys, uri, expected, command):
    monkeypatch.chdir(tmp_path)
    assert main([*command, f"--tracking-uri={uri}"]) == 2
    assert expected in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []  # no ":memory:" file, no folder store, no study folder


@pytest.mark.parametrize("command", [["data", "inspect"], ["evaluate", "nosuch", "--data"], ["sweep", "--study"]])
def test_a_message_about_a_wrong_file_shows_none_of_its_contents(tmp_path, monkeypatch, capsys, command):
    """`sweep --study /etc/passwd` (found by the attack re-run) echoed the file's first 1.4 KB: a study file that is
    text is told by its length only."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shadow").write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    (tmp_path / "blob.h5").write_bytes(b"\x00\x01SECRET\xff" * 10)
    for name, kind in (("shadow", "text"), ("blob.h5", "binary data")):
        assert main([*command, name]) == 2
        err = _one_line(capsys)
        assert "SECRET" not in err and "root" not in err, err
        if command[0] == "data":
            assert f"bytes of {kind}" in err, err


def test_evaluate_against_a_dead_tracking_server_says_so_at_once(tmp_path):
    """MLflow's client retries a dead server for minutes (274 s in the attack run): the command checks it first."""
    from tests.team_store import free_port

    port = free_port()  # nothing listens on it
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "mutransfer", "evaluate", "runs:/abc/model", "--data", "d.h5"]
        + ["--tracking-uri", f"http://127.0.0.1:{port}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"http://127.0.0.1:{port}: no answer (connection refused); start the tracking server" in proc.stderr


def test_evaluate_against_a_server_that_never_answers_says_so_in_bounded_time(tmp_path, monkeypatch, capsys):
    """Found by the attack re-run: a port that accepts connections but never answers (not an MLflow server, or one
    hung) kept `evaluate --tracking-uri` waiting for over 90 s. The server is asked once, as `sweep` asks it
    (mutransfer._tracking._server_check.check_server_reachable: an answer within REPLY_SECONDS, 20 s; 2 s here)."""
    import socket

    import mutransfer._tracking._server_check as server_check

    monkeypatch.setattr(server_check, "REPLY_SECONDS", 2.0)
    monkeypatch.chdir(tmp_path)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts (the kernel completes the handshake), never reads nor answers
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        assert main(["evaluate", "runs:/abc/model", "--data", "d.h5", "--tracking-uri", uri]) == 2
    assert f"tracking URI {uri}: no answer (timed out)" in _one_line(capsys)


def _store(path) -> bytes:
    """A real MLflow store with one run and a metric, written by MLflow itself; its bytes."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{path}")
    run = client.create_run(client.create_experiment("x"))
    client.log_metric(run.info.run_id, "val_error", 0.5)
    return path.read_bytes()


@pytest.mark.parametrize("command", [["studies"], ["ui"], ["sweep"]])
def test_a_truncated_or_damaged_tracking_store_is_one_line(tmp_path, monkeypatch, capsys, command):
    """Finding 5: a truncated mlflow.db was a 79-line traceback in `studies`. Each damaged store is now named in one
    line, exit 2, and left as it was; the intact store it came from opens."""
    monkeypatch.chdir(tmp_path)
    whole = _store(tmp_path / "whole.db")
    capsys.readouterr()  # MLflow's own log lines as it made the store
    damaged = {
        "half.db": (whole[: len(whole) // 2], "truncated"),
        "scrambled.db": (whole[:100] + bytes(reversed(whole[100:])), "damaged"),
        "header.db": (whole[:60], "truncated"),
    }
    for name, (content, said) in damaged.items():
        (tmp_path / name).write_bytes(content)
        assert main([*command, "--tracking-uri", f"sqlite:///{tmp_path / name}"]) == 2, name
        err = _one_line(capsys)
        assert f"tracking store {tmp_path / name}: {said}" in err and "--tracking-uri" in err, err
        assert (tmp_path / name).read_bytes() == content
    assert main(["studies", "--tracking-uri", f"sqlite:///{tmp_path / 'whole.db'}"]) == 0


def test_names_too_long_for_the_folder_or_mlflow_are_refused_up_front(tmp_path, monkeypatch, capsys):
    """Finding 5: an experiment name over MLflow's 500 characters was MLflow's traceback after the study had started
    (and one over 255 characters once encoded would fail as its artifact folder's name); a study name over 100
    characters was told its characters were wrong. Each is one line naming the limit, before anything is made."""
    import yaml

    monkeypatch.chdir(tmp_path)
    study = yaml.safe_load((ROOT / "studies" / "quick.yaml").read_text())
    study["tracking"]["experiment"] = "e" * 501
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(study))
    assert main(["sweep", "--study", "long.yaml"]) == 2
    assert "tracking.experiment: 'eeeeeeeeeeeeeeeeeeee'... is 501 characters once encoded" in _one_line(capsys)
    study["tracking"]["experiment"] = "実験" * 50  # 100 characters, 900 once encoded as a folder name
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(study, allow_unicode=True))
    assert main(["sweep", "--study", "long.yaml"]) == 2
    assert "is 900 characters once encoded as a folder name" in _one_line(capsys)
    assert main(["sweep", "--name", "n" * 101]) == 2
    assert "must be 1 to 100 letters, digits" in _one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.yaml"]
    study["tracking"]["experiment"] = "e" * 255  # the limit itself is fine
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(study))
    from mutransfer._study.files import load_study

    assert load_study("long.yaml")[0].tracking.experiment == "e" * 255


def _tmpfs(where: Path, size: str):
    """A tmpfs of ``size`` mounted at ``where``, unmounted afterwards; skipped where this process may not mount one."""
    import shutil

    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and `mount`")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()[:200]}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def tiny_fs(tmp_path):
    """A file system of 128 KiB (a tmpfs)."""
    yield from _tmpfs(tmp_path / "tiny", "128k")


@pytest.fixture
def small_fs(tmp_path):
    """A file system of 8 MiB (a tmpfs): room for an MLflow store (about 0.9 MiB) and a tiny study's artifacts."""
    yield from _tmpfs(tmp_path / "small", "8m")


def _fill(folder: Path) -> None:
    """Write zeros into ``folder`` until its file system is full."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:  # no space left
        pass
    finally:
        os.close(fd)


@pytest.mark.slow  # a study on a full file system, then one alone (the default suite stays under 5 min)
def test_a_tracking_store_on_a_full_disk_is_one_line(tmp_path, small_fs, monkeypatch, capsys):
    """Issue 36, finding 5: a sweep whose SQLite tracking store sits on a full disk ended in a traceback: SQLite's
    "database or disk is full" from the first write, or its "disk I/O error" where a fresh process could not make the
    store's write-ahead files. Each is now the one line of a full disk naming the store, exit 2; the study folder is
    not made; with room again the same command runs."""
    from mutransfer._tracking.runs import Tracker
    from tests.sweep_helpers import IN_PROCESS, write_tiny_data, write_tiny_study

    monkeypatch.chdir(tmp_path)
    study = write_tiny_study(tmp_path, write_tiny_data(tmp_path / "tiny.h5"), name="full", trials=2, epochs=1)
    uri = f"sqlite:///{small_fs / 'mlflow.db'}"
    Tracker(uri).ensure_experiment("mutransfer")  # the store made while there was room
    _fill(small_fs)
    argv = ["sweep", "--study", str(study), "--tracking-uri", uri, *IN_PROCESS]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == (
        f"mutransfer sweep: error: no space is left on the device to write {small_fs / 'mlflow.db'}; free some "
        "space, then run the same command again (with --resume if a sweep had started: what it wrote is kept)"
    )
    assert not (tmp_path / "mutransfer-runs" / "full").exists()
    # a fresh process cannot even open the store (SQLite's "disk I/O error": no room for its write-ahead files)
    alone = subprocess.run(
        [sys.executable, "-m", "mutransfer.cli.main", *argv], capture_output=True, text=True, timeout=300
    )
    assert alone.returncode == 2 and "Traceback" not in alone.stderr, alone.stderr[-2000:]
    assert f"no space is left on the device to write {small_fs / 'mlflow.db'}" in alone.stderr.strip().splitlines()[-1]
    (small_fs / "filler").unlink()
    assert main(argv) == 0, capsys.readouterr().err[-2000:]


def test_a_full_disk_is_one_line_and_leaves_no_half_file(tmp_path, tiny_fs, monkeypatch, capsys):
    """Finding 5: a full disk was an h5py traceback (`data generate`) or torch's "unexpected pos" (`train`'s model).
    Each is now one line naming what to free, exit 2, and nothing half-written is left on the full device."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    big = ["data", "generate", "burgers", "--n", "200", "--resolution", "512", "--out", str(tiny_fs / "big.h5")]
    assert main(big) == 2
    err = capsys.readouterr().err  # the generator's progress bar, then the line
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        "mutransfer data: error: no space is left on the device; free some space"
    ), err[-2000:]
    assert list(tiny_fs.iterdir()) == []

    small = ["data", "generate", "burgers", "--n", "20", "--resolution", "128", "--out", str(tmp_path / "b.h5")]
    assert main(small) == 0
    train = ["train", "--problem", "burgers", "--data", "b.h5", "--epochs", "1", "--out", str(tiny_fs / "model")]
    capsys.readouterr()
    assert main([*train, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert "no space is left on the device to write" in last and "state_dict.pt" in last, last
    assert list(tiny_fs.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["data", "generate", "burgers", "--n", "4", "--resolution", "64", "--out", "/proc/mutransfer-test.h5"],
        ["data", "generate", "burgers", "--n", "4", "--resolution", "64", "--out", "/proc/no-such/sub/out.h5"],
        ["train", "--problem", "burgers", "--epochs", "1", "--out", "/proc/mutransfer-model"],
    ],
)
def test_an_output_where_no_file_can_be_made_is_refused_before_the_work(tmp_path, monkeypatch, capsys, argv):
    """Finding 5: an --out under /proc was a FileNotFoundError traceback after the data had been generated. A folder
    where no file can be made is now one line before anything is computed (no data generated: the cache stays
    empty)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    assert main(argv) == 2
    assert "cannot write in /proc (No such file or directory); choose another --out" in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("layout", ["mutransfer", "pdebench"])
@pytest.mark.parametrize("command", [["data", "inspect"], ["train", "--problem", "darcy", "--epochs", "1", "--data"]])
def test_a_small_file_declaring_gigabytes_is_refused_before_it_is_read(tmp_path, monkeypatch, capsys, layout, command):
    """Finding 6: a 7 KB HDF5 file declaring gigabytes of never-written values (they read back as zeros) was
    accepted, and `data inspect` read them for 123 s. A dataset over 64 MiB that its file stores over 100x smaller is
    now one line before anything is read; the same declared size, written, is read as data."""
    import h5py
    import numpy as np

    monkeypatch.chdir(tmp_path)
    with h5py.File(tmp_path / "empty.h5", "w") as f:
        if layout == "mutransfer":
            f.attrs["problem"] = "darcy"
            for key in ("input", "output"):
                f.create_dataset(key, shape=(2000, 1024, 1024), dtype="f4", chunks=(1, 256, 256))
        else:  # a PDEBench-like file: one "tensor" (n, t, x) and its coordinates
            f.create_dataset("tensor", shape=(3000, 200, 1024), dtype="f4", chunks=(1, 200, 1024))
            f.create_dataset("x-coordinate", data=np.linspace(0, 1, 1024))
    assert (tmp_path / "empty.h5").stat().st_size < 16_000
    assert main([*command, "empty.h5"]) == 2
    err = _one_line(capsys)
    assert "GiB of values but none were written (HDF5 reads the rest as zeros)" in err, err


def test_the_stored_size_check_passes_data_that_is_written(tmp_path):
    """The check refuses nothing it should read: 68 MiB of values written, and 68 MiB of zeros written and stored
    1000x smaller (gzip), pass; the same declared unwritten, or written in part, do not."""
    import h5py
    import numpy as np

    from mutransfer.data._schema_common import check_stored
    from mutransfer.errors import UserInputError

    shape, chunks = (17, 1024, 1024), (1, 1024, 1024)
    with h5py.File(tmp_path / "mem.h5", "w") as f:
        written = f.create_dataset("w", data=np.random.default_rng(0).random(shape, dtype=np.float32))
        check_stored("mem.h5", "w", written)
        zeros = f.create_dataset("z", data=np.zeros(shape, np.float32), chunks=chunks, compression="gzip")
        assert zeros.id.get_storage_size() * 1000 < zeros.size * 4  # stored over 1000x smaller
        check_stored("mem.h5", "z", zeros)
        empty = f.create_dataset("e", shape=shape, dtype="f4", chunks=chunks)
        with pytest.raises(UserInputError, match="dataset 'e' declares 0.1 GiB of values but none were written"):
            check_stored("mem.h5", "e", empty)
        empty[:8] = 1.0
        with pytest.raises(UserInputError, match="only 8 of 17 chunks were written"):
            check_stored("mem.h5", "e", empty)


def test_an_edited_model_folder_is_one_line_before_memory_is_asked(tmp_path, monkeypatch, capsys):
    """Finding 5: a model folder whose config.json was edited crashed `evaluate`: `width: 10^6` asked 4 TB of memory
    (a traceback from the allocator), a width a little off was a `load_state_dict` traceback. The config is now built
    on torch's meta device first and its weights' bytes compared with the file's; a mismatch left is one line too.
    The folder as written evaluates."""
    import json
    import shutil

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    assert main(["data", "generate", "burgers", "--n", "12", "--resolution", "64", "--out", "d.h5"]) == 0
    assert (
        main(["train", "--problem", "burgers", "--data", "d.h5", "--epochs", "1", "--out", "m", "--no-progress"]) == 0
    )
    capsys.readouterr()
    edits = {
        (("width", 10**6),): "config.json describes 137,329,616.5 MiB of weights but state_dict.pt holds",
        (("modes", 10**7),): "MiB of weights but state_dict.pt holds",
        (("width", 40),): "state_dict.pt does not fit the model config.json describes (size mismatch",
    }
    for edit, said in edits.items():
        shutil.rmtree(tmp_path / "edited", ignore_errors=True)
        shutil.copytree(tmp_path / "m", tmp_path / "edited")
        config = json.loads((tmp_path / "edited" / "config.json").read_text())
        config["model_config"].update(edit)
        (tmp_path / "edited" / "config.json").write_text(json.dumps(config))
        assert main(["evaluate", "edited", "--data", "d.h5"]) == 2, edit
        assert said in _one_line(capsys), edit
    assert main(["evaluate", "m", "--data", "d.h5"]) == 0


def _edited_copy(tmp_path: Path, name: str, text: str) -> None:
    import shutil

    shutil.rmtree(tmp_path / "edited", ignore_errors=True)
    shutil.copytree(tmp_path / "m", tmp_path / "edited")
    (tmp_path / "edited" / name).write_text(text)


def test_a_model_folder_that_points_outside_itself_or_is_malformed_is_one_line(tmp_path, monkeypatch, capsys):
    """Found by the model-folder fuzz (tests/serving/test_fuzz_model_folder.py): MLmodel's flavor named its config and
    weights by any path (``/etc/passwd`` and ``../d.h5`` were read), and a MLmodel or config.json that was not a
    mapping, a card field of a wrong type, or shapes that were edited were tracebacks. Each is one line now, naming
    the file and the field, and no file's contents are shown."""
    import json

    import yaml

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    assert main(["data", "generate", "burgers", "--n", "12", "--resolution", "64", "--out", "d.h5"]) == 0
    train = ["train", "--problem", "burgers", "--data", "d.h5", "--epochs", "1", "--width", "8", "--layers", "2"]
    assert main([*train, "--out", "m", "--no-progress"]) == 0
    capsys.readouterr()
    mlmodel = yaml.safe_load((tmp_path / "m" / "MLmodel").read_text())
    card = json.loads((tmp_path / "m" / "config.json").read_text())

    def with_flavor(**fields) -> str:
        return yaml.safe_dump({**mlmodel, "flavors": {"mutransfer": {**mlmodel["flavors"]["mutransfer"], **fields}}})

    cases = {
        ("MLmodel", with_flavor(config="/etc/passwd")): "MLmodel's mutransfer flavor field 'config' must name a file",
        ("MLmodel", with_flavor(weights="../d.h5")): "MLmodel's mutransfer flavor field 'weights' must name a file",
        ("MLmodel", with_flavor(config="MLmodel")): "MLmodel is not valid JSON",
        ("MLmodel", "\x00"): "MLmodel is not valid YAML",
        ("MLmodel", "[1, 2]"): "MLmodel has no 'flavors' mapping",
        ("config.json", "{not json"): "config.json is not valid JSON",
        ("config.json", "[]"): "config.json is not a JSON object",
        (
            "config.json",
            json.dumps({**card, "model_config": [1]}),
        ): "config.json's 'model_config' must be a JSON object",
        ("config.json", json.dumps({**card, "input_shape": [64, 0]})): "'input_shape' must be a list of 1 to 5",
        ("config.json", json.dumps({**card, "output_shape": [32, 1]})): "gives [64, 1], not its output_shape [32, 1]",
        (
            "config.json",
            json.dumps({**card, "model_config": {**card["model_config"], "width": "8"}}),
        ): "does not rebuild",
        ("config.json", json.dumps({**card, "format_version": 99})): "format_version 99, this mutransfer reads up to 1",
    }
    for (name, text), said in cases.items():
        _edited_copy(tmp_path, name, text)
        assert main(["evaluate", "edited", "--data", "d.h5"]) == 2, (name, text)
        err = _one_line(capsys)
        assert said in err and "root:" not in err, (said, err)
    assert main(["evaluate", "m", "--data", "d.h5"]) == 0


def test_a_store_being_written_is_not_called_damaged(tmp_path):
    """A store another driver writes (write-ahead log live beside it, uncommitted writes) opens: the damage check
    reads it read-only and compares its size only while no journal or log is live."""
    import sqlite3

    from mutransfer._tracking.runs import resolve_tracking_uri

    live = tmp_path / "live.db"
    live.write_bytes(_store(tmp_path / "whole.db"))
    writer = sqlite3.connect(live)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("CREATE TABLE another_drivers_write (x)")
        writer.commit()
        writer.execute("BEGIN IMMEDIATE")  # a write transaction held open
        writer.execute("INSERT INTO another_drivers_write VALUES (1)")
        assert (tmp_path / "live.db-wal").stat().st_size > 0
        assert resolve_tracking_uri(f"sqlite:///{live}") == f"sqlite:///{live}"
    finally:
        writer.close()


@pytest.mark.parametrize("layout", ["external", "virtual"])
def test_a_data_file_whose_values_live_in_other_files_is_refused(tmp_path, monkeypatch, capsys, layout):
    """Found by the attack re-run: a data file whose datasets are HDF5 external storage (``/dev/zero``: any file could be
    named, ``/etc/shadow`` too) or virtual datasets (another file's) declared 8 GiB each in a few KB; `evaluate` read
    them until it was killed. Refused in one line by every reader, before a value is read; the same file with its
    values written is read (the check can pass)."""
    import h5py
    import numpy as np

    from tests.fuzz_harness import write_grid_file

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    write_grid_file(tmp_path / "d.h5", n=12, resolution=64)
    assert main(["data", "inspect", "d.h5"]) == 0
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("x", data=np.zeros((12, 64), np.float32))
    with h5py.File(tmp_path / "d.h5", "r+") as f:
        del f["input"]
        if layout == "external":
            f.create_dataset("input", shape=(12, 64), dtype="f4", external=[("/dev/zero", 0, h5py.h5f.UNLIMITED)])
        else:
            vl = h5py.VirtualLayout(shape=(12, 64), dtype="f4")
            vl[:] = h5py.VirtualSource(str(source), "x", shape=(12, 64))
            f.create_virtual_dataset("input", vl)
    capsys.readouterr()
    for argv in (["data", "inspect", "d.h5"], ["train", "--problem", "burgers", "--data", "d.h5", "--epochs", "1"]):
        assert main(argv) == 2, argv
        err = _one_line(capsys)
        assert "dataset 'input' reads its values from other files" in err and layout in err, err


def _code(argv: list[str]) -> object:
    """main's exit code, whether returned or raised by argparse (a flag's own type refusing its value)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_seeds_past_64_bits_and_names_past_the_file_systems_are_one_line(tmp_path, monkeypatch, capsys):
    """Found by the attack re-run: `--seed 2**64` of `data generate` and `train`, and a study's `training.seed: 2**64`,
    were tracebacks from torch or h5py (a sweep's every trial failed, advising a lower LR); a study name of 501
    characters given to `trials`, `report`, `evaluate` or `predict` was an `OSError: File name too long` traceback.
    Seeds are bounded at 2**63 - 1 where they are read (the flags and the study's fields), the largest passes; a
    name the file system refuses is one line, whatever the command."""
    import yaml

    from mutransfer._training.hyperparameters import MAX_SEED
    from tests.sweep_helpers import write_tiny_data, write_tiny_study

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    big = str(2**64)
    generate = ["data", "generate", "burgers", "--n", "2", "--resolution", "32", "--out", "g.h5", "--seed"]
    assert _code([*generate, big]) == 2
    assert "--seed: 18446744073709551616 must be an integer from 0 to 9223372036854775807" in _one_line(capsys)
    assert _code(["train", "--problem", "burgers", "--data", "g.h5", "--epochs", "1", "--seed", big]) == 2
    assert "--seed: 18446744073709551616 must be <= 9223372036854775807" in _one_line(capsys)
    study = write_tiny_study(tmp_path, write_tiny_data(tmp_path / "tiny.h5"), name="seeds")
    mapping = yaml.safe_load(study.read_text())
    mapping.setdefault("training", {})["seed"] = 2**64
    study.write_text(yaml.safe_dump(mapping))
    assert main(["sweep", "--study", str(study), "--executor", "inprocess"]) == 2
    assert "training.seed: must be <= 9223372036854775807" in _one_line(capsys)
    assert main([*generate, str(MAX_SEED), "--no-progress"]) == 0  # the largest seed is one
    capsys.readouterr()
    name = "n" * 501
    for argv in (["trials", name], ["report", name], ["evaluate", name, "--data", "g.h5"]):
        assert main(argv) == 2, argv
        assert f"{'n' * 40}… (501 characters) is too long a name for the file system" in _one_line(capsys)


@pytest.mark.slow  # a small in-process study (about 10 s)
def test_an_experiment_name_with_a_path_writes_nothing_outside_the_store(tmp_path, monkeypatch, capsys):
    """Found by the attack re-run: `tracking.experiment: ../../escape` made the artifact folder `mlruns/..%2F..%2Fescape`
    beside a SQLite store, which MLflow URL-decodes: the study's model and report were written two folders up. The
    folder's name keeps letters, digits, '.', '_', '-' only (the rest '_', a digest added): everything stays in
    mlruns/ beside the store."""
    from tests.sweep_helpers import write_tiny_data, write_tiny_study

    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(work / "cache"))
    study = write_tiny_study(
        work, write_tiny_data(work / "tiny.h5"), name="esc", trials=2, tracking={"experiment": "../../escape"}
    )
    assert main(["sweep", "--study", str(study), "--executor", "inprocess"]) == 0
    capsys.readouterr()
    outside = [p for p in tmp_path.rglob("*") if work not in p.parents and p != work and p not in work.parents]
    assert outside == [], outside
    folders = [p.name for p in (work / "mlruns").iterdir()]
    assert any(name.startswith("_.._escape-") for name in folders), folders


def test_evaluate_names_a_fifo_or_a_device_as_data_for_what_it_is(tmp_path):
    """Found by the attack re-run: `evaluate --data` of a FIFO or /dev/zero said "file not found"; it says what the path
    is, as `data inspect` and `train` do, without opening it (a FIFO would be waited on)."""
    from mutransfer.errors import UserInputError
    from mutransfer.serving._evaluation import sample_count

    os.mkfifo(tmp_path / "fifo.h5")
    for path in (tmp_path / "fifo.h5", Path("/dev/zero")):
        with pytest.raises(UserInputError, match=r"is not a regular file \(a FIFO, a device or a socket\)"):
            sample_count(str(path), False)
    with pytest.raises(UserInputError, match="file not found"):
        sample_count(str(tmp_path / "none.h5"), False)
