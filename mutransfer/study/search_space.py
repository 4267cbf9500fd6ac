"""The ``search_space`` section: which hyperparameters a study searches, and their distributions.

Each searchable hyperparameter is checked with the check declared for it in
mutransfer.training.hyperparameters / mutransfer.study.schema, so a value the
search may draw is one the training section would accept.
"""

from __future__ import annotations

from mutransfer.config.reader import Reader, kind_of
from mutransfer.config.settings import problem_with, setting_of, unit_open
from mutransfer.study.schema import Distribution, TrainingSpec

#: hyperparameters a study may search, and the distributions each accepts
SEARCHABLE = {
    "lr": ("loguniform", "uniform", "choice"),
    "batch_size": ("choice",),
    "beta1": ("uniform", "loguniform", "choice"),
    "beta2": ("uniform", "loguniform", "choice"),
    "weight_decay": ("loguniform", "uniform", "choice"),
    "clip_value": ("loguniform", "uniform", "choice"),
    "init_scale": ("loguniform", "uniform", "choice"),
}
_EXAMPLES = {
    "lr": "1e-4",
    "batch_size": "[10, 20, 40]",
    "beta1": "0.9",
    "beta2": "0.99",
    "weight_decay": "1e-5",
    "clip_value": "0.01",
    "init_scale": "1.0",
}


def value_problem(name: str, value: float) -> str | None:
    """Why ``value`` is invalid for hyperparameter ``name``, with its declared check (None if fine)."""
    if name in ("beta1", "beta2"):  # Adam's betas (training.betas): each in (0, 1)
        return unit_open(value)
    if name == "clip_value":
        return None if value > 0 else "must be > 0"
    return problem_with(setting_of(TrainingSpec, name), value)


def read_distribution(r: Reader, name: str) -> Distribution:
    allowed = SEARCHABLE[name]
    kind = r.string("type", example=allowed[0], choices=allowed)
    example = _EXAMPLES[name]
    if kind == "choice":
        shown = example if name == "batch_size" else f"[{example}]"
        values = r.raw("values", example=shown)
        if not isinstance(values, list) or not values:
            r.fail(r.where("values"), f"must be a non-empty list, e.g. values: {shown}")
        checked = [_read_choice(r, name, i, v, example) for i, v in enumerate(values)]
        if len(set(checked)) != len(checked):
            r.fail(r.where("values"), "has duplicates; list each value once")
        dist = Distribution("choice", values=checked)
    else:
        low = r.number("low", example=example)
        high = r.number("high", example=example)
        for key, value in (("low", low), ("high", high)):
            problem = value_problem(name, value)
            if problem is None and kind == "loguniform" and value <= 0:
                problem = "must be > 0 (log scale)"
            if problem:
                r.fail(r.where(key), f"{problem}, e.g. {example}")
        if not high > low:
            r.fail(r.where("high"), f"must be > low ({low:g}); give a range low < high")
        dist = Distribution(kind, low=low, high=high)
    r.finish(("type", "values") if kind == "choice" else ("type", "low", "high"))
    return dist


def _read_choice(r: Reader, name: str, i: int, value, example: str):
    where = f"{r.where('values')}[{i}]"
    if name == "batch_size":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            r.fail(where, f"must be an integer >= 1, got {kind_of(value)}, e.g. 20")
        return value
    number = r.as_number(where, value, example)
    problem = value_problem(name, number)
    if problem:
        r.fail(where, f"{problem}, got {number:g}, e.g. {example}")
    return number


def read_search_space(r: Reader) -> dict[str, Distribution]:
    space = {}
    for key in r.mapping:
        if key not in SEARCHABLE:
            r.fail(r.where(str(key)), f"cannot be searched; use one of: {', '.join(SEARCHABLE)}")
        space[key] = read_distribution(r.sub(key), key)
    if not space:
        r.fail(
            r.path,
            "is empty; search at least one hyperparameter, e.g. search_space: {lr: {type: loguniform, low: 1e-4, high: 1e-2}}",
        )
    return space
