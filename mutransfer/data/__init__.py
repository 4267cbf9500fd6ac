"""PDE data layer: random fields, Burgers/Darcy/Navier-Stokes solvers, HDF5 schemas, readers, loading.

Layout (each module imports only modules listed before it, never ``mutransfer._problems``):

* ``problem_facts``: the one table of problem facts (dimension, periodic grid, grid or points)
* ``schema_common``, ``hdf5_io``, ``point_schema``: the project's HDF5 schemas (grids, point sets)
* ``grf``, ``burgers``, ``darcy``, ``navier_stokes_solver``, ``navier_stokes``, ``pointclouds``: generators
* ``formats/``: one module per data-file format + ``formats.registry``; ``readers``: the public entry
* ``streaming``, ``loading``: train/test splits

The names below are imported on first use, so importing a submodule (e.g.
``problem_facts``) does not load the solvers.
"""

from __future__ import annotations

import importlib

#: public name -> submodule defining it
_EXPORTS = {
    "periodic_grf_1d": "grf",
    "neumann_grf_2d": "grf",
    "solve_burgers": "burgers",
    "generate_burgers": "burgers",
    "stable_time_step": "burgers",
    "solve_darcy": "darcy",
    "generate_darcy": "darcy",
    "darcy_matrix": "darcy",
    "write_dataset": "hdf5_io",
    "read_dataset": "hdf5_io",
    "inspect_dataset": "hdf5_io",
    "open_dataset": "hdf5_io",
    "downsample": "loading",
    "valid_resolutions": "loading",
    "load_split": "loading",
    "SplitData": "loading",
    "generate_navier_stokes": "navier_stokes",
    "solve_navier_stokes": "navier_stokes",
    "DataSource": "readers",
    "open_data": "readers",
    "describe": "readers",
    "detect_format": "readers",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
