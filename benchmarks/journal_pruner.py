"""What deciding a trial's stop on the Optuna journal costs the driver, per evaluation a trial reports.

    python benchmarks/journal_pruner.py            # about 5 s on 2 cores

Each evaluation of a proxy trial is written to its intermediate values in the search's journal and the search's
pruner decides on the journal study (mutransfer._sweep.plan.SearchPlan.should_stop; mutransfer._sweep._asha). This
drives a plan without training, as tests/sweep/test_sweep_plan.py does: a search of N trials (window 2, 20 epochs,
ASHA at 2, 4, 8, 16), each reporting every epoch; it prints the median and 95th percentile of one ``should_stop``
call (journal write and pruner) at the search's end, when the journal holds N trials, for N in ``--trials``, and
the same for ``MedianPruner`` in ASHA's place. Numbers go to docs/benchmarks.md ("Pruning on the journal").
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mutransfer._study import default_study_text, parse_study  # noqa: E402
from mutransfer._sweep.plan import DONE, SearchPlan  # noqa: E402


def _study(trials: int):
    m = yaml.safe_load(default_study_text())
    m["search"].update(algorithm="random", num_trials=trials, seed=0, max_concurrent=2)
    m["budget"].update(epochs=20, grace_period=2, reduction_factor=2)
    return parse_study(m, "bench")


def _curve(config: dict, epoch: int) -> float:
    return abs(math.log10(config["lr"] / 3e-3)) + 1.0 / epoch


def run(trials: int, pruner: optuna.pruners.BasePruner | None) -> list[float]:
    """Seconds of each should_stop call of the last quarter of the trials (the journal then holds most of them)."""
    with tempfile.TemporaryDirectory() as folder:
        plan = SearchPlan(_study(trials), Path(folder) / "trials", 2, pruner=pruner)
        timings: list[float] = []
        while True:
            nxt = plan.next_trial()
            if nxt is None or nxt == DONE:
                break
            key, config = nxt
            epoch = 0
            for epoch in range(1, 21):
                start = time.perf_counter()
                stop = plan.should_stop(key, epoch, _curve(config, epoch))
                if int(key[1:]) >= trials * 3 // 4:
                    timings.append(time.perf_counter() - start)
                if stop:
                    break
            plan.record(key, {"epoch": epoch, "val_error": _curve(config, epoch), "diverged": 0}, failed=False)
        return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[16, 64, 256])
    args = parser.parse_args()
    print("pruner       trials  calls  median ms  p95 ms")
    for name, make in (("ASHA", lambda: None), ("MedianPruner", optuna.pruners.MedianPruner)):
        for n in args.trials:
            t = sorted(run(n, make()))
            p95 = t[min(len(t) - 1, int(0.95 * len(t)))]
            print(f"{name:12s} {n:6d} {len(t):6d} {1e3 * statistics.median(t):9.2f} {1e3 * p95:7.2f}")


if __name__ == "__main__":
    main()
