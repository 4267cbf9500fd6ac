"""The PDE problems mutransfer knows: their dimension, data generator and defaults.

A problem ties a data generator to the FNO that learns it (d truncated
dimensions, padding for non-periodic domains) and to the dataset sizes used when
the user gives no data file. Default datasets are generated once and cached.

Facts about the data (dimension, periodic grid, grid or point sets) come from
``mutransfer.data._problem_facts``; each problem's module here adds its generator
and training defaults, and ``registry.PROBLEMS`` lists them. Imports go from
here down to ``mutransfer.data``, never back.
"""

from __future__ import annotations

from mutransfer._problems.base import Problem
from mutransfer._problems.datasets import cache_dir, default_dataset
from mutransfer._problems.registry import PROBLEMS, get_problem

__all__ = ["Problem", "PROBLEMS", "get_problem", "cache_dir", "default_dataset"]
