"""The ``search_space`` section: which hyperparameters a study searches, and their distributions.

Every field of the ``training`` section declared with ``setting()`` can be searched, by the kind of value it
takes: a float by ``loguniform``, ``uniform`` or ``choice``; an integer by ``int`` (a range) or ``choice``; a
named option (``schedule``, ``precision``, ``loss``) by ``choice``. Adam's betas are searched one at a time
(``beta1``, ``beta2``). So are the operator's own fields (``operator.layers``, ``operator.options.<key>``, the same
on the proxy and the target) and the proxy's size where a transfer rule covers it (``proxy_K``,
``operator.width``: checked in mutransfer._study.resolve). Each value a search may draw is checked with the check
declared for its field (mutransfer._training.hyperparameters / mutransfer._study.schema), so it is one the study
would accept fixed; :func:`trial_study` is the study as one trial's values see it.
"""

from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace

from mutransfer._config.reader import Reader, kind_of
from mutransfer._config.settings import Setting, is_int, problem_with, setting_of, settings_of, unit_open
from mutransfer._study.distribution import Distribution
from mutransfer._study.schema import OperatorSpec, Study, TrainingSpec
from mutransfer._training.hyperparameters import consistency_problem

#: the training fields a search cannot draw, and why (the message names what to search instead)
NOT_SEARCHABLE = {
    "betas": "search beta1 and beta2 (Adam's betas one at a time)",
    "milestones": "a list of epochs; search step_size or gamma instead",
    "seed": "the seed is not a hyperparameter; set training.seed (--verify retrains the target over seeds)",
}
#: the distributions each kind of training field accepts
_BY_KIND = {"float": ("loguniform", "uniform", "choice"), "int": ("int", "choice"), "str": ("choice",)}
#: Adam's betas, searched one at a time (training.betas is one list), with an example each
_BETAS = {"beta1": "0.9", "beta2": "0.99"}


def _searchable() -> dict[str, tuple[str, ...]]:
    """Every field of the ``training`` section declared with ``setting()`` (mutransfer._training.hyperparameters,
    mutransfer._study.schema.TrainingSpec), with the distributions its kind accepts; Adam's betas one by one."""
    out: dict[str, tuple[str, ...]] = {}
    for name, _default, spec in settings_of(TrainingSpec):
        if name == "betas":
            out.update(dict.fromkeys(_BETAS, _BY_KIND["float"]))
        elif name not in NOT_SEARCHABLE and spec.kind in _BY_KIND:
            out[name] = _BY_KIND[spec.kind]
    return out


#: hyperparameters a study may search, and the distributions each accepts
SEARCHABLE = _searchable()

#: the operator's own fields a search may draw (``operator.<field>``): the same on the proxy and the target, carried
#: over unchanged; ``layers`` for every family, the others where the family has them (its ``fields``)
OPERATOR_SEARCHABLE = ("layers", "projection_channels", "heads")
#: ``operator.options.<key>``: a key the study's ``operator.options`` sets (a family's or a factory's own option)
OPTIONS_PREFIX = "operator.options."
#: the operator's fields a search cannot draw, and why
OPERATOR_NOT_SEARCHABLE = {
    "type": "the operator family is the study's; run a study per family and compare them (mutransfer studies)",
    "padding": "the padding sets the grid K is checked against; set operator.padding",
    "k_exponent": "the K rule's exponent is a rule, not a hyperparameter; measure it with operator.k_exponent: data",
}


#: the proxy's sizes a search may draw where a transfer rule covers them (mutransfer._study.resolve): each trial's
#: proxy at its own K or width, the target transferred from the winner's
SIZE_KEYS = ("proxy_K", "operator.width")


def is_operator_key(name: str) -> bool:
    """Whether searched ``name`` is one of the operator's own fields (``operator.layers``, ``operator.options.x``)."""
    return name.startswith("operator.")


def _spec(name: str) -> Setting | None:
    """The declared setting of searchable ``name`` (None for beta1/beta2, checked as Adam's betas, and for an
    operator option, whose values the family or factory checks)."""
    if name in _BETAS or name.startswith(OPTIONS_PREFIX):
        return None
    if is_operator_key(name):
        return setting_of(OperatorSpec, name.removeprefix("operator."))
    if name == "proxy_K":
        return setting_of(Study, name)
    return setting_of(TrainingSpec, name)


def kind_of_hyperparameter(name: str) -> str:
    """``"float"``, ``"int"``, ``"str"``, or ``"any"`` (an operator option): the kind of value ``name`` takes."""
    if name.startswith(OPTIONS_PREFIX):
        return "any"
    spec = _spec(name)
    return "float" if spec is None else spec.kind


def typed(name: str, value: object) -> object:
    """``value`` as the kind searchable ``name`` takes: an int, a float or a string (a configuration read back
    from JSON or MLflow, or drawn by a sampler that returns numpy numbers); an operator option as it is."""
    kind = kind_of_hyperparameter(name)
    if kind == "any":
        return value
    if kind == "str":
        return str(value)
    return int(value) if kind == "int" else float(value)  # type: ignore[call-overload, arg-type]


