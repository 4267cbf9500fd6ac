"""The training precisions, declared once: every module, flag and check takes them from here.

- ``"fp32"``: float32 throughout;
- ``"bf16"`` / ``"fp16"``: mixed precision — ``torch.autocast`` runs the real-valued layers in
  the low precision, the spectral part stays in float32 (mutransfer/training/precision.py).
"""

from __future__ import annotations

from typing import Literal, get_args

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
