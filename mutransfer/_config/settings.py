"""Settings declared once: a dataclass field carries its default, kind, check, help and CLI flag.

    @dataclass
    class Hyperparameters:
        lr: float = setting(1e-3, "master learning rate", kind="float", check=positive, example="1e-3")

From that one declaration come the study-file reader (mutransfer._config.reader),
the CLI flag with its default in ``--help`` (mutransfer._config.flags) and the
validation of a config object built in Python (:func:`problem_with`).

Checks are pure: ``check(value) -> None`` when fine, else the problem as a phrase
("must be > 0"); each reader words the error for its context (a study field path,
a flag, a TrainConfig attribute) and adds the example.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: a setting with no default (required in study files)
REQUIRED = dataclasses.MISSING


@dataclass(frozen=True)
class Setting:
    """How one field is read, checked and offered on the command line.

    kind: "int", "float", "str", "bool", "ints" (a list of positive integers, read by ``read``; a
    ``nargs="+"`` flag) or "custom" (read by ``read``).
    minimum: the smallest int allowed. check: for floats, returns the problem or None.
    choices: allowed values (a tuple, or a callable returning one, for registries).
    nullable: None is allowed (and means "unset"). flag: the CLI flag ("" for none;
    None derives ``--name-with-dashes``). read: custom YAML reader ``read(reader, name, default)``.
    parse: a custom field's flag parser (text -> value).
    """

    help: str
    kind: str = "custom"
    example: str = ""
    minimum: int | None = None
    #: the largest int allowed (a count of trainings or epochs a study could never finish: refused up front)
    maximum: int | None = None
    check: Callable[[float], str | None] | None = None
    choices: tuple | Callable[[], tuple] | None = None
    nullable: bool = False
    flag: str | None = None
    read: Callable | None = None
    #: for a "custom" field: its flag's argparse ``type`` (text -> value, ArgumentTypeError when bad)
    parse: Callable[[str], Any] | None = None

    def choice_values(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices

    def flag_name(self, name: str) -> str | None:
        if self.flag == "":
            return None
        return self.flag or "--" + name.replace("_", "-")


def setting(default: Any = REQUIRED, help: str = "", *, factory: Callable | None = None, **options) -> Any:
    """A dataclass field declared with its :class:`Setting` (``options`` are Setting's fields)."""
    meta = {"setting": Setting(help=help, **options)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def settings_of(cls) -> list[tuple[str, Any, Setting]]:
    """(name, default, Setting) of every declared field of dataclass ``cls``, in order (REQUIRED if none)."""
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("setting")
        if spec is None:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = REQUIRED
        out.append((f.name, default, spec))
    return out


def setting_of(cls, name: str) -> Setting:
    for field_name, _default, spec in settings_of(cls):
        if field_name == name:
            return spec
    raise KeyError(name)


# --------------------------------------------------------------------------- checks


def positive(value: float) -> str | None:
    return None if value > 0 else "must be > 0"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else "must be >= 0"


def unit_open(value: float) -> str | None:
    return None if 0 < value < 1 else "must be in (0, 1)"


def fraction(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def problem_with(spec: Setting, value) -> str | None:
    """Why ``value`` is not valid for ``spec`` (a phrase), or None. For values built in Python (no YAML quirks)."""
    if value is None:
        return None if spec.nullable else "must be set"
    if spec.kind == "int":
        if not is_int(value):
            return "must be an integer"
        if spec.minimum is not None and value < spec.minimum:
            return integer_requirement(spec.minimum)
        if spec.maximum is not None and value > spec.maximum:
            return f"must be <= {spec.maximum}"
    elif spec.kind == "float":
        if not is_number(value) or not math.isfinite(value):
            return "must be a finite number"
        if spec.check is not None:
            return spec.check(float(value))
    elif spec.kind == "str":
        choices = spec.choice_values()
        if not isinstance(value, str) or (choices is not None and value not in choices):
            return f"is unknown; use one of: {', '.join(map(str, choices or ()))}"
    elif spec.kind == "bool" and not isinstance(value, bool):
        return "must be true or false"
    return None


def integer_requirement(minimum: int) -> str:
    """The phrase for an integer below its minimum: "must be a positive integer" for 1."""
    if minimum == 1:
        return "must be a positive integer"
    if minimum == 0:
        return "must be an integer >= 0"
    return f"must be >= {minimum}"
