"""A new study file for a user's problem, data and operator (`mutransfer init`).

The built-in quick study is adapted (its problem, data and operator replaced; sizes the data cannot hold shrunk),
checked by :func:`mutransfer._study.files.parse_study` like every study, then written with each field's own help
text (its ``setting()``) as the comment above it: what the file says is what the parser reads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from mutransfer._config.settings import settings_of
from mutransfer._study.files import SECTIONS, default_study_text, parse_study
from mutransfer._study.schema import TOP_ORDER, Study, family_only_fields
from mutransfer.errors import UserInputError
from operators.registry import OPERATORS

#: (proxy K, target K) tried in order: the quick study's sizes first, then smaller ones a coarser grid holds
K_PAIRS = ((6, 24), (4, 16), (4, 12), (2, 8), (2, 4))

SEARCH_SPACE_HELP = (
    "what the proxies search, each {type: loguniform|uniform|int|choice, low/high or values}; "
    "the rest is fixed under training"
)


def new_study(name: str, *, problem: str, data: Path | None, operator: str) -> Study:
    """The quick study for ``problem`` (its generated data, or the file ``data``) and ``operator``: validated, with
    the largest of :data:`K_PAIRS` the grid holds; a one-line :class:`UserInputError` if none parses."""
    family = OPERATORS.get(operator)
    if family is None:
        raise UserInputError(f"--operator {operator!r} is unknown; use one of: {', '.join(OPERATORS)}")
    mapping = yaml.safe_load(default_study_text())
    mapping["name"] = name
    mapping["problem"].update(
        name=problem,
        data=None if data is None else str(data),
        generated_resolution=None,
        resolution=None,
        n_train=None,
        n_test=None,
    )
    mapping["operator"]["type"] = operator
    for key in family_only_fields():
        if key not in family.fields:
            mapping["operator"].pop(key, None)
    mapping["proxy_resolution"] = None  # the grid of the user's data: a coarser proxy grid is theirs to choose
    if not family.scales("K"):
        for key in ("proxy_K", "target_K", "parametrization", "proxy_resolution"):
            mapping.pop(key, None)
        return parse_study(mapping, f"mutransfer init {name}")
    error: UserInputError | None = None
    for proxy_k, target_k in K_PAIRS:
        mapping.update(proxy_K=proxy_k, target_K=target_k)
        try:
            return parse_study(mapping, f"mutransfer init {name}")
        except UserInputError as exc:
            if "K" not in str(exc) and "modes" not in str(exc):
                raise
            error = exc
    assert error is not None
    raise error


def study_text(study: Study, *, folder: Path) -> str:
    """The study as a YAML file in ``folder``: every field with its help as a comment; ``problem.data`` relative to
    ``folder`` when the file lies in it (a relative path is read beside the study file)."""
    mapping = study.to_dict()
    data = mapping["problem"].get("data")
    if data is not None and Path(data).resolve().is_relative_to(folder.resolve()):
        mapping["problem"]["data"] = os.path.relpath(Path(data).resolve(), folder.resolve())
    top = {name: spec.help for name, _, spec in settings_of(Study)}
    lines = [
        f"# {study.name}: a mutransfer study written by `mutransfer init` (docs/sweep.md lists every field).",
        f"# Run it with: mutransfer sweep --study {study.name}.yaml",
    ]
    for key in TOP_ORDER:
        if key not in mapping:
            continue
        value = mapping[key]
        if key in SECTIONS or key == "search_space":
            helps = {n: spec.help for n, _, spec in settings_of(SECTIONS[key])} if key in SECTIONS else {}
            if key == "search_space":
                lines.append(f"# {SEARCH_SPACE_HELP}")
            lines.append(f"{key}:")
            for field, item in value.items():
                if helps.get(field):
                    lines.append(f"  # {helps[field]}")
                lines.append(f"  {field}: {_flow(item)}")
            continue
        if top.get(key):
            lines.append(f"# {top[key]}")
        lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def _flow(value: Any) -> str:
    """``value`` as one line of YAML (flow style)."""
    return yaml.safe_dump([value], default_flow_style=True, width=10**6, sort_keys=False).strip()[1:-1]
