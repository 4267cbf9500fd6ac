"""Same configuration, data and seed, trained with 1 and with 2 torch intra-op threads: how far apart do they end?

Trains a sweep's target configuration (from a report written by ``mutransfer sweep --json``) twice
per thread count with ``mutransfer._sweep.verify.train_target_at`` and prints the test errors next
to the sweep's own target (Ray Train, ``target.cpus_per_worker`` threads) and, when the report has
one, the direct baseline's winner (a Tune trial, ``resources.cpus_per_trial`` threads).

    python benchmarks/table1.py --study tests/studies/quick_k_only.yaml --seeds 0 --out results/table1-burgers --verify
    python benchmarks/threads_reproducibility.py --study results/table1-burgers/studies/quick-s0.yaml \\
        --report results/table1-burgers/reports/s0.json
"""

from __future__ import annotations

import argparse
import json

from mutransfer._study import load_study
from mutransfer._study.data import load_study_data
from mutransfer._sweep.verify import train_target_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    study, _ = load_study(args.study)
    report = json.loads(open(args.report).read())
    hp = report["target_hyperparameters"]
    data, _ = load_study_data(study, progress=False)
    for threads in args.threads:
        errors = [
            train_target_at(study, hp, data, hp["lr"], int(study.training.seed), threads)["test_error"]
            for _ in range(args.repeats)
        ]
        print(f"{threads} thread(s): test errors {', '.join(f'{e:.6g}' for e in errors)}")
    print(
        f"the sweep's target (Ray Train, {report['target']['cpus_per_worker']} threads): {report['target']['test_error']:.6g}"
    )
    if report.get("direct_baseline"):
        print(f"the direct baseline's winner (Tune trial): {report['direct_baseline']['test_error']:.6g}")


if __name__ == "__main__":
    main()
