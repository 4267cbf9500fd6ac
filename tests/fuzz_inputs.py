"""Generators of bad inputs for the fuzz suite: CLI arguments (from the parsers' own actions), study files.

A generated value is kept only when it is *known* bad (:func:`flag_value_is_bad`):
the flag's own argparse type rejects it, it is not finite (nan, inf), it is
negative, or it is a huge size (>= 1e6 modes, width, grid points, ...) on a flag
that sizes a model or a dataset. Valid inputs are not generated, so every case
must be refused.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import yaml
from hypothesis import strategies as st

#: flags whose huge values (>= HUGE) must be refused before anything is allocated, per command
SIZE_FLAGS = {
    # (not --projection-channels: a projection MLP of 1e6 channels fits a few GiB; the memory check decides)
    "train": {"modes", "width", "layers", "n_train", "n_test", "resolution", "time_resolution", "padding", "heads"},
    "coord-check": {"modes", "width", "layers", "padding", "n_train", "n_test", "resolution"},
    "sweep": {"proxy_K", "target_K", "proxy_width", "target_width"},
    "landscape": {"modes", "widths"},
    "transfer": {"dim"},
    "plan": {"dim", "modes"},
    "data generate": {"n", "resolution"},
}
HUGE = 10**6
#: commands whose sizes are only bad when they cannot fit any machine (a fine grid is slow, not wrong)
HUGE_FOR = {"data generate": 10**12}
#: flags where a negative number is a meaningful value (a time index counted from the end)
NEGATIVE_OK = {"input_time"}

NUMBER_TEXTS = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1e999",
    "-1e999",
    "",
    " ",
    "abc",
    "1.5",
    "-1",
    "0",
    "-0",
    "0x10",
    "1,2",
    "--",
    "1e-400",
    "2**8",
    "١",
]
HUGE_INTS = [10**6, 2**31, 2**63, 10**12, 10**30, 10**100]


def walk_parsers(parser: argparse.ArgumentParser, path: tuple = ()):
    """(command path, parser) of every leaf command of ``parser`` (``("data", "generate")``, ...)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and path:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from walk_parsers(sub, path + (name,))


def value_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions of ``parser`` that take a value (flags and positionals; not --help, not store_true)."""
    return [
        a
        for a in parser._actions
        if a.nargs != 0 and not isinstance(a, argparse._SubParsersAction) and a.dest != "help"
    ]


def _parse(action: argparse.Action, text: str):
    """``text`` as the action's type reads it; raises when argparse would refuse it."""
    if action.choices is not None and action.type is None:
        if text not in action.choices:
            raise ValueError(text)
        return text
    value = action.type(text) if action.type is not None else text
    if action.choices is not None and value not in action.choices:
        raise ValueError(text)
    return value


def flag_value_is_bad(command: str, action: argparse.Action, text: str) -> bool:
    """Whether ``text`` is a known-bad value for ``action`` of ``command``."""
    try:
        value = _parse(action, text)
    except (argparse.ArgumentTypeError, ValueError, TypeError, OverflowError):
        return True
    except Exception:  # noqa: BLE001 - a type function that crashes is argparse's problem to report
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return True
    if value < 0 and action.dest not in NEGATIVE_OK:
        return True
    return value >= HUGE_FOR.get(command, HUGE) and action.dest in SIZE_FLAGS.get(command, ())


def _typed_texts(command: str, action: argparse.Action):
    texts = st.one_of(
        st.sampled_from(NUMBER_TEXTS),
        st.integers(max_value=0).map(str),
        st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False).map(repr),
        st.text(max_size=6),
    )
    if action.dest in SIZE_FLAGS.get(command, ()):
        low = HUGE_FOR.get(command, HUGE)
        texts = st.one_of(
            texts, st.sampled_from([v for v in HUGE_INTS if v >= low]).map(str), st.integers(low, 10**15).map(str)
        )
    return texts


def bad_flag_values(command: str, action: argparse.Action, files: dict):
    """A strategy of known-bad text values for ``action`` (None: no generator for this free-text flag)."""
    if action.type is not None or action.choices is not None:
        return _typed_texts(command, action).filter(lambda t: flag_value_is_bad(command, action, t))
    return free_text_values(command, action.dest, files)