#: examples in messages where a search's range differs from the training field's own example
_RANGE_EXAMPLES = {"lr": "1e-4", "batch_size": "[10, 20, 40]", "weight_decay": "1e-5"}


def _example(name: str) -> str:
    if name in _RANGE_EXAMPLES:
        return _RANGE_EXAMPLES[name]
    if name.startswith(OPTIONS_PREFIX):
        return "[a, b]"
    spec = _spec(name)
    if spec is None:
        return _BETAS[name]
    if spec.kind == "str":
        return ", ".join(map(str, spec.choice_values() or ()))
    return spec.example or "1"


def value_problem(name: str, value: object) -> str | None:
    """Why ``value`` is invalid for hyperparameter ``name``, with its declared check (None if fine)."""
    if name.startswith(OPTIONS_PREFIX):  # checked by building the operator with it (mutransfer._study.resolve)
        return None if isinstance(value, (int, float, str, bool)) else "must be a number, a string or true/false"
    spec = _spec(name)
    if spec is None:  # Adam's betas (training.betas): each in (0, 1)
        return unit_open(float(value))  # type: ignore[arg-type]
    if name == "clip_value":
        return None if value > 0 else "must be > 0"  # type: ignore[operator]
    return problem_with(spec, value)


def read_distribution(r: Reader, name: str) -> Distribution:
    allowed = SEARCHABLE.get(name) or _operator_distributions(name)
    kind = r.string("type", example=allowed[0], choices=allowed)
    example = _example(name)
    if kind == "choice":
        shown = example if example.startswith("[") else f"[{example}]"
        values = r.raw("values", example=shown)
        if not isinstance(values, list) or not values:
            r.fail(r.where("values"), f"must be a non-empty list, e.g. values: {shown}")
        if len(values) > MAX_CHOICES:
            r.fail(
                r.where("values"),
                f"lists {len(values):,} values, more than a search tries (at most {MAX_CHOICES:,}); list fewer, or "
                "search a range (type: uniform, loguniform or int, with low and high)",
            )
        checked = [_read_choice(r, name, i, v, example) for i, v in enumerate(values)]
        if len(set(checked)) != len(checked):
            r.fail(r.where("values"), "has duplicates; list each value once")
        dist = Distribution("choice", values=checked)
    else:
        low = _read_bound(r, name, "low", kind, example)
        high = _read_bound(r, name, "high", kind, example)
        if not high > low:
            r.fail(r.where("high"), f"must be > low ({low:g}); give a range low < high")
        dist = Distribution(kind, low=low, high=high)
    r.finish(("type", "values") if kind == "choice" else ("type", "low", "high"))
    return dist


def _read_bound(r: Reader, name: str, key: str, kind: str, example: str):
    """A range's ``low`` or ``high``: a number the training field accepts (an integer for ``int``)."""
    if kind == "int":
        value = r.raw(key, example=example)
        if not is_int(value):
            r.fail(r.where(key), f"must be an integer, got {kind_of(value)}, e.g. {example}")
    else:
        value = r.number(key, example=example)
    problem = value_problem(name, value)
    if problem is None and kind == "loguniform" and value <= 0:
        problem = "must be > 0 (log scale)"
    if problem:
        r.fail(r.where(key), f"{problem}, e.g. {example}")
    return value


def _read_choice(r: Reader, name: str, i: int, value, example: str):
    where = f"{r.where('values')}[{i}]"
    kind = kind_of_hyperparameter(name)
    if kind == "int":
        if not is_int(value):
            r.fail(where, f"must be an integer, got {kind_of(value)}, e.g. {example}")
        checked = value
    elif kind == "str":
        if not isinstance(value, str):
            r.fail(where, f"must be one of {example}, got {kind_of(value)}")
        checked = value
    elif kind == "any":
        checked = value
    else:
        checked = r.as_number(where, value, example)
    problem = value_problem(name, checked)
    if problem:
        shown = checked if isinstance(checked, str) else f"{checked:g}"
        r.fail(where, f"{problem}, got {shown}, e.g. {example}")
    return checked


def _operator_distributions(name: str) -> tuple[str, ...]:
    """The distributions an operator field takes (its kind's; an option: ``choice``)."""
    if name.startswith(OPTIONS_PREFIX):
        return ("choice",)
    return _BY_KIND[kind_of_hyperparameter(name)]


