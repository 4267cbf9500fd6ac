"""``search.algorithm``: tpe, random, grid, or any seeded sampler of ``optuna.samplers`` named by its class.

A named sampler is made afresh for each trial with that trial's seed and told the earlier trials, as tpe and
random are (mutransfer.sweep.sampling), so the search stays reproducible. The check runs when the study is read:
an unknown name, or a sampler whose optional packages are missing, is one line before any compute.
"""

from __future__ import annotations

import importlib.util
import inspect

#: the algorithms the study names itself (grid: every combination of the choice distributions, in order)
BUILT_IN = ("tpe", "random", "grid")
#: the packages an Optuna sampler needs beyond Optuna (Optuna imports them only when it samples)
NEEDS = {"CmaEsSampler": ("cmaes",), "GPSampler": ("scipy", "torch")}


def _sampler_class(name: str):
    import optuna  # noqa: PLC0415 -- deferred: Optuna (~0.3 s) only for a study that names one of its samplers

    cls = getattr(optuna.samplers, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, optuna.samplers.BaseSampler) else None


def _seeded_without_other_arguments(cls) -> bool:
    params = inspect.signature(cls).parameters.values()
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return "seed" in inspect.signature(cls).parameters and not required


def sampler_problem(name: str) -> str | None:
    """Why ``name`` is not an algorithm a study can use, with the fix (None: it can)."""
    if name in BUILT_IN:
        return None
    cls = _sampler_class(name)
    if cls is None or not _seeded_without_other_arguments(cls):
        return (
            f"{name!r} is not tpe, random, grid or a sampler of optuna.samplers made from a seed alone; "
            "e.g. GPSampler, QMCSampler, NSGAIISampler"
        )
    missing = [m for m in NEEDS.get(name, ()) if importlib.util.find_spec(m) is None]
    if missing:
        return f"{name} needs {', '.join(missing)}; pip install {' '.join(missing)}, or use tpe"
    return None


def named_sampler(name: str, seed: int):
    """A fresh ``optuna.samplers.<name>`` seeded with ``seed`` (name checked by :func:`sampler_problem`)."""
    cls = _sampler_class(name)
    assert cls is not None, name
    return cls(seed=seed)
