"""Hostile or careless inputs found by the second attack re-run of issue "Nothing lost" (2026-11-28, on 3d36a11):
each was a traceback, a hang, a file written where it must not be, or a misleading line; each is now one line and
exit 2, before anything is made. The symbolic links it planted in study folders are in
tests/study_folder/test_state_shapes.py (test_a_symbolic_link_anywhere_in_a_study_folder_is_one_line)."""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import threading

import pytest

from mutransfer.cli.main import main
from tests.sweep_helpers import K_ONLY_STUDY


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _study_folder(tmp_path):
    """A study folder as a sweep leaves it after its first trial: state.json, a trial with its checkpoint."""
    trial = tmp_path / "mutransfer-runs" / "quick" / "trials" / "t0000"
    trial.mkdir(parents=True)
    (trial.parent.parent / "state.json").write_text('{"phase": "proxies", "study": "quick"}')
    (trial / "checkpoint.pt").write_bytes(b"the trial's own checkpoint")
    return trial


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--problem", "burgers", "--epochs", "1", "--no-resume", "--checkpoint-dir", "{trial}"],
        ["train", "--problem", "burgers", "--epochs", "1", "--checkpoint-dir", "{study}"],
        [
            "coord-check",
            "--problem",
            "burgers",
            "--steps",
            "1",
            "--seeds",
            "1",
            "--modes",
            "2",
            "4",
            "--out",
            "{study}",
        ],
        ["landscape", "--modes", "2", "4", "--values", "0.001", "0.01", "--out", "{trial}/figures"],
    ],
)
def test_a_folder_output_inside_a_study_folder_is_refused_before_the_work(tmp_path, monkeypatch, capsys, argv):
    """`train --no-resume --checkpoint-dir <a trial's folder>` replaced the finished trial's checkpoint (exit 0);
    `train --checkpoint-dir` and `coord-check --out` of the study folder wrote into it. A folder output is now
    refused inside a study or model folder, as `--out` files are, before any data is generated."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "cache"))
    trial = _study_folder(tmp_path)
    before = hashlib.sha256((trial / "checkpoint.pt").read_bytes()).hexdigest()
    args = [a.format(trial=trial, study=trial.parent.parent) for a in argv]
    assert main(args) == 2
    err = _one_line(capsys)
    assert "is inside the study folder" in err and "write outside it" in err
    assert hashlib.sha256((trial / "checkpoint.pt").read_bytes()).hexdigest() == before
    assert sorted(p.name for p in trial.iterdir()) == ["checkpoint.pt"]
    assert not (tmp_path / "cache").exists()  # no data generated


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 -- http.server's name
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture
def not_mlflow():
    """An HTTP server on 127.0.0.1 that answers 404 to everything (a web server, not MLflow's)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("command", [["studies"], ["ui"]])
def test_studies_and_ui_ask_a_store_as_a_sweep_does(tmp_path, monkeypatch, capsys, command, not_mlflow):
    """`studies` and `ui` against a port that accepts but never answers waited past 120 s; a 404 server, a
    postgresql:// store without its driver were 34- and 60-line tracebacks; `sqlite:////dev/null` made
    /dev/null-journal and /dev/null.lock, then a traceback; a FIFO as the store hung. They now check the store as
    `sweep` does (mutransfer._sweep.endpoints.check_store)."""
    import mutransfer._tracking._server_check as server_check

    monkeypatch.setattr(server_check, "REPLY_SECONDS", 2.0)
    from tests.team_store import free_port

    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo.db")
    command = [*command, "--port", str(free_port())] if command == ["ui"] else command
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts (the kernel completes the handshake), never reads nor answers
        cases = {
            f"http://127.0.0.1:{silent.getsockname()[1]}": "no answer (timed out)",
            not_mlflow: "answers (HTTP 404) but is not an MLflow tracking server",
            "sqlite:////dev/null": "tracking store /dev/null: is not a regular file (a FIFO or a device)",
            f"sqlite:///{tmp_path / 'fifo.db'}": "fifo.db: is not a regular file (a FIFO or a device)",
        }
        try:
            import psycopg  # noqa: F401
        except ImportError:  # SQLAlchemy 2.1 maps postgresql:// to psycopg 3, which mutransfer does not install
            cases["postgresql://u:p@127.0.0.1:9/db"] = "its database driver psycopg is not installed; pip install"
        for uri, said in cases.items():
            assert main([*command, "--tracking-uri", uri]) == 2, uri
            assert said in _one_line(capsys), uri
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.db"]
    assert not os.path.exists("/dev/null-journal") and not os.path.exists("/dev/null.lock")


def test_a_runs_dir_where_nothing_can_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    """`sweep --runs-dir /proc/foo` was 44 lines of three tracebacks (FileNotFoundError)."""
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--study", str(K_ONLY_STUDY), "--runs-dir", "/proc/foo", "--executor", "inprocess"]) == 2
    assert "--runs-dir /proc/foo: cannot write in /proc" in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []


def _with_data(data: str):
    def edit(text: str) -> str:
        import yaml

        mapping = yaml.safe_load(text)
        mapping["problem"]["data"] = data
        return yaml.safe_dump(mapping)

    return edit


def _study(tmp_path, edit) -> str:
    text = K_ONLY_STUDY.read_text()
    (tmp_path / "s.yaml").write_text(edit(text))
    return str(tmp_path / "s.yaml")


def test_a_choice_of_thousands_of_values_and_a_key_given_twice_are_one_line(tmp_path, monkeypatch, capsys):
    """A `choice` of 200,000 batch sizes hung past 120 s after the study folder was made; a second `name:` in a
    study file silently won. Both are refused before anything is made."""
    import yaml

    monkeypatch.chdir(tmp_path)

    def many(text: str) -> str:
        mapping = yaml.safe_load(text)
        mapping["search_space"]["batch_size"] = {"type": "choice", "values": list(range(1, 1002))}
        return yaml.safe_dump(mapping)

    assert main(["sweep", "--study", _study(tmp_path, many), "--executor", "inprocess"]) == 2
    assert "search_space.batch_size.values: lists 1,001 values, more than a search tries (at most 1,000)" in (
        _one_line(capsys)
    )
    assert main(["sweep", "--study", _study(tmp_path, lambda t: t + "\nname: other\n"), "--executor", "inprocess"]) == 2
    assert "key 'name' is given twice; keep one" in _one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_a_fifo_or_device_as_the_study_or_its_data_is_named_for_what_it_is(tmp_path, monkeypatch, capsys):
    """`--study /dev/zero` and a FIFO were "file not found; write one with `mutransfer init zero`"; `problem.data:
    /dev/zero`, "file /dev/zero not found"."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo.yaml")
    for study in ("/dev/zero", "fifo.yaml"):
        assert main(["sweep", "--study", study]) == 2
        assert f"study {study}: is not a regular file (a FIFO, a device or a socket)" in _one_line(capsys)
    path = _study(tmp_path, _with_data("/dev/zero"))
    assert main(["sweep", "--study", path]) == 2
    assert "/dev/zero is not a regular file (a folder, a FIFO or a device); name a data file" in _one_line(capsys)


def test_a_state_naming_its_model_folder_by_a_path_is_one_line(tmp_path, monkeypatch, capsys):
    """state.json's ``model.dir`` of ``../../elsewhere`` sent `evaluate STUDY` to a model folder outside the study."""
    import json
    import shutil

    monkeypatch.chdir(tmp_path)
    root = tmp_path / "mutransfer-runs" / "quick"
    root.mkdir(parents=True)
    shutil.copy(K_ONLY_STUDY, root / "study.yaml")
    (tmp_path / "elsewhere").mkdir()
    state = {"phase": "done", "study": "quick", "report": {}, "model": {"dir": "../../elsewhere"}}
    (root / "state.json").write_text(json.dumps(state))
    assert main(["evaluate", "quick", "--data", "d.h5"]) == 2
    assert "field 'model' names its folder by a path, not by a name inside the study folder" in _one_line(capsys)


def test_an_output_inside_the_stores_artifact_folder_is_refused(tmp_path, monkeypatch, capsys):
    """Third re-run: `report --out mlruns/<experiment>/<run>/artifacts/study/source.yaml --force` replaced a run's
    logged file (exit 0). The artifact folder beside a SQLite store (``mlruns/``) is the store's, as ``mlflow.db`` is."""
    monkeypatch.chdir(tmp_path)
    logged = tmp_path / "mlruns" / "quick" / "0123" / "artifacts" / "study" / "source.yaml"
    logged.parent.mkdir(parents=True)
    logged.write_text("name: quick\n")
    _study_folder(tmp_path)
    (tmp_path / "mutransfer-runs" / "quick" / "study.yaml").write_text(K_ONLY_STUDY.read_text())
    assert main(["report", "quick", "--out", str(logged), "--force"]) == 2
    assert "is inside the MLflow artifact folder" in _one_line(capsys)
    assert logged.read_text() == "name: quick\n"


def test_the_python_api_refuses_wrong_types_and_places_in_one_line(tmp_path, monkeypatch):
    """Third re-run: `StudySpec.from_yaml(42)`, `create_study(spec, storage=5)` and `load_study(None)` raised
    TypeError; `from_yaml("/dev/zero")` said "file not found"; `create_study(storage="/proc/x")` returned a study that
    failed at its first training, naming a CLI flag. Each is a one-line UserInputError where it is called."""
    import mutransfer as mt

    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo.yaml")
    cases = [
        (lambda: mt.StudySpec.from_yaml(42), "study file: expected a path (str or os.PathLike), got int"),
        (lambda: mt.StudySpec.from_yaml("/dev/zero"), "is not a regular file (a FIFO, a device or a socket)"),
        (lambda: mt.StudySpec.from_yaml("fifo.yaml"), "is not a regular file (a FIFO, a device or a socket)"),
        (lambda: mt.create_study(mt.StudySpec.default(), storage=5), "storage: a folder path (str or pathlib.Path)"),
        (lambda: mt.create_study(mt.StudySpec.default(), storage="/proc/x"), "storage /proc/x: cannot write in /proc"),
        (lambda: mt.load_study(None), "study_name: the name a study was created with (spec.name), got None"),
    ]
    for call, said in cases:
        with pytest.raises(mt.UserInputError) as refused:
            call()
        assert said in str(refused.value) and len(str(refused.value).splitlines()) == 1, str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.yaml"]
