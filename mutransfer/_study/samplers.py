"""``search.algorithm``: tpe, random, grid, any seeded sampler of ``optuna.samplers`` named by its class, or any
sampler class by its import path (``optuna.samplers.GPSampler``, ``mypackage.samplers.MySampler``).

An import path names a class of a module on Python's path (an installed package, or PYTHONPATH): a study folder is
never on that path, so a study file cannot make the sweep import code that the environment does not already hold.
The class must be an Optuna sampler made from a ``seed`` alone.

A named sampler is made afresh for each trial with that trial's seed and told the earlier trials, as tpe and
random are (mutransfer._sweep.sampling), so the search stays reproducible. The check runs when the study is read:
an unknown name, or a sampler whose optional packages are missing, is one line before any compute.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect

#: the algorithms the study names itself (grid: every combination of the choice distributions, in order)
BUILT_IN = ("tpe", "random", "grid")
#: Optuna's samplers that search one objective only (given two, they sample at random with a warning)
SINGLE_OBJECTIVE = ("CmaEsSampler",)
#: the packages an Optuna sampler needs beyond Optuna (Optuna imports them only when it samples)
NEEDS = {"CmaEsSampler": ("cmaes",), "GPSampler": ("scipy", "torch")}


def _sampler_class(name: str):
    """The sampler class ``name`` names (a class of optuna.samplers, or an import path), or None."""
    import optuna  # noqa: PLC0415 -- deferred: Optuna (~0.3 s) only for a study that names one of its samplers

    if "." in name:
        module, _, attribute = name.rpartition(".")
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return None
        try:
            cls = getattr(importlib.import_module(module), attribute, None)
        except Exception:  # noqa: BLE001 -- any failure to import the named module: not a sampler this study can use
            return None
    else:
        cls = getattr(optuna.samplers, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, optuna.samplers.BaseSampler) else None


def _seeded_without_other_arguments(cls) -> bool:
    params = inspect.signature(cls).parameters.values()
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return "seed" in inspect.signature(cls).parameters and not required


def single_objective(name: str) -> bool:
    """Whether the sampler ``name`` names searches one objective only (a class of :data:`SINGLE_OBJECTIVE`, or a
    subclass of one, by any name or import path)."""
    cls = _sampler_class(name) if name not in BUILT_IN else None
    if cls is None:
        return False
    import optuna  # noqa: PLC0415 -- deferred: already imported by _sampler_class; named for the lookup

    return any(issubclass(cls, getattr(optuna.samplers, single)) for single in SINGLE_OBJECTIVE)


def sampler_problem(name: str) -> str | None:
    """Why ``name`` is not an algorithm a study can use, with the fix (None: it can)."""
    if name in BUILT_IN:
        return None
    cls = _sampler_class(name)
    if cls is None or not _seeded_without_other_arguments(cls):
        return (
            f"{name!r} is not tpe, random, grid, or an Optuna sampler class made from a seed alone, named by its "
            "class in optuna.samplers or by an installed module's import path; e.g. GPSampler, "
            "optuna.samplers.QMCSampler"
        )
    missing = [m for m in NEEDS.get(cls.__name__, ()) if importlib.util.find_spec(m) is None]
    if missing:
        return f"{name} needs {', '.join(missing)}; pip install {' '.join(missing)}, or use tpe"
    return None


def named_sampler(name: str, seed: int):
    """A fresh ``optuna.samplers.<name>`` seeded with ``seed`` (name checked by :func:`sampler_problem`)."""
    cls = _sampler_class(name)
    assert cls is not None, name
    return cls(seed=seed)
