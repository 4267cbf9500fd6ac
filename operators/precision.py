"""The training precisions, declared once: every module, flag and check takes them from here.

- ``"fp32"``: float32 throughout;
- ``"bf16"`` / ``"fp16"``: mixed precision — ``torch.autocast`` runs the real-valued layers in
  the low precision (mutransfer/_training/precision.py). The spectral part stays in float32, except
  under ``bf16`` on a CPU that multiplies bf16 matrices in hardware (:func:`cpu_multiplies_bf16`):
  there its truncated-DFT GEMMs and its contraction run in bf16 too (float32 accumulation, float32
  weights and gradients; operators.spectral), which is what makes bf16 faster than fp32 on such CPUs.
"""

from __future__ import annotations

import functools
from typing import Literal, get_args

import torch

from operators.errors import OperatorConfigError

#: a training precision
Precision = Literal["fp32", "bf16", "fp16"]

#: the precisions, in the order help texts list them
PRECISIONS: tuple[Precision, ...] = get_args(Precision)


def check_precision(name: object) -> Precision:
    """``name`` as a :data:`Precision`, or a one-line OperatorConfigError naming the known ones."""
    if name not in PRECISIONS:
        raise OperatorConfigError(f"precision {name!r} is unknown; use one of: {', '.join(PRECISIONS)}")
    return name


@functools.cache
def cpu_multiplies_bf16() -> bool:
    """Whether this CPU has bf16 matrix units (AVX-512 BF16 or AMX tiles) that torch's oneDNN uses.

    Where it has none, bf16 matmuls are emulated through float32 and bf16 cannot beat fp32: bf16 is then
    for GPUs. torch keeps these checks private (``torch.cpu._is_avx512_bf16_supported``); a torch without
    them counts as no hardware support.
    """
    try:
        hardware = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        return bool(hardware and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