def free_text_values(command: str, dest: str, files: dict):
    """Known-bad values of the untyped flags the suite knows about (paths, devices, keys, names)."""
    missing = str(Path(files["dir"]) / "no-such-file.h5")
    paths = st.sampled_from([missing, files["dir"], files["empty"], files["text"], files["truncated"], ""])
    table = {
        "data": paths,
        "study": paths,
        "file": paths,
        "device": st.sampled_from(["gpu", "tpu", "cuda:x", "cuda:99", "cpu:0:1", "", "auto "]),
        "output_time": st.sampled_from(["abc", "1:2:0", "99999", "-99999", "::-1", ""]),
        "input_key": st.sampled_from(["no_such_key", ""]),
        "output_key": st.sampled_from(["no_such_key", ""]),
        "field": st.sampled_from(["no_such_field"]),
        "option": st.sampled_from(["noequals", "1bad=2", "=3", "width=8"]),
        "checkpoint_dir": st.sampled_from([files["text"]]),
        "runs_dir": st.sampled_from([files["text"]]),
        "name": st.sampled_from(["../escape", "a/b", "", ".", "..", " "]),
        "tracking_uri": st.sampled_from(["bogus-scheme://x", ""]),
        "address": st.sampled_from(["", "not an address", "ray://", "host:notaport"]),
    }
    if command in ("coord-check", "landscape"):
        table["out"] = st.sampled_from([files["text"]])
    return table.get(dest)


def flag_argv(action: argparse.Action, values: list[str]) -> list[str]:
    """The argv piece that gives ``action`` the ``values`` (positional: just the values)."""
    if not action.option_strings:
        return list(values)
    flag = max(action.option_strings, key=len)
    if len(values) == 1 and values[0].startswith("-"):
        return [f"{flag}={values[0]}"]  # "-1" as a value, not as an option
    return [flag, *values]


def splice(base: list, parser: argparse.ArgumentParser, action: argparse.Action, piece: list[str]) -> list[str]:
    """``base`` (a list of argv pieces) with the piece of ``action`` (and of flags exclusive with it) replaced."""
    exclusive = {action}
    for group in parser._mutually_exclusive_groups:
        if action in group._group_actions:
            exclusive |= set(group._group_actions)
    drop = {s for a in exclusive for s in a.option_strings}
    kept = [p for p in base if not (isinstance(p, list) and p and p[0] in drop)]
    if not action.option_strings:  # a positional: replace the base's placeholder
        kept = [piece if p == ("POSITIONAL", action.dest) else p for p in kept]
        if piece not in kept:
            kept.append(piece)
    else:
        kept.append(piece)
    out = []
    for p in kept:
        out += p if isinstance(p, list) else [p]
    return out


# ----------------------------------------------------------------------------- study files


def study_paths(d, prefix=()):
    """Key paths of the leaves of a study dict (and of its sections)."""
    for key, value in d.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from study_paths(value, prefix + (key,))


def set_path(d: dict, path: tuple, value) -> dict:
    import copy

    out = copy.deepcopy(d)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


_DELETE = object()

#: values that no field of a study accepts where a number, a name or a section is expected
WRONG_TYPE = [[1, 2], {"a": 1}, "not-a-value", float("nan"), float("inf"), -float("inf"), True]


CHOICE_FIELDS = {"type", "algorithm", "parametrization", "schedule", "precision", "use_gpu", "loss"}


def _leaf(base: dict, path: tuple):
    for key in path:
        base = base[key]
    return base


def _is_bad_mutation(base: dict, path: tuple, value) -> bool:
    """Whether putting ``value`` at ``path`` surely breaks the study (the rules below, by the field's current value)."""
    current = _leaf(base, path)
    if isinstance(current, dict):  # a section: anything but a mapping is wrong
        return not isinstance(value, dict)
    if isinstance(current, bool):
        return not isinstance(value, bool)
    if isinstance(current, (int, float)):
        return isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
    if isinstance(current, str) and path[-1] in CHOICE_FIELDS:
        return value != current and not (path[-1] == "use_gpu" and isinstance(value, bool))
    return False


