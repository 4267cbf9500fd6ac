"""Where a proxy trial's epoch goes beyond its compute: the default study's proxy and target trained by the
product's trainer, alone, then with what a trial adds per epoch, and Tune's report on its own.

    python benchmarks/proxy_epoch.py            # about 3 minutes on 2 cores

For the proxy (K 6, width 16, 32 points) and the target (K 24, width 64, 128 points) of studies/quick.yaml,
on random data of the study's sizes (320 fit and 80 selection samples, batch 10, one thread), the median
seconds per epoch of ``mutransfer._training.train`` over 10 epochs, each mode run 5 times interleaved (the
median of the runs and their range are printed; an epoch's time is taken between the evaluations' callbacks on
the wall clock, so it holds the checkpoint and the history file, which the trainer's own clock leaves out):

1. ``plain``: steps and the per-epoch evaluation only;
2. ``+ checkpoint``: the trainer's checkpoint after every epoch, as a trial writes it (fsynced);
3. ``+ history``: and the trial's ``history.json`` after every epoch (mutransfer._sweep.trial.write_trial_history).

Then a bare Ray Tune run (2 trials at a time, 60 reports each, 150 ms of sleep apart): the median time a
``tune.report`` call waits. docs/results.md ("Cheap proxies on three problems") quotes it.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from types import SimpleNamespace

import ray
import torch
from ray import tune

from mutransfer._study import load_study
from mutransfer._study.models import build_model
from mutransfer._sweep.trial import write_trial_history
from mutransfer._training import TrainConfig, train

EPOCHS = 10


def epoch_seconds(modes: int, width: int, points: int, mode: str) -> float:
    study, _ = load_study(None)
    torch.manual_seed(0)
    model = build_model(study, modes=modes, width=width, input_channels=1, output_channels=1)
    data = SimpleNamespace(
        train_x=torch.randn(320, points, 1),
        train_y=torch.randn(320, points, 1),
        test_x=torch.randn(80, points, 1),
        test_y=torch.randn(80, points, 1),
    )
    with tempfile.TemporaryDirectory() as folder:
        history: list = []
        stamps: list[float] = []  # wall clock at each evaluation: the trainer's own clock leaves checkpoints out

        def stamp(event) -> None:
            stamps.append(time.perf_counter())

        def write_history(event) -> None:
            history.append(event)
            write_trial_history(folder, history)

        config = TrainConfig(
            epochs=EPOCHS,
            batch_size=10,
            lr=3e-3,
            device="cpu",
            progress=False,
            checkpoint_dir=None if mode == "plain" else folder,
        )
        train(model, data, config, callbacks=[stamp, write_history] if mode == "+ history" else [stamp])
    return statistics.median(b - a for a, b in zip(stamps, stamps[1:-1]))  # the last stamp is the end event


def report_wait_ms() -> float:
    def trainable(config) -> None:
        waits = []
        for i in range(60):
            time.sleep(0.15)
            start = time.perf_counter()
            tune.report({"i": i})
            waits.append(time.perf_counter() - start)
        tune.report({"i": -1, "wait_ms": 1000 * statistics.median(waits)})

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        with tempfile.TemporaryDirectory() as storage:
            results = tune.Tuner(
                trainable,
                tune_config=tune.TuneConfig(num_samples=2, max_concurrent_trials=2),
                run_config=tune.RunConfig(storage_path=storage, verbose=0),
            ).fit()
            return statistics.median(r.metrics["wait_ms"] for r in results)
    finally:
        ray.shutdown()


def main() -> None:
    torch.set_num_threads(1)
    for name, (modes, width, points) in {"proxy": (6, 16, 32), "target": (24, 64, 128)}.items():
        runs: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(ROUNDS):  # the modes interleaved, so a change of the machine's load falls on all alike
            for mode in MODES:
                runs[mode].append(1000 * epoch_seconds(modes, width, points, mode))
        cells = [f"{m} {statistics.median(v):.0f} ms ({min(v):.0f}-{max(v):.0f})" for m, v in runs.items()]
        print(f"{name}: " + ", ".join(cells))
    print(f"tune.report wait (bare Tune, 2 trials): {report_wait_ms():.1f} ms (median)")


MODES = ("plain", "+ checkpoint", "+ history")
#: runs of each mode (median and range printed)
ROUNDS = 5

if __name__ == "__main__":
    main()
