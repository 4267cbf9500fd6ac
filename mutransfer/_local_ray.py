"""A local Ray that listens on 127.0.0.1 only.

On Linux a plain ``ray.init()`` prepares for a multi-node cluster: it advertises the
machine's outside address and its servers listen on every interface (measured with
Ray 2.60: the GCS, the raylet, every worker's gRPC server on ``::``, the dashboard
agent and the runtime-env agent on ``0.0.0.0`` or the outside address). Ray treats a
node as single-machine only when ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (the default
on macOS and Windows): the node's address is then 127.0.0.1, and the servers of the
GCS, raylet, workers and agents, and the metrics export port, bind to it. The
dashboard stays off (``include_dashboard=False``). :func:`loopback_only` applies that
for the duration of ``ray.init`` (the processes it starts keep it); a driver that
joins a cluster (``--address``) is not touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from mutransfer._allocator import cluster_env, environment, tuned_for_children

CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

#: A local Ray starts one idle Python worker per CPU when the driver connects. Ray Tune's trials and Ray Train's actors
#: each get a worker of their own, so a sweep leaves them idle (a grid's Ray tasks, `--verify`'s and `landscape`'s,
#: start workers when they need them instead), and on 2 cores they import Ray beside the driver's start. This raylet
#: setting starts none; a value the user set is kept (measured: docs/architecture.md, "The suite's time").
NO_IDLE_WORKERS = {"RAY_prestart_worker_first_driver": "0"}


@contextlib.contextmanager
def loopback_only():
    """Around a local ``ray.init``: the node's address is 127.0.0.1 and its servers listen there."""
    # ray reads the variable once, when ray._private.ray_constants is first imported
    constants = sys.modules.get("ray._private.ray_constants")
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        with environment({CLUSTER_ENV: "0"}):
            yield
    finally:
        if constants is not None:
            constants.ENABLE_RAY_CLUSTER = saved


def cluster_runtime_env(code: tuple[str, ...] = ()) -> dict[str, object] | None:
    """The job's runtime environment on a cluster: the tuned allocator's variables (its workers do not inherit
    the driver's environment) and ``code``, the user's modules a study imports (a factory ``operator.type``),
    shipped to every node as Ray ``py_modules``."""
    env: dict[str, object] = {}
    wanted = cluster_env()
    if wanted:
        env["env_vars"] = wanted
    if code:
        env["py_modules"] = list(code)
    return env or None


def start_ray(address: str | None, code: tuple[str, ...] = ()) -> bool:
    """Start a local Ray (or connect to ``address``); False if Ray was already initialised by the caller.

    Every worker runs under the tuned allocator (:mod:`mutransfer._allocator`): a local
    Ray's processes inherit it from the driver's environment while it starts; a
    cluster's workers get it through the job's runtime environment, with ``code`` (the
    user's modules: :func:`cluster_runtime_env`). A local Ray's workers import ``code``
    from where the driver found it.
    """
    import ray  # noqa: PLC0415 -- deferred: Ray loads only when a sweep runs, not with `import mutransfer._sweep` (mutransfer report)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    # Worker stdout/stderr stay in Ray's session logs (/tmp/ray/session_latest/logs): Ray Train's
    # controller is chatty. Trial and worker errors still reach the driver as exceptions.
    if address is None:
        # servers on 127.0.0.1, no dashboard, no idle workers; the workers' allocator tuned
        unset = {name: value for name, value in NO_IDLE_WORKERS.items() if name not in os.environ}
        with loopback_only(), tuned_for_children(), environment(unset):
            ray.init(
                address="local",  # a new Ray of its own: never one named by RAY_ADDRESS or /tmp/ray's last cluster file
                num_cpus=os.cpu_count() or 1,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
    else:
        runtime_env = cluster_runtime_env(code)
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, runtime_env=runtime_env)
    return True
