"""Helpers shared by the format readers: reader options, choosing arrays and times, checks.

Options (the CLI's ``--input-key``, ``--output-key``, ``--field``, ``--input-time``,
``--output-time``) are described in ``mutransfer.data._readers``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py

from mutransfer.data._formats.base import DataSource, LazyArray, parse_time_spec
from mutransfer.data._schema_common import check_stored
from mutransfer.errors import UserInputError

__all__ = [
    "SPACE_NAMES",
    "Options",
    "choose_keys",
    "apply_times",
    "validate",
    "trailing_time_axes",
    "plain_array",
    "open_hdf5",
    "hdf5_datasets_info",
]

#: (input, output) array names recognised without options, in order of preference
_PAIRS = (("input", "output"), ("a", "u"), ("coeff", "sol"), ("x", "y"))
SPACE_NAMES = ("x", "y", "z")


def open_hdf5(p: Path, build: Callable[[h5py.File], DataSource]) -> DataSource:
    """Open ``p`` read-only and return ``build(file)``; the file is closed if ``build`` fails.

    On success the DataSource keeps the file open (``DataSource.close`` closes it).
    """
    f = h5py.File(p, "r")
    try:
        source = build(f)
        for key in (source.input_key, source.output_key):
            dataset = f.get(key)
            if isinstance(dataset, h5py.Dataset):
                check_stored(p, key, dataset)
        return source
    except BaseException:
        f.close()
        raise


def hdf5_datasets_info(datasets: dict) -> dict:
    """{name: {"shape", "dtype"}} of h5py datasets (``DataSource.arrays``)."""
    return {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in datasets.items()}


def _unknown_key(path, key: str, found, flag: str) -> UserInputError:
    found = sorted(found)
    close = difflib.get_close_matches(key, found, n=1)
    suggestion = close[0] if close else (found[0] if found else "NAME")
    return UserInputError(
        f"{path}: no array {key!r} (found: {', '.join(found) or 'nothing'}); pass {flag} {suggestion}"
    )


@dataclass
class Options:
    input_key: str | None = None
    output_key: str | None = None
    field: str | None = None
    input_time: int | None = None
    output_time: object = None

    @classmethod
    def make(cls, input_key=None, output_key=None, field=None, input_time=None, output_time=None) -> Options:
        if input_time is not None:
            t = parse_time_spec(input_time, name="input_time")
            if not isinstance(t, int):
                raise UserInputError(f"input_time {input_time!r}: the input takes one time index, e.g. 0")
            input_time = t
        return cls(input_key, output_key, field, input_time, parse_time_spec(output_time))


def choose_keys(path, names: list[str], opts: Options, default: str | None, role_names=("input", "output")):
    """(input_key, output_key) from the options and the format's default."""
    names_set = set(names)
    ik = opts.input_key or opts.field
    ok = opts.output_key or opts.field
    for key, flag in ((opts.field, "--field"), (opts.input_key, "--input-key"), (opts.output_key, "--output-key")):
        if key is not None and key not in names_set:
            raise _unknown_key(path, key, names, flag)
    if ik is None or ok is None:
        pair = next((p for p in _PAIRS if p[0] in names_set and p[1] in names_set), None)
        if ik is None and ok is None:
            if default is not None and default in names_set:
                ik = ok = default
            elif pair is not None:
                ik, ok = pair
            elif len(names) == 1:
                ik = ok = names[0]
            else:
                raise UserInputError(
                    f"{path}: cannot tell which arrays are input and output (found: {', '.join(sorted(names)) or 'nothing'}); "
                    "pass --input-key NAME --output-key NAME (or --field NAME for a trajectory)"
                )
        elif ik is None:
            ik = (
                default
                if default in names_set
                else next((p[0] for p in _PAIRS if p[1] == ok and p[0] in names_set), ok)
            )
        else:
            ok = (
                default
                if default in names_set
                else next((p[1] for p in _PAIRS if p[0] == ik and p[1] in names_set), ik)
            )
    return ik, ok


def apply_times(path, inp: LazyArray, out: LazyArray, opts: Options, trajectory_defaults: bool):
    """Apply input/output time selections; returns the new (input, output)."""
    in_t, out_t = opts.input_time, opts.output_time
    if trajectory_defaults:
        if in_t is None and inp.time_axis is not None:
            in_t = 0
        if out_t is None and out.time_axis is not None:
            out_t = -1
    if in_t is not None:
        inp = inp.select_time(in_t, role="input")
    if out_t is not None:
        out = out.select_time(out_t, role="output")
    if inp.has_time:
        raise UserInputError(
            f"{path}: input {inp.name!r} (shape {inp.stored_shape}) still has a time axis; pick one time with --input-time 0"
        )
    return inp, out


def validate(path, inp: LazyArray, out: LazyArray) -> None:
    if inp.n != out.n:
        raise UserInputError(
            f"{path}: input {inp.name!r} has {inp.n} samples but output {out.name!r} has {out.n}; "
            "pass arrays with the same number of samples (--input-key/--output-key)"
        )
    if inp.n < 1:
        raise UserInputError(f"{path}: input {inp.name!r} holds no samples")
    if not inp.space_axes:
        raise UserInputError(
            f"{path}: input {inp.name!r} has shape {inp.stored_shape}; expected (n, *grid) with at least one grid axis"
        )
    if inp.space_shape != out.space_shape:
        raise UserInputError(
            f"{path}: input {inp.name!r} has grid {inp.space_shape} but output {out.name!r} has grid "
            f"{out.space_shape}; input and output must share the spatial grid (check --input-key/--output-key)"
        )
    grid = out.grid_shape
    if not 1 <= len(grid) <= 3:
        hint = "; select one time with --output-time -1" if out.has_time else ""
        raise UserInputError(
            f"{path}: output {out.name!r} gives a {len(grid)}-dimensional grid {grid}; the FNO supports 1 to 3{hint}"
        )


def trailing_time_axes(path, ik, ok, shapes: dict, opts: Options) -> tuple:
    """Time axes (last axis or None) of the input and output arrays in the FNO convention."""
    ishape, oshape = shapes[ik], shapes[ok]
    if ik == ok:
        if len(ishape) < 3:
            raise UserInputError(
                f"{path}: array {ik!r} has shape {ishape}; a trajectory used as input and output needs "
                "(n, *grid, T); pass --input-key and --output-key"
            )
        return len(ishape) - 1, len(oshape) - 1
    it = len(ishape) - 1 if opts.input_time is not None else None
    if opts.output_time is not None:
        ot = len(oshape) - 1
    elif len(oshape) == len(ishape) + 1 and tuple(oshape[:-1]) == tuple(ishape):
        ot = len(oshape) - 1
    else:
        ot = None
    return it, ot


def plain_array(source, name, time_axis, *, reversed_axes: bool = False) -> LazyArray:
    """Array (n, *space[, T]) in natural order, or stored with all axes reversed (MATLAB v7.3)."""
    ndim = len(source.shape)
    if reversed_axes:
        # canonical axis i lives at stored axis ndim-1-i
        sample = ndim - 1
        canon_time = time_axis
        space = [ndim - 1 - i for i in range(1, ndim) if i != canon_time]
        t = None if canon_time is None else ndim - 1 - canon_time
        return LazyArray(source, name, sample_axis=sample, space_axes=space, time_axis=t)
    space = [i for i in range(1, ndim) if i != time_axis]
    return LazyArray(source, name, sample_axis=0, space_axes=space, time_axis=time_axis)
