"""`mutransfer sweep` submitted with `ray job submit` to a real 2-node Ray cluster (slow).

The cluster runs on loopback: a head and a worker node (`ray start --block`, one CPU
each, token authentication with a token generated here, every port chosen free at
run time). A tiny study (2 proxy trials, 1 CPU each, at most 2 at a time) is
submitted as a Ray job with `--address auto`; both trials can only run at the same
time if one lands on each node.

Node placement is checked without any product change: every proxy trial appends its
process id to ``trials/<trial_id>/executions.jsonl`` (mutransfer._sweep.trial), and
Ray's state API (``ray.util.state.list_actors``, asked from a subprocess that holds
the token) maps each trial actor's pid to its node id. Both nodes run on this
machine, so the pids are unique across them.

Teardown kills only what this test started: the two `ray start --block` processes
(SIGTERM makes them stop their raylet, GCS, dashboard, workers), then, as a fallback,
any process still carrying this test's unique RAY_AUTH_TOKEN in its environment.
`ray stop` is never used: other Ray clusters may run on the same machine.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
import time

import pytest

from tests.ray_cluster import RAY
from tests.sweep_helpers import mlflow_runs, write_tiny_data, write_tiny_study

# alone: a 2-node cluster's placement and node-kill timing, with no other test on the machine's 2 cores
pytestmark = [pytest.mark.slow, pytest.mark.alone]

JOB_TIMEOUT_S = 300  # submission to SUCCEEDED, on a loaded 2-core machine


def _submit(cluster, tmp_path, sweep: list[str], prefix: str) -> str:
    """Submit ``sweep`` to the cluster as a Ray job, wait for it (JOB_TIMEOUT_S) and assert it succeeded: its logs."""
    # No --working-dir: the package is installed (editable) on every node, so nothing is uploaded.
    # The entrypoint is a shell command; `cd` keeps any relative output (e.g. ./mlruns) in tmp_path.
    entrypoint = f"cd {shlex.quote(str(tmp_path))} && {shlex.join(sweep)}"
    job_id = f"{prefix}-{secrets.token_hex(4)}"
    runtime_env = {"env_vars": {"MUTRANSFER_CACHE": str(tmp_path / "cache"), "TQDM_DISABLE": "1"}}
    cluster.run(
        RAY, "job", "submit",
        "--address", cluster.dashboard,
        "--submission-id", job_id,
        "--runtime-env-json", json.dumps(runtime_env),
        "--no-wait",
        "--", "bash", "-c", entrypoint,
        timeout=120,
    )  # fmt: skip

    def job_logs() -> str:
        try:
            proc = cluster.run(RAY, "job", "logs", "--address", cluster.dashboard, job_id, timeout=60, check=False)
            return proc.stdout[-8000:] + proc.stderr[-2000:]
        except subprocess.TimeoutExpired:
            return "(`ray job logs` timed out)"

    deadline, status = time.monotonic() + JOB_TIMEOUT_S, ""
    while time.monotonic() < deadline:
        proc = cluster.run(RAY, "job", "status", "--address", cluster.dashboard, job_id, timeout=60, check=False)
        status = proc.stdout + proc.stderr
        # `ray job status` prints e.g. "Job 'x' succeeded" / "Job 'x' failed" / "... stopped".
        if any(f"' {s}" in status.lower() for s in ("succeeded", "failed", "stopped")):
            break
        time.sleep(3)
    else:
        cluster.run(RAY, "job", "stop", "--address", cluster.dashboard, job_id, timeout=60, check=False)
        pytest.fail(
            f"job {job_id} did not finish in {JOB_TIMEOUT_S} s; last status:\n{status}\njob logs:\n{job_logs()}"
        )
    logs = job_logs()
    assert "' succeeded" in status.lower(), f"job {job_id} did not succeed:\n{status}\njob logs:\n{logs}"

    return logs


def _completed_job(cluster, tmp_path, name: str, trials: int, extra: list[str], **study) -> tuple:
    """A tiny study (``trials`` proxies, a 1-epoch target not started early, ``study``: write_tiny_study's other
    fields) swept as a job with ``extra`` flags; asserts it completed with every trial: (study folder, MLflow
    URI, the job's logs)."""
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    path = write_tiny_study(
        tmp_path, data, name=name, trials=trials, target_epochs=1, target={"start_early": False}, **study
    )
    runs, uri = tmp_path / "runs", f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = ["mutransfer", "sweep", "--study", str(path), "--address", "auto", *extra]
    sweep += ["--tracking-uri", uri, "--runs-dir", str(runs), "--json"]
    logs = _submit(cluster, tmp_path, sweep, name)
    sdir = runs / name  # the sweep completed: study state on disk
    state = json.loads((sdir / "state.json").read_text()) if (sdir / "state.json").exists() else {}
    assert state.get("phase") == "done", f"study state: {state}\njob logs:\n{logs}"
    assert len(state["trials"]) == trials
    return sdir, uri, logs


def test_sweep_job_runs_trials_on_both_nodes(cluster, tmp_path):
    # Trials long enough (200 epochs, no ASHA stop) that the two overlap: with 2-epoch trials the first could end
    # before the second's actor had started on the worker node, and Tune then ran both on the head node.
    # No early target: started once both trials are handed out, it may take the worker node's CPU before the second
    # trial's actor holds it (seen with the suite on two workers), and both trials then run on the head, one after
    # the other (tests/sweep/test_early_target.py tests the early start).
    flags = ["--proxy-K", "4", "--target-K", "8", "--num-trials", "2", "--epochs", "200", "--target-epochs", "1"]
    sdir, uri, logs = _completed_job(
        cluster,
        tmp_path,
        "cluster-test",
        2,
        [*flags, "--name", "cluster-test"],
        epochs=200,
        grace=200,
        max_concurrent=2,
    )
    names = {r.data.tags.get("mlflow.runName", "") for r in mlflow_runs(uri)}
    assert len(names) >= 4, names  # parent + 2 proxies + target

    # Placement: trial pid (executions.jsonl) -> actor (state API) -> node id.
    from mutransfer._sweep.trial import read_executions

    trial_pids = {}
    for tdir in sorted((sdir / "trials").iterdir()):
        execs = [e for e in read_executions(tdir) if e["kind"] == "train"]
        assert execs, f"trial {tdir.name} recorded no execution"
        trial_pids[tdir.name] = {e["pid"] for e in execs}
    assert len(trial_pids) == 2, trial_pids

    nodes = {n["node_id"]: n for n in cluster.state("nodes")}
    assert len(nodes) == 2, nodes
    actors = cluster.state("actors")
    node_of_pid = {int(a["pid"]): a["node_id"] for a in actors if a.get("pid")}
    placement = {}
    for trial, pids in trial_pids.items():
        missing = [p for p in pids if p not in node_of_pid]
        assert not missing, f"trial {trial}: pid(s) {missing} not found among the job's actors {sorted(node_of_pid)}"
        placement[trial] = {node_of_pid[p] for p in pids}
    used = set().union(*placement.values())
    assert used == set(nodes), (
        f"trials did not run on both nodes: {placement}; nodes: "
        f"{ {k: ('head' if v.get('is_head_node') else 'worker') for k, v in nodes.items()} }"
    )


def test_a_worker_node_killed_mid_trial_the_trial_resumes_on_the_head_and_the_study_completes(cluster, tmp_path):
    """Two long trials, one per node; the worker node (its `ray start`, raylet and workers) is SIGKILLed once both
    have checkpoints. Tune retries the lost trial on the head node from its last checkpoint; the study completes
    with one MLflow run per trial holding every epoch once."""
    import sys

    from mutransfer._sweep.trial import read_executions, read_trial_history

    epochs = 60
    data = write_tiny_data(tmp_path / "burgers_tiny.h5")
    study = write_tiny_study(
        tmp_path, data, name="nodekill", trials=2, epochs=epochs, grace=epochs, target_epochs=1, max_failures=2
    )
    db, runs = tmp_path / "mlflow.db", tmp_path / "runs"
    cmd = [
        *(sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study)),
        *("--address", f"127.0.0.1:{cluster.gcs_port}", "--tracking-uri", f"sqlite:///{db}"),
        *("--runs-dir", str(runs), "--json"),
    ]
    trials = runs / "nodekill" / "trials"
    err = tmp_path / "driver.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(cmd, env=cluster.env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        deadline = time.monotonic() + JOB_TIMEOUT_S

        def both_checkpointed() -> bool:
            keys = [d for d in trials.glob("t*") if d.is_dir()] if trials.exists() else []
            return len(keys) == 2 and all(len(read_trial_history(d)) >= 3 for d in keys)

        while not both_checkpointed():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
            time.sleep(0.2)
        done_at_kill = {d.name: len(read_trial_history(d)) for d in trials.glob("t*")}
        killed = cluster.kill_node("worker")  # the node: `ray start`, its raylet, its workers
        assert len(killed) >= 3, killed  # at least `ray start`, the raylet and the trial's worker
        out, _ = proc.communicate(timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 0, err.read_text()[-3000:]
    report = json.loads(out)
    assert report["trials"]["total"] == 2 and report["target"]["status"] == "completed"

    starts = {d.name: [e for e in read_executions(d) if e["kind"] == "train"] for d in sorted(trials.glob("t*"))}
    retried = [key for key, s in starts.items() if len(s) > 1]
    assert len(retried) == 1, (starts, done_at_kill)  # the trial on the lost node, and only it, ran again
    assert starts[retried[0]][-1]["resumed_from_epoch"] is not None, starts[retried[0]]  # from its checkpoint
    for table in report["trial_table"]:
        assert table["status"] == "completed", table

    runs_by_kind: dict[str, list] = {}
    for run in mlflow_runs(f"sqlite:///{db}"):
        runs_by_kind.setdefault(run.data.tags.get("mutransfer.kind"), []).append(run)
    assert sorted(r.data.tags["mutransfer.trial_id"] for r in runs_by_kind["proxy_trial"]) == ["t0000", "t0001"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    for run in runs_by_kind["proxy_trial"]:
        assert run.info.status == "FINISHED"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_error")]
        assert sorted(steps) == sorted(set(steps)) and len(steps) == epochs, (run.info.run_name, len(steps))
    print("worker node killed:", json.dumps({"epochs_at_kill": done_at_kill, "retried": retried[0]}))


def test_populations_on_a_cluster_train_on_both_nodes(cluster, tmp_path):
    """``--executor ray-population`` submitted as a job: a window's populations are Ray tasks of one CPU each, so the
    2-node cluster (one CPU a node) trains two of them at once only with one on each node. Each trial's pid
    (executions.jsonl) is mapped to its node by Ray's state API (workers)."""
    sdir, _, logs = _completed_job(
        cluster, tmp_path, "cluster-pop", 8, ["--executor", "ray-population"], epochs=3, grace=1, max_concurrent=4
    )

    from mutransfer._sweep.trial import read_executions

    execs = {t.name: [e for e in read_executions(t) if e["kind"] == "train"] for t in (sdir / "trials").iterdir()}
    assert all(execs.values()), execs
    assert max(e.get("population", 1) for es in execs.values() for e in es) >= 2, execs  # populations, not lone trials
    nodes = {n["node_id"] for n in cluster.state("nodes")}
    node_of_pid = {int(w["pid"]): w["node_id"] for w in cluster.state("workers") if w.get("pid")}
    used = {node_of_pid.get(e["pid"]) for es in execs.values() for e in es}
    assert used == nodes, f"tasks ran on {used}, the cluster's nodes are {nodes}; job logs:\n{logs[-3000:]}"
