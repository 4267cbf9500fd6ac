"""docker/: the compose file's structure and safe defaults; `docker compose config` where a client exists."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.repo_paths import ROOT

DOCKER = ROOT / "docker"


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_has_ray_head_worker_and_mlflow_with_postgres(compose):
    services = compose["services"]
    assert {"ray-head", "ray-worker", "mlflow", "postgres"} <= set(services)
    mlflow_cmd = services["mlflow"]["command"]
    backend = mlflow_cmd[mlflow_cmd.index("--backend-store-uri") + 1]
    # the image installs psycopg2; SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3
    assert backend.startswith("postgresql+psycopg2://") and "@postgres:5432/" in backend
    assert mlflow_cmd[mlflow_cmd.index("--artifacts-destination") + 1] == "/mlartifacts"
    assert "artifacts:/mlartifacts" in services["mlflow"]["volumes"]
    assert "--head" in services["ray-head"]["command"]
    assert any(arg.startswith("--address=ray-head:") for arg in services["ray-worker"]["command"])


def test_published_ports_bind_to_loopback(compose):
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_ray_nodes_require_token_auth(compose):
    for name in ("ray-head", "ray-worker"):
        env = compose["services"][name]["environment"]
        assert env["RAY_AUTH_MODE"] == "token"
        assert env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?")
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_dockerfiles_install_torch_before_the_project_and_run_unprivileged(dockerfile):
    text = (DOCKER / dockerfile).read_text()
    assert text.index("torch") < text.index("pip install .")
    for folder in ("operators", "mutransfer", "studies"):
        assert f"COPY {folder} " in text
    assert "USER mutransfer" in text


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_dockerfiles_take_their_base_image_as_a_build_argument(dockerfile):
    """`--build-arg BASE_IMAGE=...` picks another base (a mirror, a digest); the default is the usual public one."""
    lines = [line.strip() for line in (DOCKER / dockerfile).read_text().splitlines()]
    default = next(line for line in lines if line.startswith("ARG BASE_IMAGE="))
    assert default.split("=", 1)[1].startswith(("python:", "nvidia/cuda:"))
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms == ["FROM ${BASE_IMAGE}"] and lines.index(default) < lines.index(froms[0])


def _compose_client():
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_config_validates_with_a_real_client():
    client = _compose_client()
    if client is None:
        pytest.skip("no docker compose client on this machine (CI validates structure above)")
    env = dict(os.environ, RAY_AUTH_TOKEN="test-token")
    ok = subprocess.run(
        [*client, "-f", str(DOCKER / "compose.yaml"), "config"], capture_output=True, text=True, env=env
    )
    assert ok.returncode == 0, ok.stderr
    assert "ray-worker" in ok.stdout and "127.0.0.1:5000:5000" in ok.stdout
    env.pop("RAY_AUTH_TOKEN")
    missing = subprocess.run(
        [*client, "-f", str(DOCKER / "compose.yaml"), "config"], capture_output=True, text=True, env=env
    )
    assert missing.returncode != 0 and "RAY_AUTH_TOKEN" in missing.stderr


def _engine_or_skip() -> list[str]:
    client = _compose_client()
    if client is None:
        pytest.skip("no docker compose client on this machine")
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        pytest.skip(
            "no Docker engine answers `docker info` (Debian: apt-get install docker.io; the development "
            "machines have none)"
        )
    return client


def _local_sources(env: dict) -> list[Path]:
    """Where MUTRANSFER_DOCKER_BASE_IMAGE names a base (a machine without Docker Hub: docs/robustness.md says how
    one is made with debootstrap), build the images from it: the CPU image on that base, PostgreSQL from Debian's
    package (tests/docker/postgres.Dockerfile), torch from MUTRANSFER_DOCKER_TORCH_WHEEL copied into
    docker/wheels/. Returns the files to remove afterwards."""
    base = os.environ.get("MUTRANSFER_DOCKER_BASE_IMAGE")
    if not base:
        return []
    tag = "mutransfer-test-postgres:local"
    build = subprocess.run(
        ["docker", "build", "-q", "-f", str(ROOT / "tests/docker/postgres.Dockerfile"), "--build-arg",
         f"BASE_IMAGE={base}", "-t", tag, str(ROOT)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    env.update(BASE_IMAGE=base, POSTGRES_IMAGE=tag)
    wheel = os.environ.get("MUTRANSFER_DOCKER_TORCH_WHEEL")
    if not wheel:
        return []
    copied = DOCKER / "wheels" / Path(wheel).name
    shutil.copy2(wheel, copied)
    env.update(TORCH_INDEX_URL="", TORCH_SPEC=f"torch=={Path(wheel).name.split('-')[1]}")
    return [copied]


@pytest.mark.slow
def test_the_compose_cluster_builds_starts_and_runs_a_sweep():
    """Where a Docker engine runs: build the CPU image, start the compose cluster (PostgreSQL, MLflow, Ray head and
    worker), run a small sweep on it with --address auto, read its runs back from the MLflow server, tear it down.
    The one command for users is the README's (`docker compose -p mutransfer -f docker/compose.yaml up -d --build`)."""
    import json
    import secrets

    client = _engine_or_skip()
    project = f"mutransfer-test-{secrets.token_hex(3)}"
    env = dict(os.environ, RAY_AUTH_TOKEN=secrets.token_hex(16), RAY_HEAD_CPUS="1", RAY_WORKER_CPUS="1")
    compose = [*client, "-p", project, "-f", str(DOCKER / "compose.yaml")]
    started = time.monotonic()
    base = os.environ.get("MUTRANSFER_DOCKER_BASE_IMAGE") or "python:3.11-slim"
    have = subprocess.run(["docker", "image", "inspect", base], capture_output=True).returncode == 0
    if not have and subprocess.run(["docker", "pull", base], capture_output=True, timeout=600).returncode != 0:
        pytest.skip(
            f"the base image {base} is neither here nor pullable (no registry access); name a local base with "
            "MUTRANSFER_DOCKER_BASE_IMAGE (docker/debian_base.sh makes one from Debian's registry)"
        )
    made = _local_sources(env)
    try:
        up = subprocess.run([*compose, "up", "-d", "--build"], capture_output=True, text=True, env=env, timeout=3600)
        assert up.returncode == 0, up.stderr[-3000:]
        up_seconds = time.monotonic() - started
        sweep = subprocess.run(
            [
                *compose, "exec", "-T", "ray-head",
                "mutransfer", "sweep", "--address", "auto", "--tracking-uri", "http://mlflow:5000",
                "--name", "compose-test", "--num-trials", "2", "--epochs", "2", "--target-epochs", "1", "--json",
            ],
            capture_output=True, text=True, env=env, timeout=1800,
        )  # fmt: skip
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        report = json.loads(sweep.stdout)
        assert report["trials"]["total"] == 2 and report["target"]["status"] == "completed"
        count = (
            "from mlflow.tracking import MlflowClient; c = MlflowClient('http://mlflow:5000'); "
            "print(len(c.search_runs([e.experiment_id for e in c.search_experiments()], max_results=100)))"
        )
        runs = subprocess.run(
            [*compose, "exec", "-T", "ray-head", "python", "-c", count], capture_output=True, text=True, env=env
        )
        assert runs.returncode == 0 and int(runs.stdout.strip()) >= 4, runs.stdout + runs.stderr  # parent, 2, target
        figures = {"build_and_up_s": round(up_seconds), "total_s": round(time.monotonic() - started)}
        print("compose cluster:", json.dumps({**figures, "runs": int(runs.stdout.strip())}))
    finally:
        subprocess.run([*compose, "down", "-v"], capture_output=True, env=env, timeout=600)
        for path in made:
            path.unlink(missing_ok=True)
