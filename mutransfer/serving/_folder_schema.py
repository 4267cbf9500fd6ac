"""The schema of a model folder's own files, checked before anything in them is used (issue "Nothing lost", item 5).

``MLmodel`` must be a YAML mapping whose ``mutransfer`` flavor names its config and weights as plain file names of the
folder (no path: a flavor that said ``../../data.h5`` or ``/etc/passwd`` would have been read); ``config.json`` must be
a JSON object with every :class:`~mutransfer.serving._artifact.ModelCard` field of the right type, its shapes positive
and small enough to build one sample of. Anything else is one :class:`UserInputError` naming the file and the field;
no file's contents are echoed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TypeGuard

import yaml

from mutransfer.errors import UserInputError

#: a sample of more values than this (``input_shape``/``output_shape``: 512 MiB of float32) is not a trained sample
MAX_SAMPLE_VALUES = 2**27
#: a model folder's own files are small; larger ones are not read into memory
MAX_TEXT_BYTES = 2**20

RESTORE = "restore the model folder (or train it again)"
#: the file MLflow reads a model folder from
MLMODEL_FILE = "MLmodel"


def _text(directory: Path, name: str) -> str:
    path = directory / name
    try:
        if not path.is_file():
            raise UserInputError(f"model {directory}: {name} is missing or not a file; {RESTORE}")
        if path.stat().st_size > MAX_TEXT_BYTES:
            raise UserInputError(f"model {directory}: {name} is over {MAX_TEXT_BYTES // 2**20} MiB; {RESTORE}")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise UserInputError(f"model {directory}: {name} is not UTF-8 text; {RESTORE}") from None
    except OSError as exc:
        raise UserInputError(f"model {directory}: {name} cannot be read ({exc.strerror}); {RESTORE}") from None


def _file_name(directory: Path, field: str, value: object, default: str) -> str:
    """A flavor's file name: a plain name of a file in ``directory`` (no folder part), ``default`` when absent."""
    if value is None:
        return default
    if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\\" in value:
        raise UserInputError(
            f"model {directory}: MLmodel's mutransfer flavor field {field!r} must name a file of the model folder "
            f"(e.g. {default!r}); {RESTORE}"
        )
    return value


def read_flavor(directory: Path, flavor_name: str, config_default: str, weights_default: str) -> tuple[str, str]:
    """(config file name, weights file name) from ``directory``'s MLmodel; one line for anything malformed."""
    try:
        mlmodel = yaml.safe_load(_text(directory, MLMODEL_FILE))
    except (yaml.YAMLError, RecursionError):  # RecursionError: nested thousands deep
        raise UserInputError(f"model {directory}: MLmodel is not valid YAML; {RESTORE}") from None
    flavors = mlmodel.get("flavors") if isinstance(mlmodel, dict) else None
    if not isinstance(flavors, dict):
        raise UserInputError(f"model {directory}: MLmodel has no 'flavors' mapping; {RESTORE}")
    if flavor_name not in flavors:
        names = sorted(str(f) for f in flavors)
        raise UserInputError(
            f"model {directory}: flavors {names} lack {flavor_name!r}; "
            "only models logged by `mutransfer sweep` or kept by `mutransfer train --out` can be loaded"
        )
    flavor = flavors[flavor_name]
    if not isinstance(flavor, dict):
        raise UserInputError(f"model {directory}: MLmodel's {flavor_name} flavor is not a mapping; {RESTORE}")
    config = _file_name(directory, "config", flavor.get("config"), config_default)
    weights = _file_name(directory, "weights", flavor.get("weights"), weights_default)
    if config == weights:
        raise UserInputError(f"model {directory}: MLmodel names {config!r} as both config and weights; {RESTORE}")
    return config, weights


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape(value: object) -> bool:
    return (
        isinstance(value, list)
        and 0 < len(value) <= 5
        and all(_is_int(v) and v > 0 for v in value)
        and math.prod(value) <= MAX_SAMPLE_VALUES
    )


def _optional_positive(value: object) -> bool:
    return value is None or (_is_int(value) and value > 0)


#: ModelCard's fields: (test, what a valid value is)
_FIELDS = {
    "model_class": (lambda v: isinstance(v, str) and v != "", "a class name"),
    "model_config": (lambda v: isinstance(v, dict), "a JSON object"),
    "problem": (lambda v: isinstance(v, str) and v != "", "a problem's name"),
    "dim": (lambda v: _is_int(v) and 1 <= v <= 3, "1, 2 or 3"),
    "point_problem": (lambda v: isinstance(v, bool), "true or false"),
    "operator": (lambda v: isinstance(v, str) and v != "", "an operator's name"),
    "resolution": (_optional_positive, "a positive integer or null"),
    "time_resolution": (_optional_positive, "a positive integer or null"),
    "input_shape": (_shape, f"a list of 1 to 5 positive integers, {MAX_SAMPLE_VALUES:,} values at most"),
    "output_shape": (_shape, f"a list of 1 to 5 positive integers, {MAX_SAMPLE_VALUES:,} values at most"),
    "study": (lambda v: isinstance(v, str), "a study's name"),
}
_OPTIONAL = {
    "hyperparameters": (lambda v: isinstance(v, dict), "a JSON object"),
    "test_error": (lambda v: v is None or (isinstance(v, int | float) and not isinstance(v, bool)), "a number or null"),
    "mutransfer_version": (lambda v: isinstance(v, str), "a version string"),
    "format_version": (_is_int, "an integer"),
}


def read_card_fields(directory: Path, name: str, format_version: int) -> dict[str, object]:
    """``directory/name`` (config.json) as a dict of ModelCard's fields, each checked; one line for the first wrong."""
    try:
        card = json.loads(_text(directory, name))
    except (ValueError, RecursionError):  # JSONDecodeError, a number too long to convert, nesting thousands deep
        raise UserInputError(f"model {directory}: {name} is not valid JSON; {RESTORE}") from None
    if not isinstance(card, dict):
        raise UserInputError(f"model {directory}: {name} is not a JSON object; {RESTORE}")
    for key, (valid, what) in _FIELDS.items():
        if key not in card:
            raise UserInputError(f"model {directory}: {name} lacks {key!r}; {RESTORE}")
        if not valid(card[key]):
            raise UserInputError(f"model {directory}: {name}'s {key!r} must be {what}; {RESTORE}")
    for key, (valid, what) in _OPTIONAL.items():
        if key in card and not valid(card[key]):
            raise UserInputError(f"model {directory}: {name}'s {key!r} must be {what}; {RESTORE}")
    written = card.get("format_version", format_version)
    if isinstance(written, int) and written > format_version:
        raise UserInputError(
            f"model {directory}: {name} has format_version {written}, this mutransfer reads up to {format_version}; "
            "upgrade mutransfer (pip install -U mutransfer)"
        )
    return card
