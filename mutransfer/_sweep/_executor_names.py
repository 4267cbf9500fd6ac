"""The executor of each name a study may ask for (mutransfer._config.executors.EXECUTORS)."""

from __future__ import annotations

from mutransfer._config.executors import EXECUTORS
from mutransfer._sweep._executors import Executor, InProcessExecutor, PopulationExecutor, RayExecutor
from mutransfer._sweep._ray_population import RayPopulationExecutor


def executor_for(name: str) -> Executor:
    """The executor called ``name``."""
    kinds: dict[str, type[Executor]] = {
        "ray": RayExecutor,
        "inprocess": InProcessExecutor,
        "population": PopulationExecutor,
        "ray-population": RayPopulationExecutor,
    }
    if name not in kinds or name not in EXECUTORS:
        raise ValueError(f"executor {name!r}: one of {', '.join(EXECUTORS)}")
    return kinds[name]()
