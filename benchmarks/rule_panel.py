"""The rule panel: does a gate classify known K-scaling rules correctly? (issue "Verdicts you can trust", item 4)

For each dataset and each rule of :data:`mutransfer._diagnostics.rule_panel.RULES` (SP, the paper's μP
c(K), and the wrong-on-purpose c(K)·K, c(K)², c = 1):

1. **Truth**: an LR landscape at K_lo and K_hi (the same master-LR grid, ``--seeds`` seeds, trained on the
   fit samples and measured on the validation samples: mutransfer.data._validation), each seed's optimum
   fitted by the one estimator (:func:`mutransfer._landscape.analysis.fit_optimum`), and the drift
   log10 lr*(K_hi) − log10 lr*(K_lo) with Welch's 95 % t interval. The rule **fails** here when the
   interval excludes 0 ("moves"), **holds** when the interval lies inside ±``--holds`` decades, and is
   **not resolved** otherwise.
2. **Gate**: the coordinate check (``mutransfer coord-check``'s :func:`~mutransfer._diagnostics.coord_check.coord_check`,
   3 seeds, K_lo, √(K_lo·K_hi), K_hi) on the same rule at the rule's K_lo optimum: pass or flag.

A gate classifies a rule correctly when it flags a rule that fails and passes one that holds or is not
resolved (a flag with no measured failure would stop a sweep without evidence). Two gates are judged from
the same coordinate check: **all-flat** (the check's own verdict: pass only if every gated curve is ``flat``,
so an ``unresolved`` curve flags) and **resolved-slope** (flag only when a gated curve resolvably ``grows``
or ``shrinks``). ``--table-from JSON`` prints the table of a stored run again. Output: JSON and a
Markdown table (``--out``). Run::

    python benchmarks/rule_panel.py --dataset burgers --out docs/results/rule_panel_burgers.json
    python benchmarks/rule_panel.py --dataset burgers_rough --out docs/results/rule_panel_burgers_rough.json
    python benchmarks/rule_panel.py --dataset darcy --out docs/results/rule_panel_darcy.json

Trainings run in ``--workers`` processes of one thread each (no Ray, no MLflow: a benchmark).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mutransfer._diagnostics.coord_check import GROWS, SHRINKS, coord_check  # noqa: E402
from mutransfer._diagnostics.rule_panel import (  # noqa: E402
    NOT_RESOLVED,
    RULES,
    apply_rule,
    gate_is_right,
    get_rule,
    truth,
)
from mutransfer._diagnostics.statistics import difference_ci  # noqa: E402
from mutransfer._sweep.verify_transfer import seed_optima  # noqa: E402
from mutransfer._training import TrainConfig, train  # noqa: E402
from mutransfer.data._loading import SplitData  # noqa: E402
from mutransfer.data._validation import carve_validation  # noqa: E402
from operators import FNO  # noqa: E402


@dataclass(frozen=True)
class Dataset:
    """A panel dataset: how to make it and the FNO trained on it."""

    name: str
    dim: int
    modes: tuple[int, int]
    width: int
    layers: int
    padding: int
    projection: int
    epochs: int
    lr_range: tuple[float, float]


DATASETS = {
    "burgers": Dataset("burgers", 1, (4, 32), 32, 4, 0, 64, 15, (3e-4, 3e-2)),
    "burgers_rough": Dataset("burgers_rough", 1, (4, 32), 32, 4, 0, 64, 15, (3e-4, 3e-2)),
    "darcy": Dataset("darcy", 2, (2, 6), 24, 4, 4, 64, 10, (1e-3, 1e-1)),
}


def make_data(name: str, n_train: int, n_val: int, n_test: int):
    """(fit split, selection split) of a freshly generated dataset (seed 0)."""
    n = n_train + n_test
    if name.startswith("burgers"):
        from mutransfer.data._burgers import generate_burgers

        raw = generate_burgers(n, 256, seed=0, alpha=0.6 if name == "burgers_rough" else 2.0, progress=False)
        x, y = raw["input"][:, ::2], raw["output"][:, ::2]  # 256 -> 128 periodic points
    else:
        from mutransfer.data._darcy import generate_darcy

        raw = generate_darcy(n, 16, seed=0, progress=False)
        x, y = raw["input"], raw["output"]
    x = torch.as_tensor(np.asarray(x, np.float32))[..., None]
    y = torch.as_tensor(np.asarray(y, np.float32))[..., None]
    split = SplitData(x[:n_train], y[:n_train], x[n_train:], y[n_train:], tuple(x.shape[1:-1]), None)
    return carve_validation(split, n_val)


def build(ds: Dataset, rule_name: str, modes: int, seed: int) -> FNO:
    rule = get_rule(rule_name)
    torch.manual_seed(seed)
    model = FNO(
        ds.dim,
        1,
        1,
        modes=modes,
        width=ds.width,
        layers=ds.layers,
        parametrization=rule.parametrization,
        padding=ds.padding,
        projection_channels=ds.projection,
    )
    return apply_rule(model, rule)


_DATA = {}


def _init(data) -> None:
    torch.set_num_threads(1)
    _DATA["select"] = data


def _train(job: tuple) -> dict:
    ds, rule_name, modes, lr, seed = job
    model = build(ds, rule_name, modes, seed)
    config = TrainConfig(
        epochs=ds.epochs, batch_size=20, lr=lr, schedule="cosine", seed=seed, device="cpu", progress=False
    )
    result = train(model, _DATA["select"], config)  # held-out slot: the validation samples
    return {
        "rule": rule_name,
        "K": modes,
        "lr": lr,
        "seed": seed,
        "status": result.status,
        "val_error": result.test_error,
    }


def drift(records: list[dict], rule: str, modes: tuple[int, int], grid: list[float]) -> dict:
    """Per-seed optima at both K (verify's estimator: mutransfer._sweep.verify_transfer.seed_optima) and the Welch t
    drift of log10 lr* (decades); optima at the grid's edge are not usable."""
    optima = {k: seed_optima([r for r in records if r["rule"] == rule and r["K"] == k], grid) for k in modes}
    lo, hi = ([o["coordinate"] for o in optima[k] if o["coordinate"] is not None] for k in modes)
    est = difference_ci(hi, lo) if lo and hi else None
    out = {"optima": {str(k): v for k, v in optima.items()}, "drift": None}
    if est is not None:
        out["drift"] = {"mean": est.mean, "ci": [est.lo, est.hi], "n": est.n, "method": est.method}
    return out


def rule_truth(d: dict | None, holds: float) -> str:
    return NOT_RESOLVED if d is None else truth(d["ci"][0], d["ci"][1], holds)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    p.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    p.add_argument("--points", type=int, default=9)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--n-val", type=int, default=40)
    p.add_argument("--n-test", type=int, default=20)
    p.add_argument("--epochs", type=int, default=None, help="default: the dataset's")
    p.add_argument("--modes", type=int, nargs=2, default=None, help="K_lo K_hi (default: the dataset's)")
    p.add_argument("--lr-range", type=float, nargs=2, default=None, help="LOW HIGH (default: the dataset's)")
    p.add_argument("--holds", type=float, default=0.25, help="a drift CI inside ±this many decades: the rule holds")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, required=False)
    p.add_argument("--table-from", type=Path, help="print the table of a stored run (re-judged) and exit")
    args = p.parse_args(argv)
    if args.table_from is not None:
        payload = json.loads(args.table_from.read_text())
        payload["rules"] = [judge(r) for r in payload["rules"]]
        payload["gate_classifies_panel"] = all(r["gate_correct"] for r in payload["rules"])
        payload["resolved_gate_classifies_panel"] = all(r["resolved_gate_correct"] for r in payload["rules"])
        args.table_from.write_text(json.dumps(payload, indent=1))
        print(table(payload))
        return 0
    if args.out is None:
        p.error("--out is required")

    ds = DATASETS[args.dataset]
    if args.epochs is not None:
        ds = Dataset(**{**ds.__dict__, "epochs": args.epochs})
    if args.modes is not None:
        ds = Dataset(**{**ds.__dict__, "modes": tuple(args.modes)})
    if args.lr_range is not None:
        ds = Dataset(**{**ds.__dict__, "lr_range": tuple(args.lr_range)})
    start = time.perf_counter()
    fit, select = make_data(ds.name, args.n_train, args.n_val, args.n_test)
    grid = [float(v) for v in np.geomspace(*ds.lr_range, args.points)]
    jobs = [(ds, r, k, lr, s) for r in args.rules for k in ds.modes for lr in grid for s in range(args.seeds)]
    with mp.get_context("spawn").Pool(args.workers, initializer=_init, initargs=(select,)) as pool:
        records = pool.map(_train, jobs, chunksize=1)
    train_seconds = time.perf_counter() - start

    torch.set_num_threads(args.workers)
    rows = []
    for name in args.rules:
        rule = get_rule(name)
        d = drift(records, name, ds.modes, grid)
        lo_optima = [o["optimum_lr"] for o in d["optima"][str(ds.modes[0])] if o["coordinate"] is not None]
        probe_lr = float(10 ** np.mean(np.log10(lo_optima))) if lo_optima else float(np.sqrt(grid[0] * grid[-1]))
        k_lo, k_hi = ds.modes
        mid = round(math.sqrt(k_lo * k_hi))
        gate = coord_check(
            select,
            dim=ds.dim,
            modes=sorted({k_lo, mid, k_hi}),
            parametrizations=(rule.parametrization,),
            width=ds.width,
            layers=ds.layers,
            padding=ds.padding,
            lr=probe_lr,
            seeds=3,
            projection_channels=ds.projection,
            rule=rule,
        )
        verdict = gate.verdict(rule.parametrization)
        row = {
            "rule": name,
            "description": rule.description,
            **d,
            "truth": rule_truth(d["drift"], args.holds),
            "gate_lr": probe_lr,
            "gate": verdict,
            "gate_curves": [c.describe() for c in gate.gated(rule.parametrization)],
        }
        rows.append(judge(row))
    payload = {
        "dataset": ds.__dict__,
        "grid": grid,
        "seeds": args.seeds,
        "n_fit": args.n_train - args.n_val,
        "n_val": args.n_val,
        "holds_decades": args.holds,
        "records": records,
        "rules": rows,
        "gate_classifies_panel": all(r["gate_correct"] for r in rows),
        "resolved_gate_classifies_panel": all(r["resolved_gate_correct"] for r in rows),
        "seconds": time.perf_counter() - start,
        "train_seconds": train_seconds,
        "command": "python benchmarks/rule_panel.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1))
    print(table(payload))
    return 0


def resolved_slope_gate(curves: list[str]) -> str:
    """The resolved-slope gate from the check's gated curves ("fourier_1 grows, slope ..."): flag only on a resolved
    slope beyond the tolerance (grows / shrinks); flat, unresolved and no-signal curves pass."""
    return "flagged" if any(c.split()[1].rstrip(",") in (GROWS, SHRINKS) for c in curves) else "pass"


def judge(row: dict) -> dict:
    """Both gates' verdicts on one rule, and whether each is right about its truth."""
    row["resolved_gate"] = resolved_slope_gate(row["gate_curves"])
    row["gate_correct"] = gate_is_right(row["gate"] == "flagged", row["truth"])
    row["resolved_gate_correct"] = gate_is_right(row["resolved_gate"] == "flagged", row["truth"])
    return row


def table(payload: dict) -> str:
    ds = payload["dataset"]
    k_lo, k_hi = ds["modes"]
    lines = [
        f"{ds['name']}: K {k_lo} -> {k_hi}, {payload['seeds']} seeds, {ds['epochs']} epochs, "
        f"{len(payload['grid'])} LRs {payload['grid'][0]:.2g}..{payload['grid'][-1]:.2g} (validation errors)",
        "",
        f"| rule | drift of lr* K {k_lo}→{k_hi}, decades [95 % CI] | truth | all-flat gate (today's check) | "
        "resolved-slope gate |",
        "|---|---|---|---|---|",
    ]
    for r in payload["rules"]:
        d = r["drift"]
        text = "-" if d is None else f"{d['mean']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}] (n={d['n']})"
        right = {True: "right", False: "**wrong**"}
        lines.append(
            f"| {r['rule']} | {text} | {r['truth']} | {r['gate']} ({right[r['gate_correct']]}) | "
            f"{r['resolved_gate']} ({right[r['resolved_gate_correct']]}) |"
        )
    lines.append("")
    lines.append(
        f"all-flat gate classifies the panel: {payload['gate_classifies_panel']}; resolved-slope gate: "
        f"{payload['resolved_gate_classifies_panel']}  ({payload['seconds']:.0f} s)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
