"""PyTorch .pt files (e.g. neuraloperator's): a dict of tensors, loaded whole with ``weights_only=True``."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import torch

from mutransfer.data._formats.base import DataFormat, DataSource, Probe
from mutransfer.data._formats.common import Options, apply_times, choose_keys, plain_array, trailing_time_axes, validate
from mutransfer.errors import UserInputError

NAME = "torch"
TITLE = "PyTorch .pt dict"
_ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


def _is_torch_zip(p: Path) -> bool:
    try:
        with zipfile.ZipFile(p) as z:
            return any(n == "data.pkl" or n.endswith("/data.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def detect(probe: Probe) -> bool:
    """A zip archive holding `data.pkl`, or the legacy torch pickle magic."""
    if probe.head.startswith(_ZIP_MAGIC) and _is_torch_zip(probe.path):
        return True
    return probe.head.startswith(_LEGACY_MAGIC)


def open_source(p: Path, opts: Options) -> DataSource:
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        found = next((ln for ln in lines if "Unsupported global" in ln), lines[0] if lines else type(exc).__name__)
        found = found.replace("WeightsUnpickler error: ", "").split(" was not an allowed global")[0]
        raise UserInputError(
            f"data file {p} could not be loaded safely with torch.load(weights_only=True) ({found[:160]}); "
            "save a dict of torch tensors, e.g. {'x': x, 'y': y}"
        ) from None
    if not isinstance(obj, dict):
        raise UserInputError(
            f"data file {p} holds a {type(obj).__name__}, not a dict of tensors; save {{'x': x, 'y': y}}"
        )
    arrays = {
        str(k): v.detach().cpu().numpy() for k, v in obj.items() if isinstance(v, torch.Tensor) and not v.is_complex()
    }
    names = [k for k, v in arrays.items() if v.ndim >= 1]
    ik, ok = choose_keys(p, names, opts, None)
    it, ot = trailing_time_axes(p, ik, ok, {k: v.shape for k, v in arrays.items()}, opts)
    inp = plain_array(arrays[ik], ik, it)
    out = plain_array(arrays[ok], ok, ot)
    inp, out = apply_times(p, inp, out, opts, trajectory_defaults=ik == ok)
    validate(p, inp, out)
    desc = f"PyTorch dict with tensors {', '.join(f'{k} {tuple(arrays[k].shape)}' for k in names)}"
    return DataSource(
        str(p),
        NAME,
        inp,
        out,
        ik,
        ok,
        description=desc,
        arrays={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()},
    )


FORMAT = DataFormat(NAME, TITLE, detect, open_source, read_whole="PyTorch .pt")
