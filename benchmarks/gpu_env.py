"""Helpers of benchmarks/gpu_session.sh: print the software found, or summarise a study report.

python benchmarks/gpu_env.py                      # versions of python, torch, CUDA, the GPU, and the stack
python benchmarks/gpu_env.py --report report.json # one line: best proxy, target, wall time
python benchmarks/gpu_env.py --data-args STUDY     # "PATH N RESOLUTION" of the dataset the study reads
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform


def environment() -> None:
    import torch

    print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
    print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    for name in ("ray", "mlflow", "optuna", "neuralop", "h5py", "numpy", "pydantic", "sqlalchemy"):
        try:
            print(name, getattr(importlib.import_module(name), "__version__", "?"))
        except Exception as exc:  # report and go on: the session runs what it can
            print(name, "MISSING", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")


def summarise(path: str) -> None:
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"study: no report ({type(exc).__name__})")
        return
    best, target, compute = report["best_proxy"], report["target"], report["compute"]
    print(
        "study: best proxy",
        {k: best.get(k) for k in ("test_error", "lr", "spectral_lr")},
        "| target",
        target.get("status"),
        target.get("test_error"),
        "| wall",
        compute.get("sweep_wall_seconds"),
        "| overrides",
        report.get("overrides"),
    )


def data_args(study_path: str) -> None:
    """The cache file a study with ``problem.data: null`` reads, and the n and resolution that make it."""
    from mutransfer._problems import cache_dir, get_problem
    from mutransfer._study import load_study

    study, _ = load_study(study_path)
    p, problem = study.problem, get_problem(study.problem.name)
    n = max(problem.n_samples, int(p.n_train) + int(p.n_test))
    resolution = int(p.generated_resolution or problem.generated_resolution)
    print(cache_dir() / f"{problem.name}_n{n}_r{resolution}_seed{p.data_seed}.h5", n, resolution, p.data_seed)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--report")
    p.add_argument("--data-args")
    args = p.parse_args()
    if args.report:
        summarise(args.report)
    elif args.data_args:
        data_args(args.data_args)
    else:
        environment()
