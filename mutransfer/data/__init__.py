"""PDE data layer: random fields, Burgers/Darcy/Navier-Stokes solvers, HDF5 schema, readers, loading."""

from mutransfer.data.burgers import generate_burgers, solve_burgers, stable_time_step
from mutransfer.data.darcy import darcy_matrix, generate_darcy, solve_darcy
from mutransfer.data.grf import neumann_grf_2d, periodic_grf_1d
from mutransfer.data.hdf5_io import inspect_dataset, open_dataset, read_dataset, write_dataset
from mutransfer.data.loading import SplitData, downsample, load_split, valid_resolutions
from mutransfer.data.navier_stokes import generate_navier_stokes, solve_navier_stokes
from mutransfer.data.readers import DataSource, describe, detect_format, open_data

__all__ = [
    "periodic_grf_1d",
    "neumann_grf_2d",
    "solve_burgers",
    "generate_burgers",
    "stable_time_step",
    "solve_darcy",
    "generate_darcy",
    "darcy_matrix",
    "write_dataset",
    "read_dataset",
    "inspect_dataset",
    "open_dataset",
    "downsample",
    "valid_resolutions",
    "load_split",
    "SplitData",
    "generate_navier_stokes",
    "solve_navier_stokes",
    "DataSource",
    "open_data",
    "describe",
    "detect_format",
]
