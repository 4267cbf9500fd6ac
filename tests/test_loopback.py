"""Loopback only: a local sweep's Ray listens on 127.0.0.1; the MLflow UI refuses foreign Host headers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.net_helpers import exposed, listeners
from tests.repo_paths import ROOT


def test_the_classifier_finds_a_listener_on_all_interfaces():
    """The check below fires on a socket bound to 0.0.0.0 or ::, not on one bound to 127.0.0.1."""
    opened = []
    for family, address in (
        (socket.AF_INET, "0.0.0.0"),
        (socket.AF_INET, "127.0.0.1"),
        (socket.AF_INET6, "::"),
        (socket.AF_INET6, "::1"),
    ):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.bind((address, 0))
        s.listen()
        opened.append((address, s.getsockname()[1], s))
    try:
        mine = {port for _, _, port in listeners([os.getpid()])}
        bad = {port for _, _, port in exposed([os.getpid()])}
        for address, port, _ in opened:
            assert port in mine
            assert (port in bad) == (address in ("0.0.0.0", "::")), address
    finally:
        for *_, s in opened:
            s.close()


_RAY_SCRIPT = """
import json, os, sys
from tests.net_helpers import exposed, listeners, process_tree
if sys.argv[1] == "sweep":
    from mutransfer._local_ray import start_ray  # how sweep and landscape start Ray
    start_ray(None)
else:  # the way Ray was started before: ray.init on Linux prepares for a cluster
    import ray
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
import ray

@ray.remote
def node_ip():
    return ray.util.get_node_ip_address()

ip = ray.get(node_ip.remote())  # a worker runs: its servers listen too
tree = process_tree(os.getpid())
print(json.dumps({"node_ip": ip, "listeners": listeners(tree), "exposed": exposed(tree)}))
ray.shutdown()
"""


def _ray_listeners(how: str) -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        RAY_USAGE_STATS_ENABLED="0",
    )
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    out = subprocess.run([sys.executable, "-c", _RAY_SCRIPT, how], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two Ray starts
def test_the_local_ray_of_a_sweep_listens_on_loopback_only():
    sweep = _ray_listeners("sweep")
    assert sweep["node_ip"] == "127.0.0.1"
    assert len(sweep["listeners"]) >= 5  # GCS, raylet, agents, workers: the check saw them
    assert sweep["exposed"] == [], sweep["exposed"]
    plain = _ray_listeners("plain")  # the check fires on Ray started without the loopback setting
    assert plain["exposed"], plain["listeners"]


_TARGET_SCRIPT = """
import json, os, sys
import ray
from mutransfer._local_ray import start_ray
from mutransfer._sweep.loopback_group import LoopbackTorchConfig
from tests.net_helpers import exposed, listeners

start_ray(None)
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

def _title(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""

def look():  # in a worker, while the target's trainer would run: what does this process listen on?
    import torch.distributed as dist
    pid = os.getpid()
    return {"group": dist.is_initialized(), "listeners": len(listeners([pid])), "exposed": len(exposed([pid]))}

from mutransfer._sweep._target_actor import TargetWorker

worker = ray.remote(num_cpus=1)(TargetWorker).remote(1)  # the one-CPU-worker target's actor, as the product makes it
ray.get(worker.__ray_ready__.remote())
(pid,) = [int(p) for p in os.listdir("/proc") if p.isdigit() and _title(int(p)).startswith("ray::TargetWorker")]
found = {"actor": {"listeners": len(listeners([pid])), "exposed": len(exposed([pid]))}}
ray.kill(worker)  # its CPU, for the two workers below
# "2": DDP over gloo, as the product sets it up; "ray": the same two workers under Ray Train's own TorchConfig (how
# the product did it before), to show the check sees a rendezvous
for name, config in (("2", LoopbackTorchConfig(backend="gloo")), ("ray", TorchConfig(backend="gloo"))):
    trainer = TorchTrainer(lambda cfg: look(), scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                           run_config=RunConfig(storage_path=sys.argv[1], name=f"w{name}"), torch_config=config)
    found[name] = trainer.fit().return_value  # rank 0's
print(json.dumps(found))
"""


@pytest.mark.slow  # a local Ray and two Ray Train runs
def test_the_targets_workers_listen_on_loopback_only(tmp_path):
    """Edge case 1 of the issue "A team deployment": a one-worker CPU target (the default) trains in a Ray actor,
    without torch's process group; a target of two workers (DDP over gloo) has its rendezvous (TCPStore) and gloo's
    connections on 127.0.0.1 (mutransfer/_sweep/loopback_group.py). Under Ray Train's own set-up the same two
    workers' rank 0 listens on all interfaces, which shows the check sees a rendezvous."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    out = subprocess.run(
        [sys.executable, "-c", _TARGET_SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=400
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["actor"]["listeners"] >= 1 and found["actor"]["exposed"] == 0, found  # Ray's worker server: seen
    assert found["2"]["group"] is True and found["2"]["exposed"] == 0, found
    assert found["2"]["listeners"] > found["actor"]["listeners"], found  # the store and gloo listen, on loopback
    assert found["ray"]["group"] is True and found["ray"]["exposed"] >= 1, found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, host: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow  # starts the MLflow UI server
def test_the_mlflow_ui_binds_loopback_and_refuses_foreign_host_headers(tmp_path):
    from mutransfer._sweep.endpoints import check_tracking_uri
    from mutransfer.cli._ui_cmd import ui_command

    port = _free_port()
    proc = subprocess.Popen(
        ui_command(f"sqlite:///{tmp_path / 'mlflow.db'}", port=port),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/health"
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                if _get(url) == 200:
                    break
            except OSError:
                assert proc.poll() is None, "the MLflow UI exited"
                time.sleep(0.5)
        assert _get(url) == 200
        for path in ("/", "/api/2.0/mlflow/experiments/search?max_results=1"):  # the UI and its API (/health is exempt)
            page = f"http://127.0.0.1:{port}{path}"
            assert _get(page, host="evil.example.com") in (400, 403)  # DNS rebinding: a foreign Host is refused
            assert _get(page, host=f"evil.example.com:{port}") in (400, 403)
            assert _get(page, host=f"localhost:{port}") == 200
        check_tracking_uri(f"http://127.0.0.1:{port}")  # a real MLflow server passes the endpoint check
        from tests.net_helpers import process_tree

        ui = listeners(process_tree(proc.pid))
        assert ui and exposed(process_tree(proc.pid)) == [], ui
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