def _operator_key_problem(key: str, operator: OperatorSpec, fields: tuple[str, ...], factory: bool) -> str | None:
    """Why ``operator.<field>`` cannot be searched in a study of ``operator`` (whose family has ``fields``;
    ``factory``: a user's factory, which takes its depth, if any, among its own options)."""
    if key.startswith(OPTIONS_PREFIX):
        option = key.removeprefix(OPTIONS_PREFIX)
        if option not in (operator.options or {}):
            given = ", ".join(sorted(operator.options or {})) or "none"
            return f"names no key of operator.options (it sets: {given}); set it there first, then search it"
        return None
    name = key.removeprefix("operator.")
    if name in OPERATOR_NOT_SEARCHABLE:
        return f"cannot be searched: {OPERATOR_NOT_SEARCHABLE[name]}"
    if key in SIZE_KEYS:
        return None  # where a transfer rule covers it: checked with the study (mutransfer._study.resolve)
    if factory and name == "layers":
        return "a factory builds its own depth (it is not given operator.layers); search its depth option instead, operator.options.<key>"
    if name not in OPERATOR_SEARCHABLE or (name != "layers" and name not in fields):
        own = [f"operator.{f}" for f in OPERATOR_SEARCHABLE if f == "layers" or f in fields]
        return f"is not a field {operator.type} searches; use one of: {', '.join(own)}, or operator.options.<key>"
    return None


def read_search_space(
    r: Reader, operator: OperatorSpec, fields: tuple[str, ...], factory: bool = False
) -> dict[str, Distribution]:
    """The ``search_space`` section; ``operator``: the study's (``operator.<field>`` keys are checked against it,
    its family's ``fields`` and whether it is a user's ``factory``)."""
    space = {}
    for key in r.mapping:
        if isinstance(key, str) and (is_operator_key(key) or key in SIZE_KEYS):
            problem = _operator_key_problem(key, operator, fields, factory)
            if problem:
                r.fail(r.where(key), problem)
            space[key] = read_distribution(r.sub(key), key)
            continue
        if key in NOT_SEARCHABLE:
            r.fail(r.where(str(key)), f"cannot be searched: {NOT_SEARCHABLE[key]}")
        if key not in SEARCHABLE:
            r.fail(
                r.where(str(key)),
                f"cannot be searched; use one of: {', '.join(SEARCHABLE)}, or an operator field (operator.layers)",
            )
        space[key] = read_distribution(r.sub(key), key)
    if not space:
        r.fail(
            r.path,
            "is empty; search at least one hyperparameter, e.g. search_space: {lr: {type: loguniform, low: 1e-4, high: 1e-2}}",
        )
    return space


#: the most values a ``choice`` may list (a search tries a few dozen trials; checking every value of a longer list
#: against the study would take minutes before anything starts)
MAX_CHOICES = 1000

#: the most combinations of searched values :func:`combination_problem` tries (beyond it, one field at a time)
_MAX_COMBINATIONS = 4096


def combination_problem(training: TrainingSpec, space: dict[str, Distribution]) -> tuple[str, str] | None:
    """(searched field, problem) for a value of the search that the training section's rules between fields
    refuse with the fixed ones or with another searched value (``step_size`` searched over a ``cosine``
    schedule, ``data_weight`` without ``loss: pino``), else None. Each choice's values are tried, and each
    range's ends."""
    fields = {f for f, _d, _s in settings_of(TrainingSpec)}
    names = [n for n in space if n in fields]
    values = [space[n].candidates() for n in names]
    combos = 1
    for v in values:
        combos *= len(v)
    if combos > _MAX_COMBINATIONS:  # one field at a time over the fixed ones
        tries = ({n: v} for n, vs in zip(names, values) for v in vs)
    else:
        tries = (dict(zip(names, combo)) for combo in itertools.product(*values))
    base = {f: getattr(training, f) for f in fields}
    for drawn in tries:
        found = consistency_problem(SimpleNamespace(**{**base, **drawn}))
        if found is not None:
            field, problem = found
            culprit = field if field in drawn else next(iter(drawn), field)
            shown = ", ".join(f"{k} {v}" for k, v in drawn.items())
            return culprit, f"the search can draw {shown}, which the training rules refuse: {problem}"
    return None


def trial_study(study: Study, hp: dict) -> Study:
    """``study`` as one trial's hyperparameters ``hp`` see it: the operator fields it searched (``operator.layers``,
    ``operator.options.<key>``) set on its operator, and a searched proxy size (``proxy_K``, ``operator.width``) as
    the proxy's. The model the trial builds, the transfer from it and the target it transfers to all read this."""
    fields = {
        k.removeprefix("operator."): v for k, v in hp.items() if is_operator_key(k) and not k.startswith(OPTIONS_PREFIX)
    }
    options = {k.removeprefix(OPTIONS_PREFIX): v for k, v in hp.items() if k.startswith(OPTIONS_PREFIX)}
    if not fields and not options and "proxy_K" not in hp:
        return study
    operator = dataclasses.replace(study.operator, **fields)
    if options:
        operator.options = {**(study.operator.options or {}), **options}
    proxy_k = int(hp["proxy_K"]) if "proxy_K" in hp else study.proxy_K  # type: ignore[call-overload]
    return dataclasses.replace(study, operator=operator, proxy_K=proxy_k)


def without_sizes(hp: dict) -> dict:
    """``hp`` without a searched proxy size (:data:`SIZE_KEYS`): a training at the target's size (the direct
    search) builds the target's model whatever proxy size the configuration names."""
    return {k: v for k, v in hp.items() if k not in SIZE_KEYS}
