"""The arguments of :func:`mutransfer.create_study` checked before anything is made: one line each (UserInputError)."""

from __future__ import annotations

from pathlib import Path

import optuna

from mutransfer._api.spec import StudySpec
from mutransfer._config.checks import check_model_name
from mutransfer._config.executors import EXECUTORS, ON_RAY, chosen_executor
from mutransfer._study.inputs import check_address_form, check_storage
from mutransfer.errors import UserInputError


def checked_arguments(
    spec: StudySpec | None,
    storage: str | Path,
    executor: str | None,
    sampler: optuna.samplers.BaseSampler | None,
    register: str | None,
    ray_address: str | None,
) -> tuple[StudySpec, str | None]:
    """(the spec, the built-in quick study's where None; the checked model name to register, or None)."""
    spec = spec if spec is not None else StudySpec.default()
    if not isinstance(spec, StudySpec):
        raise UserInputError(
            f"spec: a mutransfer.StudySpec, got {type(spec).__name__} (e.g. mt.StudySpec.from_yaml(path))"
        )
    if executor is not None and executor not in EXECUTORS:
        raise UserInputError(f"executor {executor!r}: one of {', '.join(EXECUTORS)}, or None (the spec's)")
    if sampler is not None and (
        not isinstance(sampler, optuna.samplers.BaseSampler) or isinstance(sampler, optuna.samplers.GridSampler)
    ):
        raise UserInputError(
            f"sampler {type(sampler).__name__}: an Optuna sampler object such as optuna.samplers.TPESampler(seed=0); "
            "for a grid, set search.algorithm: grid in the spec"
        )
    if ray_address is not None:
        runs_on = chosen_executor(executor, spec.study.resources.executor, ray_address)
        if runs_on not in ON_RAY:
            raise UserInputError(f"ray_address {ray_address!r:.60}: the {runs_on!r} executor trains here; drop it")
        check_address_form(ray_address if isinstance(ray_address, str) else repr(ray_address), "ray_address")
    register = None if register is None else check_model_name(register, "register")
    check_storage(storage)
    return spec, register
