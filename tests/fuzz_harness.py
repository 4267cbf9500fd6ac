"""The fuzz harness: run the CLI in-process on one input and classify what happened.

Every bad input must end the same way: exit code 2, exactly one line on stderr,
no traceback, and no file created or changed (in the working directory, the
data cache, or next to the input files). :func:`run_cli` runs
``mutransfer.cli.main.main(argv)`` in a fresh working directory with stdout and
stderr captured; the entry points of compute (``mutransfer._training.train``,
the coordinate check, ``ray.init``, the MLflow UI's subprocess) are replaced by
a sentinel, so a *valid* input stops where compute would start and is reported
as ``reached-compute`` instead of training.

Outcomes: ``refused`` (exit 2, one line, no traceback, nothing written: what a
bad input must give), ``reached-compute``, ``accepted`` (exit 0), ``crash`` (an
exception escaped main), ``bad-refusal`` (exit 2 but several lines, a traceback
or a file written), ``other-exit``. :data:`COUNTS` tallies them per family for
docs/robustness.md.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import numpy as np

#: family -> Counter of outcomes, filled by :func:`record`
COUNTS: dict[str, Counter] = defaultdict(Counter)


class ReachedCompute(BaseException):
    """Raised by the sentinels where compute would start (a BaseException: no handler of the CLI swallows it)."""


@dataclass
class Outcome:
    argv: list
    code: object
    stdout: str
    stderr: str
    changed: list = field(default_factory=list)
    kind: str = ""

    def describe(self) -> str:
        return (
            f"argv={self.argv!r}\n  outcome={self.kind} code={self.code!r} changed={self.changed}\n"
            f"  stderr={self.stderr[-3000:]!r}"
        )


def snapshot(*roots: Path) -> dict:
    """{path: (size, mtime_ns)} of every file under ``roots`` (folders count as entries too)."""
    out = {}
    for root in roots:
        root = Path(root)
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                try:
                    st = p.lstat()
                except FileNotFoundError:
                    continue
                out[str(p)] = (st.st_size, st.st_mtime_ns) if name in filenames else (None, None)
    return out


def _sentinel(*_args, **_kwargs):
    raise ReachedCompute()


@contextlib.contextmanager
def compute_guard():
    """Replace the entry points of compute by :func:`_sentinel` for the duration."""
    import ray

    import mutransfer._diagnostics.coord_check as coord_check
    import mutransfer._training as training

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(training, "train", _sentinel))
        stack.enter_context(mock.patch.object(coord_check, "coord_check", _sentinel))
        stack.enter_context(mock.patch.object(ray, "init", _sentinel))
        stack.enter_context(mock.patch("subprocess.Popen", _sentinel))
        yield


def run_cli(argv: list[str], *, watch: tuple = ()) -> Outcome:
    """Run ``main(argv)`` in a fresh working directory (cache inside it); classify the outcome."""
    from mutransfer.cli.main import main

    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        cwd = Path(tmp)
        cache = cwd / ".cache"
        before = snapshot(cwd, *watch)
        out, err = io.StringIO(), io.StringIO()
        with (
            contextlib.chdir(cwd),
            mock.patch.dict(os.environ, {"MUTRANSFER_CACHE": str(cache)}),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            compute_guard(),
        ):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as exc:
                code = exc.code
            except ReachedCompute:
                code = "reached-compute"
            except Exception:  # noqa: BLE001 - a crash is an outcome to report
                traceback.print_exc(file=err)
                code = "crash"
        after = snapshot(cwd, *watch)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    outcome = Outcome(list(argv), code, out.getvalue(), err.getvalue(), changed)
    outcome.kind = classify(outcome)
    return outcome


def classify(o: Outcome) -> str:
    if o.code == "reached-compute":
        return "reached-compute"
    if o.code == "crash":
        return "crash"
    if o.code in (0, None):
        return "accepted"
    if o.code == 2:
        lines = o.stderr.strip().splitlines()
        if len(lines) == 1 and "Traceback" not in o.stderr and not o.changed:
            return "refused"
        return "bad-refusal"
    return "other-exit"


def record(family: str, outcome: Outcome, detail: str | None = None) -> Outcome:
    """Count ``outcome`` under ``family`` (and under ``family/detail``, e.g. the command)."""
    for key in (family,) + ((f"{family}/{detail}",) if detail else ()):
        COUNTS[key][outcome.kind] += 1
        COUNTS[key]["tried"] += 1
    return outcome


def assert_refused(outcome: Outcome) -> None:
    """The property for a bad input: exit 2, one line on stderr, no traceback, nothing written."""
    assert outcome.kind == "refused", outcome.describe()


# ----------------------------------------------------------------------------- data files


def write_grid_file(
    path: Path, *, problem: str = "burgers", n: int = 12, resolution: int = 64, seed: int = 0, times: int = 0
) -> Path:
    """A valid file of the project's HDF5 schema (``mutransfer.data._hdf5_io``), random smooth-enough fields."""
    from mutransfer.data._hdf5_io import write_dataset
    from mutransfer.data._problem_facts import get_facts

    rng = np.random.default_rng(seed)
    dims = get_facts(problem).space_dim
    shape = (n,) + (resolution,) * dims
    x = rng.standard_normal(shape).astype(np.float32)
    y = (0.5 * x + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    grid = {name: np.arange(resolution) / resolution for name in ("x", "y")[:dims]}
    if times:
        y = np.repeat(y[..., None], times, axis=-1)
        grid["t"] = np.linspace(0.1, 1.0, times)
    return write_dataset(path, {"input": x, "output": y, "grid": grid, "attrs": {"problem": problem, "seed": seed}})


# ----------------------------------------------------------------------------- study and model folders


def folder_fuzz_settings(default_examples: int):
    """Hypothesis settings of the folder fuzz tests: ``MUTRANSFER_FUZZ_EXAMPLES`` cases (else ``default_examples``),
    the same sequence on every run (so a CI failure reproduces), no deadline, no example database."""
    from hypothesis import HealthCheck, settings

    return settings(
        max_examples=int(os.environ.get("MUTRANSFER_FUZZ_EXAMPLES", default_examples)),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def json_values(*likely: object, text: int = 12, leaves: int = 8):
    """Arbitrary JSON values (NaN and infinities included; no subnormal floats: a test before may set flush-to-zero),
    with the values in ``likely`` drawn more often than chance would."""
    from hypothesis import strategies as st

    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False)
        | st.text(max_size=text)
    )
    if likely:
        scalars = scalars | st.sampled_from(list(likely))
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=leaves,
    )
