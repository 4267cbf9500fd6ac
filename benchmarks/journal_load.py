"""What reading a search back costs a resume, now that its Optuna journal is the trials' one store, and what bringing a
folder written before 2026-11-30 (trial files) into a journal costs once.

    python benchmarks/journal_load.py            # about 5 s on 2 cores

A search of N trials is driven without training, as tests/sweep/test_sweep_plan.py does (random sampling, window 2,
20 epochs, ASHA at 2, 4, 8, 16, each trial reporting every epoch until it ends). Then, three times each, it times a
new plan over the finished folder (what `sweep --resume` and `mt.load_study` do: the journal read and every trial
checked), and the same folder turned back into one of trial files (tests/journal_helpers.py) loading for the first
time (the migration: the files read and checked, a new journal written). Numbers go to docs/benchmarks.md
("Reading a search back from its journal").
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.journal_pruner import _study  # noqa: E402 -- the same search as the pruner's benchmark
from mutransfer._sweep.plan import DONE, SearchPlan  # noqa: E402
from tests.journal_helpers import as_legacy  # noqa: E402


def _search(study, trials_dir: Path) -> None:
    plan = SearchPlan(study, trials_dir, 2)
    while (nxt := plan.next_trial()) not in (None, DONE):
        assert isinstance(nxt, tuple)
        key, config = nxt
        epoch = 0
        for epoch in range(1, 21):
            value = abs(math.log10(config["lr"] / 3e-3)) + 1.0 / epoch
            if plan.should_stop(key, epoch, value):
                break
        plan.record(key, {"epoch": epoch, "val_error": value, "diverged": 0}, failed=False)


def _load_seconds(study, trials_dir: Path) -> float:
    """Seconds a new plan over ``trials_dir`` takes to be made (the search read back, or migrated first)."""
    start = time.perf_counter()
    SearchPlan(study, trials_dir, 2)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("trials  journal  resume load (s, median of runs)  first load of trial files, migrating (s)")
    for trials in args.trials:
        study = _study(trials)
        with tempfile.TemporaryDirectory() as folder:
            made = Path(folder) / "made" / "trials"
            _search(study, made)
            size = (made.parent / "optuna.journal").stat().st_size
            loads = [_load_seconds(study, made) for _ in range(args.repeats)]
            migrations = []
            for n in range(args.repeats):
                legacy = Path(folder) / f"legacy{n}" / "trials"
                shutil.copytree(made.parent, legacy.parent)
                as_legacy(legacy, study.name)
                migrations.append(_load_seconds(study, legacy))
            print(
                f"{trials:6d}  {size / 1024:6.0f} KB  {statistics.median(loads):.3f} "
                f"(runs {min(loads):.3f}-{max(loads):.3f})  "
                f"{statistics.median(migrations):.3f} (runs {min(migrations):.3f}-{max(migrations):.3f})"
            )


if __name__ == "__main__":
    main()