def bad_study_texts(base: dict):
    """Strategy: (description, YAML text) of a study file that must be refused."""
    leaves = sorted(set(study_paths(base)), key=str)
    values = st.one_of(
        st.sampled_from(WRONG_TYPE),
        st.integers(-(10**9), -1),
        st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=True, allow_subnormal=False),
    )
    changed = st.tuples(st.sampled_from(leaves), values).filter(lambda t: _is_bad_mutation(base, *t))
    sections = [()] + [p for p in leaves if isinstance(_leaf(base, p), dict)]
    unknown = st.sampled_from(sections).map(lambda p: (p + ("no_such_key",), 1))
    missing = st.sampled_from([("problem",), ("problem", "name")]).map(lambda p: (p, _DELETE))
    return st.one_of(changed, unknown, missing).map(
        lambda t: (
            f"{'.'.join(t[0])} = {'<deleted>' if t[1] is _DELETE else repr(t[1])}",
            yaml.safe_dump(set_path(base, *t), sort_keys=False),
        )
    )


BAD_YAML = [
    "name: [unclosed",
    "\tname: tab",
    "a: b: c",
    "- just\n- a list",
    "",
    "null",
    "42",
    "name: x\nname: y",
    "!!python/object:os.system {}",
    "{{{",
    "name: *undefined",
    "problem: {name: burgers",
    "\x00\x01",
]


# ----------------------------------------------------------------------------- data files


def _rewrite(path: Path, **arrays) -> None:
    """Replace datasets of an HDF5 file (None deletes one)."""
    import h5py

    with h5py.File(path, "r+") as f:
        for name, value in arrays.items():
            del f[name]
            if value is not None:
                f.create_dataset(name, data=value)


def _poke(path: Path, name: str, value, where: float) -> None:
    import h5py

    with h5py.File(path, "r+") as f:
        data = f[name][...]
        flat = data.reshape(-1)
        flat[int(where * (flat.size - 1))] = value
        f[name][...] = flat.reshape(data.shape)


def corrupt(path: Path, kind: str, where: float) -> None:
    """Corrupt a valid grid file of the project's schema in place, one way (see DATA_CORRUPTIONS)."""
    import h5py
    import numpy as np

    with h5py.File(path, "r") as f:
        x, y = f["input"][...], f["output"][...]
    if kind in ("nan-input", "inf-input", "nan-output", "inf-output"):
        value = float("nan") if kind.startswith("nan") else (float("inf") if where < 0.5 else -float("inf"))
        _poke(path, kind.split("-")[1], value, where)
    elif kind == "empty":
        _rewrite(path, input=x[:0], output=y[:0])
    elif kind == "fewer-outputs":
        _rewrite(path, output=y[: max(1, int(where * (len(y) - 1)))])
    elif kind == "output-grid-mismatch":
        _rewrite(path, output=y[:, : max(1, int(where * (y.shape[1] - 1)))])
    elif kind == "wrong-ndim":
        _rewrite(path, input=np.repeat(x[:, :, None], 4, axis=2), output=np.repeat(y[:, :, None], 4, axis=2))
    elif kind == "scalar-samples":
        _rewrite(path, input=x[:, 0], output=y[:, 0])
    elif kind == "complex-dtype":
        _rewrite(path, input=x.astype(np.complex64))
    elif kind == "string-dtype":
        _rewrite(path, output=np.array([b"abc"] * len(y)))
    elif kind in ("missing-input", "missing-output"):
        _rewrite(path, **{kind.split("-")[1]: None})
    elif kind == "unknown-problem":
        with h5py.File(path, "r+") as f:
            f.attrs["problem"] = "no_such_problem"
    elif kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: int(where * (len(data) - 1))])
    elif kind == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    else:
        raise ValueError(kind)


DATA_CORRUPTIONS = (
    "nan-input",
    "inf-input",
    "nan-output",
    "inf-output",
    "empty",
    "fewer-outputs",
    "output-grid-mismatch",
    "wrong-ndim",
    "scalar-samples",
    "complex-dtype",
    "string-dtype",
    "missing-input",
    "missing-output",
    "unknown-problem",
    "truncated",
    "garbage",
)
