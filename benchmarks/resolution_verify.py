"""Does the optimal learning rate move when only the grid changes? (issue "Proxies that pay", item 4)

For each dataset, one real study whose proxy and target differ **only** in the training grid
(``proxy_resolution`` → ``problem.resolution``; the same K, width, depth and recipe), measured by
``mutransfer sweep --verify``: the target and the proxy are trained on the same LR grid around the transferred
LR (the proxy on its coarse grid), ``--seeds`` seeds each, and the **transfer error** is the target's optimum
minus the proxy's (decades, Welch's 95 % t interval). The grid rule carries every hyperparameter over unchanged
(operators.transfer.resolution_transfer_factor): a transfer error that excludes 0 says the optimum moved with
the grid, and by how much.

    python benchmarks/resolution_verify.py --out docs/results/resolution_verify.json
    python benchmarks/resolution_verify.py --table-from docs/results/resolution_verify.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.verify_runs import (  # noqa: E402
    add_study_arguments,
    ci_text,
    make_burgers,
    run_verify_study,
    verify_summary,
    work_folder,
)

#: dataset -> (initial field α of the Burgers data, proxy grid, target grid, K of both)
DATASETS = {
    "burgers": (2.0, 32, 128, 12),
    "burgers_rough": (0.6, 32, 128, 12),
}


def study_mapping(name: str, data: Path, args) -> dict:
    _alpha, coarse, fine, modes = DATASETS[name]
    return {
        "name": f"grid-{name}-{coarse}-{fine}",
        "problem": {
            "name": "burgers",
            "data": str(data),
            "resolution": fine,
            "n_train": args.n_train,
            "n_val": args.n_val,
            "n_test": args.n_test,
        },
        "operator": {"type": "fno", "width": 32, "layers": 4},
        "parametrization": "mup",
        "proxy_K": modes,
        "target_K": modes,
        "proxy_resolution": coarse,
        "search_space": {"lr": {"type": "loguniform", "low": args.lr_range[0], "high": args.lr_range[1]}},
        "training": {"batch_size": 20, "schedule": "cosine", "seed": 0},
        "search": {"algorithm": "tpe", "num_trials": args.trials, "seed": 0, "max_concurrent": 2},
        "budget": {"epochs": args.epochs, "grace_period": args.epochs},
        "target": {"epochs": args.epochs},
    }


def table(payload: dict) -> str:
    lines = [
        "| dataset | grid proxy -> target | K | transfer error, decades [95 % CI] | search gap, decades [95 % CI] | "
        "target optimum - transferred LR, decades | target test rel. L2 | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["rows"]:
        lines.append(
            f"| {r['dataset']} | {r['grid'][0]} -> {r['grid'][1]} | {r['modes']} | {ci_text(r['transfer_error'])} | "
            f"{ci_text(r['search_gap'])} | {ci_text(r.get('distance'))} | {r['target_test_error']:.4f} | "
            f"{r['seconds']:.0f} |"
        )
    lines.append("")
    lines += [f"- {r['dataset']}: {r['verdict']}" for r in payload["rows"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", choices=tuple(DATASETS), default=list(DATASETS))
    add_study_arguments(p)
    args = p.parse_args(argv)
    if args.table_from:
        print(table(json.loads(args.table_from.read_text())))
        return 0
    work = work_folder(args, "resolution_verify_")
    rows = []
    for name in args.datasets:
        alpha, coarse, fine, modes = DATASETS[name]
        started = time.time()
        data = make_burgers(work, name, args.n_train + args.n_test, alpha)
        report = run_verify_study(work, study_mapping(name, data, args), args.points, args.seeds)
        rows.append({"dataset": name, "grid": [coarse, fine], "modes": modes, **verify_summary(report, started)})
        print(f"{name}: {ci_text(rows[-1]['transfer_error'])} ({rows[-1]['seconds']:.0f} s)", flush=True)
    payload = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(payload, indent=2))
    print(table(payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
