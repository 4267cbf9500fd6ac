"""What handing out a sampled trial costs the driver, now that each is asked on the study's Optuna journal through the
search's sampler wrapper (mutransfer._sweep._windowed.WindowedSampler), against the sampler's own work.

    python benchmarks/journal_ask.py            # about 10 s on 2 cores

A search of N trials is driven without training, as tests/sweep/test_sweep_plan.py does (window 2, 20 epochs, ASHA
at 2, 4, 8, 16, each trial reporting every epoch until it ends), with TPE and with random sampling. For the trials of
its last quarter (the journal then holds most of the search) it times ``SearchPlan.next_trial`` (the trial written
with its key while it is asked, its parameters suggested through Optuna's trial interface, the window's results read
back from the journal, then marked handed out) and, with the same results, ``sample_config`` alone (the seeded
sampler over those results: the part that was there before the wrapper). Numbers go to docs/benchmarks.md ("Asking a trial on the journal").
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mutransfer._study import default_study_text, parse_study  # noqa: E402
from mutransfer._sweep.plan import DONE, SearchPlan  # noqa: E402
from mutransfer._sweep.sampling import sample_config  # noqa: E402


def _study(trials: int, algorithm: str):
    m = yaml.safe_load(default_study_text())
    m["search"].update(algorithm=algorithm, num_trials=trials, seed=0, max_concurrent=2)
    m["budget"].update(epochs=20, grace_period=2, reduction_factor=2)
    return parse_study(m, "bench")


def run(trials: int, algorithm: str) -> tuple[list[float], list[float]]:
    """(seconds of each next_trial, seconds of sample_config alone) over the last quarter of the trials."""
    study = _study(trials, algorithm)
    asks: list[float] = []
    alone: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        plan = SearchPlan(study, Path(folder) / "trials", 2)
        while True:
            start = time.perf_counter()
            nxt = plan.next_trial()
            seconds = time.perf_counter() - start
            if nxt is None or nxt == DONE:
                break
            assert isinstance(nxt, tuple)
            key, config = nxt
            index = int(key[1:])
            if index >= trials * 3 // 4:
                asks.append(seconds)
                told = [(plan.configs[j], plan.outcomes[j].value) for j in range(index - 1)]
                start = time.perf_counter()
                assert sample_config(study, index, told) == config
                alone.append(time.perf_counter() - start)
            epoch, value = 0, math.inf
            for epoch in range(1, 21):
                value = abs(math.log10(config["lr"] / 3e-3)) + 1.0 / epoch
                if plan.should_stop(key, epoch, value):
                    break
            plan.record(key, {"epoch": epoch, "val_error": value, "diverged": 0}, failed=False)
    return asks, alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--algorithms", nargs="+", default=["tpe", "random"])
    args = parser.parse_args()
    print("sampler  trials  asks timed  next_trial median / p95 (ms)  sample_config alone median (ms)")
    for algorithm in args.algorithms:
        for trials in args.trials:
            asks, alone = run(trials, algorithm)
            p95 = sorted(asks)[max(0, math.ceil(0.95 * len(asks)) - 1)]
            print(
                f"{algorithm:7s}  {trials:6d}  {len(asks):10d}  {statistics.median(asks) * 1e3:8.2f} / "
                f"{p95 * 1e3:6.2f}  {statistics.median(alone) * 1e3:8.2f}"
            )


if __name__ == "__main__":
    main()
