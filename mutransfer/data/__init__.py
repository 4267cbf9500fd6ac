"""The data API: random fields, Burgers/Darcy/Navier-Stokes solvers, point sets, HDF5 files, readers, loading.

Public: the names of ``__all__`` (below), imported from their private modules on first use, so importing
one module (e.g. ``_problem_facts``) does not load the solvers::

    from mutransfer.data import generate_burgers, load_split

Layout (each module imports only modules listed before it, never ``mutransfer._problems``):

* ``_problem_facts``: the one table of problem facts (dimension, periodic grid, grid or points)
* ``_schema_common``, ``_hdf5_io``, ``_point_schema``: the project's HDF5 schemas (grids, point sets)
* ``_grf``, ``_burgers``, ``_darcy``, ``_navier_stokes_solver``, ``_navier_stokes``, ``_pointclouds``: generators
* ``_formats/``: one module per data-file format + ``_formats.registry``; ``_readers``: the entry for any format
* ``_streaming``, ``_loading``: train/test splits
"""

from __future__ import annotations

import importlib

#: public name -> submodule defining it
_EXPORTS = {
    "periodic_grf_1d": "_grf",
    "neumann_grf_2d": "_grf",
    "solve_burgers": "_burgers",
    "generate_burgers": "_burgers",
    "stable_time_step": "_burgers",
    "solve_darcy": "_darcy",
    "generate_darcy": "_darcy",
    "darcy_matrix": "_darcy",
    "write_dataset": "_hdf5_io",
    "read_dataset": "_hdf5_io",
    "inspect_dataset": "_hdf5_io",
    "open_dataset": "_hdf5_io",
    "downsample": "_loading",
    "valid_resolutions": "_loading",
    "load_split": "_loading",
    "SplitData": "_loading",
    "generate_navier_stokes": "_navier_stokes",
    "solve_navier_stokes": "_navier_stokes",
    "DataSource": "_readers",
    "open_data": "_readers",
    "describe": "_readers",
    "detect_format": "_readers",
    "generate_darcy_mesh": "_pointclouds",
    "write_point_dataset": "_pointclouds",
    "load_point_split": "_pointclouds",
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
