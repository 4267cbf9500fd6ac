"""Throughput of the loaded and the streamed data paths (mutransfer.data._streaming).

Writes a project-schema HDF5 file of ``--samples`` random samples on a ``--grid`` (2D,
Darcy-like; --size-gib decides the samples when given), then measures, for one epoch
in a random order with batch ``--batch``:

- load: seconds to load the whole split into memory (load_split(stream=False));
- read: batches per second delivered by iterate_batches (median of 3 epochs after a
  warm-up epoch) — in memory (indexing), and streamed with 0, 2 and 4 DataLoader workers
  (the file is in the OS page cache after the first epoch unless it is larger than RAM);
- train: samples per second of a training epoch (FNO-2D K 8, width 32) on each path.

    python benchmarks/bench_streaming.py --size-gib 2 --json streaming_cpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mutransfer._training import TrainConfig, train  # noqa: E402
from mutransfer.data._loading import load_split  # noqa: E402
from mutransfer.data._streaming import iterate_batches  # noqa: E402
from operators import FNO  # noqa: E402


def write_file(path: Path, n: int, s: int) -> None:
    """A mutransfer-pde (darcy) file written in blocks, so that it can be larger than memory."""
    from mutransfer.data._hdf5_io import write_dataset

    rng = np.random.default_rng(0)
    small = {
        "input": rng.random((2, s, s)),
        "output": rng.random((2, s, s)),
        "grid": {"x": np.linspace(0, 1, s), "y": np.linspace(0, 1, s)},
        "attrs": {"problem": "darcy"},
    }
    write_dataset(path, small)  # the schema's attributes and grid, then grow the arrays in place
    with h5py.File(path, "r+") as f:
        for key in ("input", "output"):
            del f[key]
            ds = f.create_dataset(key, shape=(n, s, s), dtype="float32", chunks=(1, s, s))
            for start in range(0, n, 1024):
                stop = min(n, start + 1024)
                ds[start:stop] = rng.random((stop - start, s, s), dtype=np.float32)
        f.attrs["n_samples"] = n


def batches_per_second(x, y, batch: int, workers: int, repeats: int = 3) -> float:
    """Median over ``repeats`` epochs (after one untimed epoch) of batches per second, each epoch a new order."""
    rates = []
    for epoch in range(repeats + 1):
        order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(epoch))
        start = time.perf_counter()
        count = sum(1 for _ in iterate_batches(x, y, order, batch, num_workers=workers))
        if epoch:
            rates.append(count / (time.perf_counter() - start))
    return sorted(rates)[len(rates) // 2]


def train_samples_per_second(data, batch: int, workers: int | None) -> float:
    torch.manual_seed(0)
    model = FNO(2, 1, 1, modes=8, width=32, layers=4, parametrization="mup", padding=0)
    config = TrainConfig(lr=1e-3, batch_size=batch, epochs=1, progress=False, data_workers=workers)
    result = train(model, data, config)
    return data.train_x.shape[0] / result.seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", type=int, default=64)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--size-gib", type=float, help="choose the samples so that the file has this size")
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-training", dest="training", action="store_false")
    p.add_argument("--dir", default=tempfile.gettempdir())
    p.add_argument("--json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    s = args.grid
    n = int(args.size_gib * 2**30 / (2 * 4 * s * s)) if args.size_gib else args.samples
    path = Path(args.dir) / f"bench_streaming_{n}x{s}.h5"
    if not path.exists():
        write_file(path, n, s)
    n_test = max(1, n // 10)
    result = {"file_bytes": path.stat().st_size, "samples": n, "grid": s, "batch": args.batch}
    start = time.perf_counter()
    loaded = load_split(path, n_train=n - n_test, n_test=n_test, stream=False)
    result["load_seconds"] = time.perf_counter() - start
    streamed = load_split(path, n_train=n - n_test, n_test=n_test, stream=True)
    result["read_batches_per_s"] = {"memory": batches_per_second(loaded.train_x, loaded.train_y, args.batch, 0)}
    for workers in (0, 2, 4):
        result["read_batches_per_s"][f"stream_{workers}_workers"] = batches_per_second(
            streamed.train_x, streamed.train_y, args.batch, workers
        )
    if args.training:
        result["train_samples_per_s"] = {
            "memory": train_samples_per_second(loaded, args.batch, None),
            "stream_0_workers": train_samples_per_second(streamed, args.batch, 0),
            "stream_2_workers": train_samples_per_second(streamed, args.batch, 2),
        }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
