"""torch's process group for a target whose workers all run on this machine: every socket on loopback.

Ray Train's own set-up (``TorchConfig``) has rank 0 open torch's ``TCPStore`` (the rendezvous) with
``init_process_group``, which listens on all interfaces (``::``) whatever ``MASTER_ADDR`` says: torch has no
bind-address option. For a local sweep, where everything else listens on 127.0.0.1 (mutransfer._local_ray),
that left an unauthenticated key-value server on the machine's outside addresses while a multi-worker target
trained (issue "A team deployment", edge case 1).

:class:`LoopbackTorchConfig` keeps Ray Train's set-up wherever a worker is on another machine (a cluster needs
the address its nodes can reach). When every worker's node address is a loopback address, rank 0 binds the
store's socket to 127.0.0.1 itself and hands it to ``TCPStore`` (``master_listen_fd``), and gloo's and NCCL's
own connections are told to use the loopback interface (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``).
Checked by reading the workers' listening sockets: ``tests/test_loopback.py``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import ray
import torch.distributed as dist
from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
from ray.train.torch import TorchConfig
from ray.train.torch.config import _set_torch_distributed_env_vars, _TorchBackend

#: rank 0's listening socket for the store, kept open until the store has taken it (one per worker process)
_LISTENER: socket.socket | None = None


def _node_address() -> str:
    return str(ray.util.get_node_ip_address())


def _loopback_interface() -> str:
    """The loopback interface's name ('lo' on Linux, 'lo0' on macOS)."""
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return names[0] if names else "lo"


def _listen_on_loopback() -> int:
    """Rank 0: bind the store's socket to 127.0.0.1 on a free port; returns the port."""
    global _LISTENER
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    _LISTENER = listener
    return int(listener.getsockname()[1])


def _join(backend: str, world_rank: int, world: int, port: int, timeout_s: int) -> None:
    """Every rank: the store on 127.0.0.1:``port`` (rank 0 serves it on its bound socket), then the group."""
    interface = _loopback_interface()
    os.environ["GLOO_SOCKET_IFNAME"] = interface  # gloo's pair connections listen on this interface's address
    os.environ["NCCL_SOCKET_IFNAME"] = interface
    timeout = timedelta(seconds=timeout_s)
    master = world_rank == 0
    master_fd = _LISTENER.fileno() if master and _LISTENER is not None else None
    store = dist.TCPStore("127.0.0.1", port, world, is_master=master, master_listen_fd=master_fd, timeout=timeout)
    dist.init_process_group(backend=backend, store=store, rank=world_rank, world_size=world, timeout=timeout)


def on_loopback(addresses: list[str]) -> bool:
    """Whether every worker's node address is a loopback address (all workers on this machine, a local Ray)."""
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


class _LoopbackTorchBackend(_TorchBackend):
    def on_start(self, worker_group, backend_config) -> None:
        if not on_loopback(worker_group.execute(_node_address)):
            super().on_start(worker_group, backend_config)  # a cluster: the address its nodes reach
            return
        backend = backend_config.backend or "gloo"
        port = worker_group.execute_single(0, _listen_on_loopback)
        if not isinstance(worker_group, V1WorkerGroup):  # as Ray Train does: LOCAL_RANK, RANK, WORLD_SIZE, ...
            worker_group.execute(_set_torch_distributed_env_vars)
        ray.get(
            [
                worker_group.execute_single_async(
                    i, _join, backend=backend, world_rank=i, world=len(worker_group), port=port,
                    timeout_s=backend_config.timeout_s,
                )
                for i in range(len(worker_group))
            ]
        )  # fmt: skip


@dataclass
class LoopbackTorchConfig(TorchConfig):
    """Ray Train's ``TorchConfig`` whose rendezvous stays on loopback when all workers are on this machine."""

    @property
    def backend_cls(self):
        return _LoopbackTorchBackend
