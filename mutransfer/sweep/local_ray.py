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
import os
import sys

CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_only():
    """Around a local ``ray.init``: the node's address is 127.0.0.1 and its servers listen there."""
    before = os.environ.get(CLUSTER_ENV)
    os.environ[CLUSTER_ENV] = "0"
    # ray reads the variable once, when ray._private.ray_constants is first imported
    constants = sys.modules.get("ray._private.ray_constants")
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CLUSTER_ENV, None)
        else:
            os.environ[CLUSTER_ENV] = before
        if constants is not None:
            constants.ENABLE_RAY_CLUSTER = saved
