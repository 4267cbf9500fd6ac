"""The executor of each name a study may ask for (mutransfer._config.executors.EXECUTORS)."""

from __future__ import annotations

from mutransfer._config.executors import EXECUTORS
from mutransfer._sweep._executors import Executor, InProcessExecutor, RayExecutor
from mutransfer._sweep._population_executor import PopulationExecutor
from mutransfer._sweep._ray_population import RayPopulationExecutor

#: the executor of each name (tests/sweep/test_executors.py: the same names as EXECUTORS)
KINDS: dict[str, type[Executor]] = {
    "ray": RayExecutor,
    "inprocess": InProcessExecutor,
    "population": PopulationExecutor,
    "ray-population": RayPopulationExecutor,
}


def executor_for(name: str) -> Executor:
    """The executor called ``name``."""
    if name not in KINDS:
        raise ValueError(f"executor {name!r}: one of {', '.join(EXECUTORS)}")
    return KINDS[name]()
