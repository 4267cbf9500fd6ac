"""Shared helpers for the sweep tests: a tiny Burgers data file and a tiny study derived from the K-only quick study."""

from __future__ import annotations

from pathlib import Path

import yaml

#: the default study before its proxy shrank in width and grid: the fixture of tests written for a K-only proxy
K_ONLY_STUDY = Path(__file__).resolve().parent / "studies" / "quick_k_only.yaml"


#: the flags that run a sweep's trainings in the test's process, no Ray started (the in-process executor): for tests of
#: the study's logic; the tests of Ray's own part (trials on workers, DDP, faults, clusters) run on Ray
IN_PROCESS = ("--executor", "inprocess")


def k_only_study_text() -> str:
    return K_ONLY_STUDY.read_text()


def driver_command(study: Path, tmp_path: Path) -> tuple[list[str], dict]:
    """`mutransfer sweep --study STUDY --json` as a subprocess, and its environment (no telemetry, a cache in
    ``tmp_path``, no progress bars)."""
    import os
    import sys

    env = dict(
        os.environ,
        MLFLOW_DISABLE_TELEMETRY="true",
        RAY_USAGE_STATS_ENABLED="0",
        MUTRANSFER_CACHE=str(tmp_path / "cache"),
        TQDM_DISABLE="1",
    )
    return [sys.executable, "-m", "mutransfer.cli.main", "sweep", "--study", str(study), "--json"], env


def write_tiny_data(path: Path) -> Path:
    from mutransfer.data._burgers import generate_burgers
    from mutransfer.data._hdf5_io import write_dataset

    write_dataset(path, generate_burgers(48, 128, seed=0, progress=False))
    return path


def write_tiny_study(
    directory: Path,
    data: Path,
    *,
    name: str = "tiny",
    trials: int = 3,
    epochs: int = 2,
    grace: int = 1,
    target_epochs: int = 2,
    max_concurrent: int = 2,
    max_failures: int = 1,
    **sections,
) -> Path:
    """The K-only quick study shrunk: resolution 64 (K = 24 fits: 24 <= 64/2 + 1), 32/16 samples, width 16, 2 layers."""
    m = yaml.safe_load(k_only_study_text())
    m["name"] = name
    m["problem"] = {"name": "burgers", "data": str(data), "resolution": 64, "n_train": 32, "n_test": 16}
    m["operator"].update(width=16, layers=2, projection_channels=32)
    m["search"].update(num_trials=trials, max_concurrent=max_concurrent)
    m["budget"].update(epochs=epochs, grace_period=grace, max_failures=max_failures)
    m["target"].update(epochs=target_epochs, num_workers=1, cpus_per_worker=1)
    for section, values in sections.items():
        m[section].update(values)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    return path


def mlflow_runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids, max_results=1000) if ids else []


def galerkin_mesh_study(
    tmp_path: Path, name: str, mesh: Path, *, n_train: int, n_test: int, target_width: int, batch_size: int, epochs: int
) -> Path:
    """A two-trial Galerkin study on a Darcy mesh file (proxy width 8, one layer, 2-epoch target), written to study.yaml."""
    import yaml

    study = {
        "name": name,
        "problem": {"name": "darcy_mesh", "data": str(mesh), "n_train": n_train, "n_test": n_test},
        "operator": {"type": "galerkin", "width": 8, "layers": 1, "heads": 2},
        "target_width": target_width,
        "search_space": {"lr": {"type": "loguniform", "low": 1e-3, "high": 1e-2}},
        "training": {"batch_size": batch_size},
        "search": {"num_trials": 2, "max_concurrent": 2},
        "budget": {"epochs": epochs, "grace_period": 1},
        "target": {"epochs": 2},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def prepared_by_hand(study, root: Path, state: dict | None = None, options=None, **fields):
    """A :class:`~mutransfer._sweep.session.Prepared` study made by hand (no validation, no store opened): the value
    ``prepare`` hands the runner, for tests of the steps after it."""
    from mutransfer._study_folder.state import StudyDir
    from mutransfer._sweep.context import SweepOptions
    from mutransfer._sweep.session import Prepared, StateMirror
    from mutransfer._tracking.runs import Tracker

    uri = fields.pop("tracking_uri", "sqlite:///x.db")
    return Prepared(
        options=options or SweepOptions(quiet=True),
        study=study,
        study_dir=StudyDir(root),
        overrides=(),
        tracking_uri=uri,
        source_text="",
        fail_trials=0,
        tracker=fields.pop("tracker", None) or Tracker(uri),
        store=StateMirror(dict(state or {})),
        **fields,
    )


def session_by_hand(prepared, data, *, run=None, executor=None, lock=None, **fields):
    """An open :class:`~mutransfer._sweep.session.Session` of ``prepared`` made by hand: ``data`` (a
    :class:`~mutransfer._sweep.context.StudyData`), the MLflow run (by default ids that name no run), the in-process
    executor booked in the study's ledger, and no lock held."""
    from mutransfer._sweep._executor_names import executor_for
    from mutransfer._sweep._ledger import Booked, Ledger
    from mutransfer._sweep.context import StudyRun
    from mutransfer._sweep.session import Session

    return Session.of(
        prepared,
        study_data=data,
        lock=lock,
        executor=executor or Booked(executor_for("inprocess"), Ledger(prepared.study_dir.root)),
        run=run or StudyRun("experiment", "parent-run"),
        **fields,
    )
