"""Read typed fields out of a YAML mapping, with one-line errors that name the field path.

:class:`Reader` reads one mapping (a study file section) and fails with
``UserInputError("study FILE: section.field: <problem>, e.g. <example>")``, adding
"(set by --flag)" when a CLI override set the field. :func:`read_section` reads a
whole settings dataclass (mutransfer._config.settings) from one mapping, so each
field's default and check are the ones declared with it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re

from mutransfer._config.settings import REQUIRED, Setting, settings_of
from mutransfer.errors import UserInputError


def kind_of(value) -> str:
    """How a YAML value reads in an error: 'null', 'a string ('x')', 'a list', …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({value!r})" if len(value) <= 40 else f"a string of {len(value):,} characters"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _eg(example: str) -> str:
    return f", e.g. {example}" if example else ""


class Reader:
    """Typed access to one YAML mapping at ``path`` of the file ``source``."""

    def __init__(self, source: str, path: str, mapping, flags: dict[str, str]):
        self.source, self.path, self.flags = source, path, flags
        if mapping is None:
            mapping = {}
        if not isinstance(mapping, dict):
            self.fail(self.path or "(top level)", f"must be a mapping of fields, got {kind_of(mapping)}")
        self.mapping = mapping
        self.seen: set[str] = set()

    # -- errors --
    def where(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def fail(self, where: str, message: str):
        flag = self.flags.get(where)
        suffix = f" (set by {flag})" if flag else ""
        if flag:  # advice in the form the value was given: "e.g. proxy_K: 6" -> "e.g. --proxy-K 6"
            field = where.rsplit(".", 1)[-1]
            message = re.sub(rf"\b(e\.g\. ){re.escape(field)}: ", rf"\g<1>{flag} ", message)
        raise UserInputError(f"study {self.source}: {where}: {message}{suffix}")

    # -- access --
    def has(self, name: str) -> bool:
        return name in self.mapping

    def raw(self, name: str, default=REQUIRED, *, example: str = ""):
        self.seen.add(name)
        if name in self.mapping:
            return self.mapping[name]
        if default is REQUIRED:
            typo = self._close_key(name)
            if typo is not None:
                self.fail(self.where(name), f"is required; the file has {typo!r}: rename it to {name}")
            hint = f", e.g. {name}: {example}" if example else ""
            self.fail(self.where(name), f"is required{hint}")
        return default

    def _close_key(self, name: str) -> str | None:
        """A key of the mapping that looks like a mistyped ``name`` (another case, or one character off)."""
        keys = [k for k in self.mapping if isinstance(k, str) and k != name]
        same = [k for k in keys if k.lower() == name.lower()]
        close = difflib.get_close_matches(name, keys, n=1, cutoff=0.85)
        found = same or close
        return found[0] if found else None

    def integer(self, name, default=REQUIRED, *, minimum=None, maximum=None, example="", allow_none=False):
        value = self.raw(name, default, example=example)
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(self.where(name), f"must be an integer, got {kind_of(value)}{_eg(example)}")
        if minimum is not None and value < minimum:
            self.fail(self.where(name), f"must be >= {minimum}, got {value}{_eg(example)}")
        if maximum is not None and value > maximum:
            self.fail(self.where(name), f"must be <= {maximum}, got {value}{_eg(example)}")
        return value

    def number(self, name, default=REQUIRED, *, example="", allow_none=False, check=None):
        value = self.raw(name, default, example=example)
        if value is None and allow_none:
            return None
        value = self.as_number(self.where(name), value, example)
        if check is not None:
            problem = check(value)
            if problem:
                self.fail(self.where(name), f"{problem}, got {value:g}{_eg(example)}")
        return value

    def as_number(self, where: str, value, example: str = "") -> float:
        # YAML 1.1 reads "1e-4" (no dot) as a string: accept numeric strings.
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"must be a number, got {kind_of(value)}{_eg(example)}")
        value = float(value)
        if not math.isfinite(value):
            self.fail(where, f"must be a finite number, got {value}{_eg(example)}")
        return value

    def string(self, name, default=REQUIRED, *, choices=None, example="", allow_none=False):
        value = self.raw(name, default, example=example)
        if value is None and allow_none:
            return None
        if not isinstance(value, str) or not value:
            self.fail(self.where(name), f"must be a non-empty string, got {kind_of(value)}{_eg(example)}")
        if choices is not None and value not in choices:
            self.fail(self.where(name), f"{value!r} is unknown; use one of: {', '.join(map(str, choices))}")
        return value

    def choice(self, name, default, choices, *, what: str):
        """A value that must be one of ``choices`` (YAML booleans included, plain integers not), e.g. auto/true/false."""
        value = self.raw(name, default)
        if is_plain_int(value) or value not in choices:  # 1 == True would otherwise pass
            self.fail(self.where(name), f"must be {what}, got {kind_of(value)}")
        return value

    def sub(self, name: str) -> Reader:
        self.seen.add(name)
        return Reader(self.source, self.where(name), self.mapping.get(name), self.flags)

    def finish(self, known: tuple[str, ...] | None = None) -> None:
        """Fail on the first key that was not read (unknown or misspelled)."""
        for key in self.mapping:
            if key not in self.seen:
                expected = ", ".join(known) if known else ", ".join(sorted(self.seen))
                self.fail(self.where(str(key)), f"unknown key; remove it or use one of: {expected}")

    # -- declared settings --
    def setting(self, name: str, default, spec: Setting):
        """Read one declared setting with its own kind, check, choices and example."""
        if spec.read is not None:
            return spec.read(self, name, default)
        if spec.kind == "int":
            return self.integer(
                name,
                default,
                minimum=spec.minimum,
                maximum=spec.maximum,
                example=spec.example,
                allow_none=spec.nullable,
            )
        if spec.kind == "float":
            return self.number(name, default, example=spec.example, allow_none=spec.nullable, check=spec.check)
        if spec.kind == "str":
            return self.string(
                name, default, choices=spec.choice_values(), example=spec.example, allow_none=spec.nullable
            )
        if spec.kind == "bool":
            return self.choice(name, default, (True, False), what="true or false")
        return self.raw(name, default, example=spec.example)


def is_plain_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_section(r: Reader, cls, **fixed):
    """An instance of settings dataclass ``cls`` read from ``r`` (``fixed`` values are passed as given)."""
    values = {name: r.setting(name, default, spec) for name, default, spec in settings_of(cls) if name not in fixed}
    r.finish(tuple(f.name for f in dataclasses.fields(cls)))
    return cls(**values, **fixed)
