"""Shared by the benchmarks that measure a transfer with `sweep --verify` (k_rule_verify.py, resolution_verify.py).

:func:`run_verify_study` runs one study end to end through the CLI (``mutransfer sweep --study FILE --verify
--json``, local Ray, MLflow in sqlite under the work folder; a study the folder already holds is resumed, so a
finished one reports again) and :func:`verify_summary` keeps what the tables need: the transfer error, the
search gap, the target's optimum against the transferred LR, the regret, the verdict and the per-seed optima.
:func:`transfer_error_difference` compares two studies' transfer errors with a Welch–Satterthwaite interval.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mutransfer._diagnostics.statistics import contrast_ci  # noqa: E402


def make_burgers(work: Path, name: str, n: int, alpha: float) -> Path:
    """Burgers at 256 points, ``n`` samples, seed 0, initial field smoothness ``alpha``, as the project's HDF5."""
    from mutransfer.data._burgers import generate_burgers  # noqa: PLC0415 -- deferred: only when data is made
    from mutransfer.data._hdf5_io import write_dataset  # noqa: PLC0415

    path = work / f"{name}.h5"
    if not path.exists():
        write_dataset(path, generate_burgers(n, 256, seed=0, alpha=alpha, progress=False))
    return path


def run_verify_study(work: Path, mapping: dict, points: int, seeds: int) -> dict:
    """The report of ``mapping`` (a study) run with ``--verify --verify-points points --verify-seeds seeds``."""
    name = mapping["name"]
    study_file = work / f"{name}.yaml"
    study_file.write_text(yaml.safe_dump(mapping, sort_keys=False))
    cmd = [
        sys.executable,
        "-m",
        "mutransfer",
        "sweep",
        "--study",
        str(study_file),
        "--verify",
        "--verify-points",
        str(points),
        "--verify-seeds",
        str(seeds),
        "--runs-dir",
        str(work / "runs"),
        "--tracking-uri",
        f"sqlite:///{work / 'mlflow.db'}",
        "--json",
    ]
    if (work / "runs" / name / "study.yaml").exists():
        cmd.append("--resume")  # a study this folder already holds: finished, it reports again; else it goes on
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=work)
    if out.returncode != 0:
        raise SystemExit(f"{name}: sweep exited {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def _estimate(d: dict | None) -> dict | None:
    """verify's {mean, ci, n} as the {value, ci, n} of its transfer error."""
    return None if not d else {"value": d.get("mean"), "ci": d.get("ci"), "n": d.get("n")}


def verify_summary(report: dict, started: float) -> dict:
    """The verification's numbers of one study's report."""
    verify = report["verification"]
    return {
        "transfer_error": verify.get("transfer_error"),
        "distance": _estimate(verify.get("distance_decades")),
        "regret": _estimate(verify.get("regret")),
        "search_gap": verify.get("search_gap"),
        "verdict": verify.get("verdict"),
        "proxy_seed_optima": verify.get("proxy_seed_optima"),
        "target_seed_optima": verify.get("seed_optima"),
        "transferred_lr": verify.get("transferred_lr"),
        "target_test_error": (report.get("target") or {}).get("test_error"),
        "seconds": (report.get("compute") or {}).get("sweep_wall_seconds") or time.time() - started,
    }


def _coordinates(row: dict) -> tuple[list[float], list[float]]:
    """(target, proxy) per-seed optima in log10 master LR, the ones verify's transfer error uses (no edge)."""
    target = [math.log10(s["optimum_lr"]) for s in row["target_seed_optima"] or [] if not s.get("at_edge")]
    proxy = [float(s["coordinate"]) for s in row["proxy_seed_optima"] or [] if s.get("coordinate") is not None]
    return target, proxy


def transfer_error_difference(a: dict, b: dict) -> dict | None:
    """transfer error(a) − transfer error(b), decades, with the Welch–Satterthwaite 95 % t interval of
    :func:`mutransfer._diagnostics.statistics.contrast_ci` over the four independent sets of per-seed optima (each
    study's target and proxy; its coverage at 2-5 seeds is tested in tests/diagnostics/test_statistics.py)."""
    groups = [*_coordinates(a), *_coordinates(b)]
    if any(len(g) < 2 for g in groups):
        return None
    e = contrast_ci(*groups)
    return {"value": e.mean, "ci": [e.lo, e.hi], "n": e.n}


def ci_text(e: dict | None) -> str:
    """ "+0.21 [-0.16, +0.59] (n=4)", or "-" without an estimate."""
    if not e or e.get("value") is None:
        return "-"
    lo, hi = e.get("ci") or (None, None)
    if lo is None or hi is None:
        return f"{e['value']:+.2f} (no interval, n={e.get('n')})"
    return f"{e['value']:+.2f} [{lo:+.2f}, {hi:+.2f}] (n={e.get('n')})"


def add_study_arguments(p: argparse.ArgumentParser) -> None:
    """The flags both verify benchmarks share: the data's split, the recipe, the search, --verify's grid and seeds,
    the work folder and the output."""
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--n-val", type=int, default=40)
    p.add_argument("--n-test", type=int, default=50)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--lr-range", nargs=2, type=float, default=[3e-4, 3e-2])
    p.add_argument("--points", type=int, default=7, help="--verify-points (0.25 decades apart)")
    p.add_argument("--seeds", type=int, default=5, help="--verify-seeds")
    p.add_argument("--work", type=Path, default=None, help="folder for data, studies and runs (default: a temp dir)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--table-from", type=Path, default=None)


def work_folder(args: argparse.Namespace, prefix: str) -> Path:
    """``--work``, or a new temporary folder; made if missing."""
    work = args.work or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    return work
