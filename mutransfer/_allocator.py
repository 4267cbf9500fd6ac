"""The tuned glibc allocator for every process the product starts.

glibc serves an allocation above its mmap threshold (128 KiB, rising to 32 MiB) with a
fresh ``mmap`` and returns it to the OS when freed, so every training step page-faults
its large tensors back in: 84,000 minor faults and 273 ms per step for a 2D FNO
(64×64, K 12, width 32, batch 20) on this project's 2-core machine, against 1 fault and
169 ms with the two variables below (``python benchmarks/bench_allocator.py``,
docs/benchmarks.md).
glibc reads them once, when a process starts, so they are set in the environment of
the processes the product starts: the CLI re-executes itself once with them
(:mod:`mutransfer.cli.launch`), a local Ray inherits them from the driver, and a
cluster's workers get them through the job's runtime environment.

Nothing is changed when the user chose for themselves: when either variable is
already set, when ``LD_PRELOAD`` names another allocator (jemalloc, tcmalloc,
mimalloc), on a C library other than glibc, or with ``MUTRANSFER_TUNED_ALLOCATOR=0``.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator, Mapping

#: never give memory back to the OS (2^36 bytes = 64 GiB of free heap kept), and serve
#: every allocation from the heap rather than from a fresh mmap
TUNED_ENV: dict[str, str] = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**36)}

#: set to 0 to leave the allocator as the environment has it
OPT_OUT_ENV = "MUTRANSFER_TUNED_ALLOCATOR"

#: set by the command's re-exec (mutransfer.cli.launch): the names of the variables it added, comma-separated
SET_BY_US_ENV = "MUTRANSFER_TUNED_ALLOCATOR_SET"

#: an LD_PRELOAD naming one of these is the user's own allocator
OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")


def wanted_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allocator variables the processes started from ``environ`` (default ``os.environ``) should run with.

    TUNED_ENV, or {} where the user chose for themselves (opt-out, their own values,
    another allocator preloaded) or the C library is not glibc.
    """
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return {}
    if any(name in env and env[name] != value for name, value in TUNED_ENV.items()):
        return {}  # the user's own settings
    if any(name in env.get("LD_PRELOAD", "") for name in OTHER_ALLOCATORS):
        return {}
    if platform.libc_ver()[0] != "glibc":
        return {}
    return dict(TUNED_ENV)


def allocator_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables to add to ``environ`` (default ``os.environ``) for the tuned allocator; {} when none is missing."""
    env = os.environ if environ is None else environ
    return {name: value for name, value in wanted_env(env).items() if env.get(name) != value}


def cluster_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables to hand a cluster's workers through the job's runtime environment (``env_vars``).

    A cluster's workers do not inherit the driver's environment, so the tuned variables go
    with the job, but never one that came from elsewhere: a driver running as a submitted Ray
    job already has its job's ``env_vars`` (Ray refuses the same key from the job and from
    ``ray.init``), and the user's own values are theirs. Sent: the variables missing here, and
    those this product's command added itself (named in ``SET_BY_US_ENV``).
    """
    env = os.environ if environ is None else environ
    ours = set(env.get(SET_BY_US_ENV, "").split(","))
    return {name: value for name, value in wanted_env(env).items() if name in ours or env.get(name) != value}


@contextlib.contextmanager
def environment(variables: Mapping[str, str]) -> Iterator[None]:
    """Around the start of child processes: ``variables`` set (the children keep them), the driver's restored."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def tuned_for_children() -> Iterator[dict[str, str]]:
    """Around the start of child processes (a local ``ray.init``): they inherit the tuned allocator.

    Yields the variables it set; the driver's own environment is restored afterwards.
    """
    added = allocator_env()
    with environment(added):
        yield added
