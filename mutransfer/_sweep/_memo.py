"""Resume as memoisation: a step's result is kept in ``state.json`` beside the inputs it was made from.

:func:`remembered` runs a step's work once per inputs: a study resumed after the step finished gets the stored
result back (nothing is trained again); a stored result whose inputs differ from the step's now (a flag that asks
for another verification grid than the one the study ran, a ``state.json`` edited or copied from another study) is
refused in one line, saying what to do, instead of being passed off as what was asked. The
steps that train or write something once (the target, the coordinate check, the verification, the direct baseline,
the logged model, the report) are remembered this way, each under its own key; the trials' own progress inside a
search (its plan, its rungs, top-k's candidates) is kept by the search as it goes.

``state.json`` keeps each result under its key (as it always did: a folder written before the inputs were kept
resumes as it is) and the inputs under ``inputs.<key>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from mutransfer._sweep.session import Prepared
from mutransfer.errors import UserInputError

R = TypeVar("R")

#: state.json's record of the inputs each remembered result was made from, by the result's key
INPUTS_KEY = "inputs"
#: what to do when a stored result was made from other inputs than the study's own steps give now (a state.json
#: edited, or copied from another study: not a state --rebuild-state rebuilds, since it reads as intact)
_NOT_THIS_STUDYS = "restore the folder's state.json from a copy, or run the study afresh under --name NEW"


@dataclass(frozen=True)
class Memo(Generic[R]):
    """How a step's result is kept: under ``key`` in ``state.json``, written by ``dump`` and read back by ``load``;
    ``fix``: what to do when the stored result was made from other inputs (by default: the folder's state is not
    this study's, restore it or start afresh)."""

    key: str
    load: Callable[[dict], R]
    dump: Callable[[R], dict]
    fix: str = _NOT_THIS_STUDYS


def plain(inputs: Mapping[str, object]) -> dict:
    """``inputs`` as ``state.json`` holds them (a JSON round trip: tuples become lists, keys strings)."""
    return json.loads(json.dumps(dict(inputs), sort_keys=True, default=str))


def remembered(study: Prepared, memo: Memo[R], inputs: Mapping[str, object], make: Callable[[], R]) -> R:
    """``make()``'s result, made once for ``inputs``: the result ``state.json`` holds under ``memo.key`` when it was
    made from the same inputs (or kept before inputs were), else made now and kept with them. A stored result made
    from other inputs raises a one-line :class:`~mutransfer.errors.UserInputError` naming the first input that
    differs and ``memo.fix``."""
    wanted = plain(inputs)
    stored = study.state.get(memo.key)
    if stored is not None:
        kept = (study.state.get(INPUTS_KEY) or {}).get(memo.key)
        if kept is None or kept == wanted:
            return memo.load(stored)
        if not isinstance(kept, dict):  # not written by this module: a state.json edited by hand
            raise UserInputError(
                f"{study.study_dir.state_file}: field 'inputs' entry {memo.key!r} must be a mapping of the inputs its "
                f"result was made from, found {type(kept).__name__}; {memo.fix}"
            )
        name = next(k for k in sorted(set(kept) | set(wanted)) if kept.get(k) != wanted.get(k))
        raise UserInputError(
            f"{study.study_dir.state_file}: the stored {memo.key} was made from {name} {_short(kept.get(name))}, but "
            f"this run's {name} is {_short(wanted.get(name))}; {memo.fix}"
        )
    value = make()
    every = dict(study.state.get(INPUTS_KEY) or {}, **{memo.key: wanted})
    study.update_state(**{memo.key: memo.dump(value), INPUTS_KEY: every})
    return value


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."
