"""`mutransfer ui`: the link opens the study's runs (checked in a real headless Chromium), a taken port is refused.

The browser tests start a real `mutransfer ui` (a real MLflow server) on a store written the way
the product writes it (Tracker, the parent run's parameters, child runs with hp.* params and
final_test_error), read the printed link and dump the page's DOM with `chromium --dump-dom`.
They skip when no Chromium is installed (Debian: `apt-get install chromium`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from mutransfer._browser import DEFAULT_BUDGET_MS, dump_dom, find_chromium, visible_text

ENV = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
GENAI_ONLY = "Judges"  # a GenAI-mode navigation entry: absent from the classic runs view
STUDY = "uistudy"
WIDE = (1900, 900)
SCREEN = (
    1600,
    1000,
)  # a laptop's browser window  # MLflow's runs table renders only the columns that fit: a wide window holds them all


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_store(
    directory, *, tagged: bool = True, name: str = STUDY, target_error: float = 0.04, experiment: str | None = None
) -> tuple[str, str]:
    """An MLflow store with one study (more on later calls) as the sweep writes it: parent run + 3 proxy trials.
    ``experiment``: the study file's ``tracking.experiment`` (default: the default study's, "mutransfer").
    Returns (uri, experiment id)."""
    from mutransfer._study import load_study
    from mutransfer._sweep.parent_run import tag_study_view
    from mutransfer._tracking.runs import KIND_TAG, PARENT_TAG, RUN_NAME_TAG, STUDY_TAG, Tracker, log_batch

    study, _ = load_study(None)
    study.name = name
    if experiment is not None:
        study.tracking.experiment = experiment
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    tracker = Tracker(uri)
    experiment_id = tracker.ensure_experiment(study.tracking.experiment)
    if tagged:
        tag_study_view(SimpleNamespace(tracker=tracker, study=study), experiment_id)
    space = json.dumps({k: v.to_dict() for k, v in study.search_space.items()})
    params = {"study": name, "search.space": space, "problem": "burgers", **study.scaling()}
    parent = tracker.create_parent(experiment_id, study, params=params, tags={}, files={})
    client = tracker.client
    for i in range(3):
        run = client.create_run(
            experiment_id,
            tags={PARENT_TAG: parent, KIND_TAG: "proxy_trial", STUDY_TAG: name, RUN_NAME_TAG: f"trial {i:03d}"},
        )
        hp = {f"hp.{k}": 10.0 ** -(i + 2) for k in study.search_space}
        log_batch(
            client,
            run.info.run_id,
            params=hp,
            metrics=[("val_error", 0.3 / (e + 1), 0, e) for e in range(3)]
            + [("final_val_error", 0.05 * (i + 1), 0, 3)],
        )
        client.set_terminated(run.info.run_id)
    summary = [("best_proxy_val_error", 0.05, 0, 0), ("target_test_error", target_error, 0, 0)]
    log_batch(client, parent, metrics=summary)
    tracker.set_status(parent, "FINISHED")
    return uri, experiment_id


# --------------------------------------------------------------------------- fast


def test_ui_command_binds_localhost_without_a_shell():
    from mutransfer._tracking.views import ui_link
    from mutransfer.cli._ui_cmd import ui_command

    cmd = ui_command("sqlite:////tmp/x/mlflow.db", port=5123)
    assert cmd[:4] == [sys.executable, "-m", "mlflow", "ui"] and all(isinstance(a, str) for a in cmd)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "5123"
    assert cmd[cmd.index("--backend-store-uri") + 1] == "sqlite:////tmp/x/mlflow.db"
    assert ui_link("127.0.0.1", 5123, "7", "quick") == (
        "http://127.0.0.1:5123/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=quick"
    )
    assert ui_link("127.0.0.1", 5123, "7") == "http://127.0.0.1:5123/#/experiments/7/runs?workflowType=machine_learning"
    assert ui_link("0.0.0.0", 80, None) == "http://127.0.0.1:80/"


def test_the_ui_starts_mlflow_without_its_job_runner_unless_the_user_asks(monkeypatch):
    from mutransfer.cli._ui_cmd import JOB_EXECUTION_ENV, ui_environment

    monkeypatch.delenv(JOB_EXECUTION_ENV, raising=False)
    assert ui_environment(False)[JOB_EXECUTION_ENV] == ui_environment(True)[JOB_EXECUTION_ENV] == "false"
    monkeypatch.setenv(JOB_EXECUTION_ENV, "true")
    assert ui_environment(False)[JOB_EXECUTION_ENV] == "true"


def test_study_view_names_its_runs_errors_and_searched_hyperparameters():
    from mutransfer._tracking.views import searched_keys, study_view_state, view_key

    state = study_view_state("quick", ["lr", "weight_decay"])
    assert state["searchFilter"] == "tags.`mutransfer.study` = 'quick' AND tags.`mutransfer.kind` != 'study'"
    assert state["orderByKey"] == "metrics.`final_val_error`" and state["orderByAsc"] is True
    assert "metrics.`final_val_error`" in state["selectedColumns"]
    assert state["selectedColumns"][:2] == ["params.`hp.lr`", "params.`hp.weight_decay`"]  # first: seen unscrolled
    assert view_key("quick-1.b_c") == "quick-1.b_c"
    odd = view_key("my study/é")  # not URL- or tag-safe: slug plus a hash, distinct from its slug's own key
    assert odd.startswith("my-study-") and odd != view_key("my-study") and odd == view_key("my study/é")
    assert searched_keys({"search.space": json.dumps({"lr": {}, "batch_size": {}})}) == ["lr", "batch_size"]
    assert searched_keys({}) == [] and searched_keys({"search.space": "not json"}) == []


def test_ui_tags_an_experiment_written_before_the_tags(tmp_path, monkeypatch, capsys):
    """A store from before this change (no tags): `mutransfer ui` adds the kind tag and the newest study's view;
    a store it cannot write to is still served, with a warning and a link without the view."""
    from mlflow.tracking import MlflowClient

    from mutransfer._tracking.listings import list_studies
    from mutransfer._tracking.views import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, SHARED_VIEW_PREFIX
    from mutransfer.cli import _ui_cmd as ui_cmd
    from mutransfer.cli._ui_cmd import _tag_study

    uri, experiment_id = write_store(tmp_path, tagged=False)
    tags = MlflowClient(uri).get_experiment(experiment_id).tags
    assert EXPERIMENT_KIND_TAG not in tags and not any(k.startswith(SHARED_VIEW_PREFIX) for k in tags)
    with monkeypatch.context() as patch:
        patch.setattr(ui_cmd, "tag_study", lambda *a: (_ for _ in ()).throw(PermissionError("read-only store")))
        assert _tag_study(uri, None, list_studies(uri)) == (experiment_id, None)
    assert "warning: could not tag experiment" in capsys.readouterr().err
    assert _tag_study(uri, None, list_studies(uri)) == (experiment_id, STUDY)
    tags = MlflowClient(uri).get_experiment(experiment_id).tags
    assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    view = json.loads(tags[SHARED_VIEW_PREFIX + STUDY])
    assert "params.`hp.lr`" in view["selectedColumns"], (
        "the searched hyperparameters come from the parent's search.space"
    )


def test_taken_port_is_refused_with_one_line_and_exit_2(tmp_path):
    """Something listens on the port: one line naming --port, exit 2, no MLflow started (not even imported)."""
    (tmp_path / "mlflow.db").write_bytes(b"")
    probe = (
        "import sys\nfrom mutransfer.cli.main import main\nrc = main(sys.argv[1:])\n"
        "print('mlflow' in sys.modules)\nsys.exit(rc)\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-c", probe, "ui", "--port", str(port)],
            cwd=tmp_path,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and f"--port {port}" in done.stderr and "already in use" in done.stderr
    assert done.stdout.strip() == "False", "refused before MLflow was imported"


def test_free_port_passes_the_check():
    from mutransfer.cli._ui_cmd import check_port_free
    from mutransfer.errors import UserInputError

    port = _free_port()
    check_port_free("127.0.0.1", port)  # nothing listens: no error
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(UserInputError, match="already in use"):
            check_port_free("127.0.0.1", port)


# --------------------------------------------------------------------------- real server + browser

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="no Chromium (apt-get install chromium)")


def _start_ui(cwd, port: int, **popen) -> subprocess.Popen:
    """`mutransfer ui --port PORT` in ``cwd``; its stdout (the link) piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "mutransfer", "ui", "--port", str(port)],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        **popen,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`mutransfer ui` on a fresh store: (link it printed, experiment id, port); stopped after the tests."""
    work = tmp_path_factory.mktemp("ui")
    _, experiment_id = write_store(work, tagged=True)
    port = _free_port()
    proc = _start_ui(work, port, start_new_session=True)
    try:
        line = proc.stdout.readline()  # printed once the server answers; '' if it gave up (--wait)
        assert line.startswith("MLflow UI: http://127.0.0.1:"), f"no link printed: {line!r}"
        yield line.split()[2], experiment_id, port, proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.slow
def test_link_is_printed_once_the_server_answers_on_localhost_only(served):
    link, experiment_id, port, pid = served
    assert link.startswith(f"http://127.0.0.1:{port}/#/experiments/{experiment_id}/runs?")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:  # no wait needed
        assert reply.status == 200
    url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
    with pytest.raises(urllib.error.HTTPError) as refused:  # DNS rebinding: a foreign Host header is refused
        urllib.request.urlopen(urllib.request.Request(url, headers={"Host": "attacker.example"}), timeout=5)
    assert refused.value.code == 403
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.status == 200
    from tests.net_helpers import process_tree

    commands = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode() for p in process_tree(pid)]
    assert any("mlflow ui" in c for c in commands), commands  # the check sees the server's processes
    assert not [c for c in commands if "huey" in c or "_job_runner" in c], commands  # no GenAI job runner


@pytest.mark.slow
@needs_chromium
def test_the_printed_link_shows_the_study_and_its_errors_in_a_browser(served):
    """At 1600 x 1000 (MLflow's runs table renders only the columns that fit the window): the study's three trials,
    its parent run apart ("3 matching runs"), the searched hyperparameters as the first columns, then the error."""
    link, _, _, _ = served
    text = ""
    # The view's column order is applied once the page has read the experiment's tags; on a loaded machine (the
    # suite on two workers) 15 s of virtual time can end before that: the page is read again with more time.
    for budget_ms in (DEFAULT_BUDGET_MS, 3 * DEFAULT_BUDGET_MS):
        text = visible_text(dump_dom(link, size=SCREEN, budget_ms=budget_ms))
        header = text.find("Run Name")
        if 0 <= header and 0 <= text.find("hp.lr", header) < text.find("final_val_error", header):
            break
    assert "trial 000" in text and "trial 002" in text and "3 matching runs" in text
    assert "hp.lr" in text and "hp.batch_size" in text and "final_val_error" in text
    header = text.index("Run Name")  # the table's header row ("Sort: final_val_error" comes before it)
    assert text.index("hp.lr", header) < text.index("final_val_error", header), "the hyperparameters come first"
    assert "Model registry" in text and GENAI_ONLY not in text


@pytest.mark.slow
@needs_chromium
def test_without_the_view_the_same_page_is_the_genai_landing(served):
    """The control: the runs page of the same experiment, tagged, but without the link's parameters."""
    link, experiment_id, port, _ = served
    text = visible_text(dump_dom(f"http://127.0.0.1:{port}/#/experiments/{experiment_id}/runs", size=WIDE))
    assert GENAI_ONLY in text and "final_val_error" not in text


@pytest.mark.slow
def test_a_killed_ui_leaves_no_server_behind(tmp_path):
    """`kill -9` of `mutransfer ui` (it runs no code then): its MLflow server stops too, and the port is free again."""
    from mutransfer.cli._ui_cmd import check_port_free
    from mutransfer.errors import UserInputError

    write_store(tmp_path, tagged=True)
    port = _free_port()
    proc = _start_ui(tmp_path, port)
    try:
        assert proc.stdout.readline().startswith("MLflow UI: http://127.0.0.1:")
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                check_port_free("127.0.0.1", port)
                break
            except UserInputError:
                time.sleep(0.5)
        check_port_free("127.0.0.1", port)  # refused: the server still serves on a port nobody will free
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture(scope="module")
def two_studies(tmp_path_factory):
    """`mutransfer ui` on a store holding two studies: (its two printed lines, port); stopped after the tests."""
    work = tmp_path_factory.mktemp("ui2")
    write_store(work, name="first-study", target_error=0.0123)
    write_store(work, name="second-study", target_error=0.0456)
    port = _free_port()
    proc = _start_ui(work, port, start_new_session=True)
    try:
        yield [proc.stdout.readline(), proc.stdout.readline()], port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def test_the_side_by_side_view_is_written_only_where_there_are_studies_to_compare(tmp_path):
    from mutransfer._tracking.listings import list_studies
    from mutransfer._tracking.runs import _client
    from mutransfer._tracking.views import SHARED_VIEW_PREFIX, STUDIES_KEY, studies_view_state
    from mutransfer.cli._ui_cmd import _tag_studies

    uri, experiment_id = write_store(tmp_path, name="alone")
    tag = SHARED_VIEW_PREFIX + STUDIES_KEY
    assert _tag_studies(uri, experiment_id, list_studies(uri)) == 0
    assert tag not in _client(uri).get_experiment(experiment_id).tags
    write_store(tmp_path, name="another")
    assert _tag_studies(uri, experiment_id, list_studies(uri)) == 2
    state = json.loads(_client(uri).get_experiment(experiment_id).tags[tag])
    assert state == studies_view_state() and state["searchFilter"] == "tags.`mutransfer.kind` = 'study'"
    assert "metrics.`target_test_error`" in state["selectedColumns"] and "params.`proxy_K`" in state["selectedColumns"]
    for column in ("metrics.`verify_transfer_error_decades`", "metrics.`mutransfer_vs_direct_wall_seconds`"):
        assert column in state["selectedColumns"]
    assert state["selectedColumns"][-1] == "tags.`mutransfer.verdict`"  # the verdict in words, last


@pytest.mark.slow
@needs_chromium
def test_with_two_studies_a_second_link_shows_them_side_by_side_in_a_browser(two_studies):
    """Both studies' rows (their parent runs, not their trials) with their target errors and sizes."""
    (first, second), _ = two_studies
    assert first.startswith("MLflow UI: http://127.0.0.1:") and "viewStateShareKey=second-study" in first
    assert second.startswith("MLflow UI, its 2 studies side by side: http://127.0.0.1:"), second
    link = second.split()[-1]
    assert link.endswith("viewStateShareKey=mutransfer-studies")
    text = ""
    for budget_ms in (DEFAULT_BUDGET_MS, 3 * DEFAULT_BUDGET_MS):
        text = visible_text(dump_dom(link, size=SCREEN, budget_ms=budget_ms))
        if "target_test_error" in text and "0.0123" in text:
            break
    assert "first-study" in text and "second-study" in text and "2 matching runs" in text, text[:3000]
    assert "target_test_error" in text and "0.0123" in text and "0.0456" in text
    assert "trial 000" not in text  # the studies, not their trials


# --------------------------------------------------------------------------- studies of several experiments


def test_the_across_experiments_link_is_printed_only_when_studies_span_two_experiments(tmp_path, monkeypatch):
    """Two studies in one experiment: that experiment's side-by-side line, no compare-experiments one. A third study
    in another experiment (the newest, alone in it): a line linking MLflow's compare-experiments page of both
    experiments on the studies' view, which both experiments carry. A store it cannot tag gets no such line."""
    from urllib.parse import parse_qs, urlsplit

    from mutransfer._tracking.listings import list_studies
    from mutransfer._tracking.runs import _client
    from mutransfer._tracking.views import SHARED_VIEW_PREFIX, STUDIES_KEY, compare_link, studies_view_state
    from mutransfer.cli import _ui_cmd as ui_cmd
    from mutransfer.cli._ui_cmd import ui_lines

    uri, first = write_store(tmp_path, name="one", experiment="exp-a")
    write_store(tmp_path, name="two", experiment="exp-a")
    lines = ui_lines(uri, list_studies(uri), None, "127.0.0.1", 5123)
    assert len(lines) == 2 and lines[1].startswith("MLflow UI, its 2 studies side by side: "), lines
    assert not any("compare-experiments" in line for line in lines), lines

    _, second = write_store(tmp_path, name="three", experiment="exp-b")
    assert second != first
    lines = ui_lines(uri, list_studies(uri), None, "127.0.0.1", 5123)
    assert len(lines) == 2 and "viewStateShareKey=three" in lines[0], lines  # "three" is alone in exp-b
    prefix = "MLflow UI, all 3 studies of 2 experiments side by side: "
    assert lines[1].startswith(prefix), lines
    link = lines[1][len(prefix) :]
    assert link == compare_link("127.0.0.1", 5123, [second, first])
    assert link.startswith("http://127.0.0.1:5123/#/compare-experiments/s?")
    query = parse_qs(urlsplit(link).fragment.split("?", 1)[1])
    assert json.loads(query["experiments"][0]) == sorted([first, second])
    assert query["viewStateShareKey"] == [STUDIES_KEY] and "searchFilter" not in query  # a facet voids the key
    for experiment_id in (first, second):  # MLflow reads the view from one of them: both hold it
        tags = _client(uri).get_experiment(experiment_id).tags
        assert json.loads(tags[SHARED_VIEW_PREFIX + STUDIES_KEY]) == studies_view_state()
    assert "attributes.`Experiment Name`" in studies_view_state()["selectedColumns"]

    with monkeypatch.context() as patch:  # read-only: no link that would open on "share key does not exist"
        patch.setattr(ui_cmd, "tag_studies", lambda *a: (_ for _ in ()).throw(PermissionError("read-only store")))
        lines = ui_lines(uri, list_studies(uri), None, "127.0.0.1", 5123)
    assert len(lines) == 1 and "viewStateShareKey=three" in lines[0], lines


def _read_lines(proc: subprocess.Popen, count: int, timeout: float = 300) -> list[str]:
    """Up to ``count`` lines of ``proc``'s stdout, fewer if they do not come within ``timeout`` s (no hang)."""
    import threading

    lines: list[str] = []

    def read() -> None:
        for _ in range(count):
            lines.append(proc.stdout.readline())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    return list(lines)


@pytest.fixture(scope="module")
def two_experiments(tmp_path_factory):
    """`mutransfer ui` on a store holding one study in each of two experiments: (its printed lines, port)."""
    work = tmp_path_factory.mktemp("ui3")
    write_store(work, name="alpha-study", target_error=0.0123, experiment="exp-a")
    write_store(work, name="beta-study", target_error=0.0456, experiment="exp-b")
    port = _free_port()
    proc = _start_ui(work, port, start_new_session=True)
    try:
        yield _read_lines(proc, 2), port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.slow
@needs_chromium
def test_studies_of_two_experiments_are_side_by_side_through_the_printed_link(two_experiments):
    """The compare-experiments link shows both studies' parent runs (not their trials), each with its experiment and
    target error, sorted best target first, in MLflow's shared view."""
    lines, port = two_experiments
    assert len(lines) == 2 and lines[0].startswith("MLflow UI: http://127.0.0.1:"), lines
    assert lines[1].startswith("MLflow UI, all 2 studies of 2 experiments side by side: "), lines
    link = lines[1].split()[-1]
    assert link.startswith(f"http://127.0.0.1:{port}/#/compare-experiments/s?experiments="), link
    text = ""
    for budget_ms in (DEFAULT_BUDGET_MS, 3 * DEFAULT_BUDGET_MS):
        text = visible_text(dump_dom(link, size=WIDE, budget_ms=budget_ms))
        if "0.0123" in text and "0.0456" in text and "exp-b" in text:
            break
    # The view is what sets the filter (2 parent runs of 8 runs), the sort and the columns. Its banner ("You're viewing
    # a shared view") is not checked: MLflow hides it when the page's first experiment changes as the two load, and
    # which loads first varies (the view stays applied).
    assert "Displaying Runs from 2 Experiments" in text, text[:3000]
    assert "alpha-study" in text and "beta-study" in text and "2 matching runs" in text, text[:3000]
    assert "target_test_error" in text and "0.0123" in text and "0.0456" in text, text[:3000]
    assert "Experiment Name" in text and "exp-a" in text and "exp-b" in text, text[:3000]
    assert "Sort: target_test_error" in text and text.index("0.0123") < text.index("0.0456")  # best target first
    assert "trial 000" not in text  # the studies, not their trials
