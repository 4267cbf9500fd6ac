"""Listening TCP sockets of processes, read from /proc (Linux): which addresses do they bind?"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct


def _address(hex_address: str) -> tuple[str, int]:
    ip, port = hex_address.split(":")
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)
    return socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *struct.unpack("<4I", raw))), int(port, 16)


def _listening_inodes() -> dict[int, tuple[str, int]]:
    out = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/net/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                out[int(fields[9])] = _address(fields[1])
    return out


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def listeners(pids) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes hold."""
    inodes = _listening_inodes()
    found = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in inodes:
                found.add((pid, *inodes[int(link[8:-1])]))
    return sorted(found)


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def exposed(pids) -> list[tuple[int, str, int]]:
    """The listeners that accept connections from other machines (0.0.0.0, ::, or an outside address)."""
    return [entry for entry in listeners(pids) if not is_loopback(entry[1])]
