"""Reading a study file's text: one line for a path that is no study file (missing, a folder, a FIFO or a device),
and a YAML loader (plain types only, as ``yaml.safe_load``) that refuses a key given twice."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from mutransfer.errors import UserInputError


def missing_study_hint(path: Path) -> str:
    """What to do about a study file that is not there: the same name with the other YAML suffix when that one
    exists, else how to write one (``mutransfer init``), which works outside the repository too."""
    if path.is_dir():
        return "pass a YAML file, not a directory"
    other = [path.with_suffix(s) for s in (".yaml", ".yml") if path.with_suffix(s) != path]
    found = [str(o) for o in other if o.is_file()]
    if found:
        return f"did you mean {found[0]}?"
    return f"write one with `mutransfer init {path.stem}` (or leave --study out for the built-in quick study)"


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (plain YAML types only) that refuses a key given twice in one mapping: YAML would keep the
    last one without a word (a second ``name:`` added at the end of a copied study silently won)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges a mapping: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {str(key)[:40]!r} is given twice; keep one", key_node.start_mark
                    )
                seen.add(key)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                pass
        return super().construct_mapping(node, deep=deep)


def read_study_text(path: str | os.PathLike) -> str:
    """The text of the study file ``path``; one line for a path that is not a study file (missing, a folder, a FIFO
    or a device: reading a FIFO would wait for ever) or not UTF-8 text."""
    if not isinstance(path, str | os.PathLike):
        raise UserInputError(f"study file: expected a path (str or os.PathLike), got {type(path).__name__}")
    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():
        raise UserInputError(f"study {path}: is not a regular file (a FIFO, a device or a socket); pass a YAML file")
    if not p.is_file():
        raise UserInputError(f"study {path}: file not found; {missing_study_hint(p)}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserInputError(f"study {path}: cannot be read ({type(exc).__name__}); check the file") from None
