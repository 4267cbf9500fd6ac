"""The study's train/test split: a data file, or a generated dataset cached on first use."""

from __future__ import annotations

from pathlib import Path

from mutransfer._problems import default_dataset, get_problem
from mutransfer._study import Study
from mutransfer.data._loading import load_split
from mutransfer.data._pointclouds import load_point_split


def dataset_path(study: Study, *, progress: bool = True) -> Path:
    """Path of the study's data file, generating and caching the default dataset if needed.

    With ``problem.data: null`` the dataset is generated once at
    ``problem.generated_resolution`` with at least the problem's default number of
    samples, into ``$MUTRANSFER_CACHE`` (the same file that ``mutransfer train``
    uses when the sizes match), and reused afterwards.
    """

    p = study.problem
    if p.data is not None:
        return Path(p.data)
    problem = get_problem(p.name)
    n = max(problem.n_samples, int(p.n_train) + int(p.n_test))
    resolution = int(p.generated_resolution or problem.generated_resolution)
    return default_dataset(problem, n=n, resolution=resolution, seed=p.data_seed, progress=progress)


def load_study_data(study: Study, *, progress: bool = True):
    """(SplitData, path) for the study: first n_train samples train, last n_test test.

    Point-set problems (irregular meshes) come packed as [coords | features | mask] (operators.adapters).
    """

    path = dataset_path(study, progress=progress)
    p = study.problem
    if study.point_problem:
        return load_point_split(path, n_train=int(p.n_train), n_test=int(p.n_test)), path
    kwargs = {"problem": p.name}
    if p.time_resolution is not None:
        kwargs["time_resolution"] = int(p.time_resolution)
    stream = None if p.stream == "auto" else bool(p.stream)
    split = load_split(
        path, n_train=int(p.n_train), n_test=int(p.n_test), resolution=int(p.resolution), stream=stream, **kwargs
    )
    return split, path
