"""Many `mutransfer` commands in one fresh interpreter: one import of torch and the CLI, not one per command.

A refusal test needs a process of its own only for what a process shows (the exit status of ``sys.exit``, what the
command imported); its exit code, stderr and stdout are ``main``'s. :func:`run_cli_batch` runs each case's
``main(args)`` in turn, in the case's folder, with its cache and stdout/stderr captured, and returns one
outcome per case (``returncode`` None where ``main`` raised: its traceback is in ``stderr``), with whether Ray and
MLflow had been imported by the end of that case; anything the process writes outside the cases fails the batch. Once a case imports one, every later case reports it
too: the first failing case names the culprit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_PROBE = """
import contextlib, io, json, os, sys, traceback, warnings
from mutransfer.cli.main import main
out = []
for case in json.loads(sys.argv[1]):
    os.chdir(case["cwd"])
    os.environ["MUTRANSFER_CACHE"] = os.path.join(case["cwd"], "cache")
    err, std = io.StringIO(), io.StringIO()
    # catch_warnings: a warning shown once per place is shown again for each case, as in a process of its own
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std), warnings.catch_warnings():
        try:
            rc = main(case["args"])
        except SystemExit as exc:
            rc = exc.code
        except BaseException:
            rc = None
            traceback.print_exc()
    out.append({"rc": rc, "stderr": err.getvalue(), "stdout": std.getvalue(),
                "ray": "ray" in sys.modules, "mlflow": "mlflow" in sys.modules})
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Outcome:
    """One case's exit code, output, and whether Ray / MLflow had been imported by its end."""

    returncode: int | None
    stdout: str
    stderr: str
    ray: bool
    mlflow: bool


def run_cli_batch(cases: Sequence[tuple[Path, Sequence[object]]]) -> list[Outcome]:
    """Run each ``(folder, args)`` as ``main(args)`` in ``folder`` (``MUTRANSFER_CACHE``: its ``cache``), in order, in
    one fresh interpreter; their outcomes in the same order."""
    payload = json.dumps([{"cwd": str(cwd), "args": [str(a) for a in args]} for cwd, args in cases])
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    proc = subprocess.run([sys.executable, "-c", _PROBE, payload], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # what no case captured (an import's warning, a write to the descriptor itself) would have been a case's stderr
    assert proc.stderr == "", f"written outside any case's capture: {proc.stderr[-3000:]}"
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    return [Outcome(r["rc"], r["stdout"], r["stderr"], r["ray"], r["mlflow"]) for r in rows]
