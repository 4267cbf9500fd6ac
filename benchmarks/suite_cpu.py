"""Where the test suite's CPU goes: a pytest plugin that books each test's CPU seconds, its subprocesses included.

The suite keeps both cores busy (docs/architecture.md, "The suite's time"), so its wall time is its CPU time over
two; a test's own wall time says little (it stretches with whatever the other worker runs). This plugin measures
CPU instead: each pytest process (each xdist worker) moves itself into a cgroup of its own (Linux, cgroup v1
``cpuacct``, as root), and every process it starts (a CLI driver, Ray's daemons and workers, a server) starts there
too, so the cgroup's counter before and after a test is the test's CPU, whatever ran it. A process a test leaves
behind is booked to the next test of the same worker.

Usage (one JSON line per test to ``--suite-cpu-out``; summarised by ``python benchmarks/suite_cpu.py FILE``)::

    python -m pytest -p benchmarks.suite_cpu --suite-cpu-out=/tmp/cpu.jsonl -n 2 --dist loadfile
    python benchmarks/suite_cpu.py /tmp/cpu.jsonl

Write the option with ``=``: pytest reads ``--suite-cpu-out /tmp/cpu.jsonl`` (a space) before the plugin is loaded, takes
the path for a test path, and makes the common folder (``/tmp``) its rootdir; ``pyproject.toml``'s markers and
``tests/slow_files.json``'s order are then not used (seen on 2026-11-29: test ids ``wtfull/tests/...``, "Unknown
pytest.mark.slow").

Where the cgroup cannot be made (not root, no cgroup v1 ``cpuacct``) the run stops with a usage error. A process
started through a daemon (docker's containers) is not booked.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def pytest_addoption(parser):
    parser.addoption(
        "--suite-cpu-out", default=None, help="file of JSON lines: each test's CPU seconds (benchmarks/suite_cpu.py)"
    )


class _Group:
    """This process's own cpuacct cgroup, made on first use; ``seconds()`` reads its counter."""

    def __init__(self) -> None:
        self.path = CPUACCT / f"mutransfer-suite-{os.getpid()}"
        self.path.mkdir(exist_ok=True)
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        """Back to the root group, then the group removed (left where a process a test started still runs in it)."""
        try:
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            self.path.rmdir()
        except OSError:
            pass


_group: _Group | None = None
_out: Path | None = None


def pytest_configure(config):
    global _group, _out
    out = config.getoption("--suite-cpu-out")
    if not out:
        return
    out = Path(out).resolve()  # a test that changes directory does not move it
    worker = hasattr(config, "workerinput")  # an xdist worker (the controller runs no test)
    if not worker:
        out.write_text("")  # a new run's rows, not appended to an earlier run's
        if getattr(config.option, "numprocesses", None):
            return
    try:
        _group = _Group()
    except OSError as exc:
        raise pytest.UsageError(f"--suite-cpu-out: no cgroup to book CPU in ({exc}); run as root on cgroup v1") from exc
    _out = out


def pytest_unconfigure(config):
    if _group is not None:
        _group.remove()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _group is None or _out is None:
        yield
        return
    cpu, wall = _group.seconds(), time.monotonic()
    yield
    row = {"test": item.nodeid, "cpu_s": round(_group.seconds() - cpu, 2), "wall_s": round(time.monotonic() - wall, 2)}
    with _out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def summarise(path: Path, top: int = 40) -> str:
    """Per file and per test, the CPU seconds, largest first, with the running share of the whole."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return f"{path}: no test booked"
    total = sum(r["cpu_s"] for r in rows)
    per_file: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        per_file[r["test"].split("::")[0]] += r["cpu_s"]
        count[r["test"].split("::")[0]] += 1
    lines = [
        f"{len(rows)} tests, {total:.0f} CPU-s in all (wall on 2 busy cores about {total / 2 / 60:.1f} min)",
        "",
        "per file:",
    ]
    acc = 0.0
    for name, cpu in sorted(per_file.items(), key=lambda kv: -kv[1])[:top]:
        acc += cpu
        lines.append(f"{cpu:8.1f} {count[name]:4d} {acc / total:5.0%}  {name}")
    lines += ["", "per test:"]
    for r in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"{r['cpu_s']:8.1f} {r['wall_s']:7.1f}  {r['test']}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1])))
