"""neuraloperator 2.x models as mutransfer factories: ``operator.type: "mutransfer.neuralop:fno2d"`` (docs/byo.md).

Each factory is called as ``build(*, K, width, in_channels, out_channels, **options)`` (operators.factory) and returns
the model on mutransfer's grid layout, (B, *grid, C) in and out; neuraloperator's models take (B, C, *grid).

The K convention: mutransfer's K is the paper's, modes per dimension **per sign**; neuraloperator's ``n_modes`` counts
both signs, so ``n_modes = 2K`` in every dimension. Its spectral weight then holds 2K entries along each full
dimension and K + 1 along the last (half-spectrum) one; a 1-D weight holds K + 1 only, so the factories declare K
on it (operators.declarations.declare) rather than leave the shapes to say it.

``options`` go to neuraloperator's constructor (``n_layers`` as ``layers``, any other of its arguments as is).
A factorized TFNO (Tucker, CP) follows neither muP rule and is refused by ``set_base_shapes``: the dense TFNO
(``factorization=None``, the default here) is what :func:`tfno2d` builds.

Needs ``pip install -e ".[neuralop]"``.
"""

from __future__ import annotations

from torch import Tensor, nn

from operators.declarations import declare
from operators.errors import OperatorConfigError


class NeuralopModel(nn.Module):
    """A neuraloperator model on mutransfer's grid layout: (B, *grid, C) in and out."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.model(x.movedim(-1, 1)).movedim(1, -1)
        return out


def _build(kind: str, dim: int, K: int, width: int, in_channels: int, out_channels: int, options: dict) -> nn.Module:
    try:
        from neuralop import models  # noqa: PLC0415 -- deferred: neuraloperator is an optional extra (.[neuralop])
    except ImportError:
        raise OperatorConfigError(
            "mutransfer.neuralop needs neuraloperator: pip install -e '.[neuralop]' (or neuraloperator==2.0.0)"
        ) from None

    layers = options.pop("layers", 4)
    model = getattr(models, kind)(
        n_modes=(2 * K,) * dim,
        in_channels=in_channels,
        out_channels=out_channels,
        hidden_channels=width,
        n_layers=layers,
        **options,
    )
    for name, p in model.named_parameters():
        if name.startswith("fno_blocks.convs.") and p.dim() == 2 + dim and p.is_complex():
            # the spectral weight (in, out, 2K, …, K + 1): K stated, so a 1-D weight's K + 1 is not read as K
            declare(p, role="spectral", k_dims=range(2, 2 + dim), width_dims=(0, 1), modes=K)
    return NeuralopModel(model)


def fno1d(*, K: int, width: int, in_channels: int, out_channels: int, **options: object) -> nn.Module:
    """neuraloperator's ``FNO`` with ``n_modes = (2K,)`` (1-D problems: Burgers)."""
    return _build("FNO", 1, K, width, in_channels, out_channels, dict(options))


def fno2d(*, K: int, width: int, in_channels: int, out_channels: int, **options: object) -> nn.Module:
    """neuraloperator's ``FNO`` with ``n_modes = (2K, 2K)`` (2-D problems: Darcy)."""
    return _build("FNO", 2, K, width, in_channels, out_channels, dict(options))


def fno3d(*, K: int, width: int, in_channels: int, out_channels: int, **options: object) -> nn.Module:
    """neuraloperator's ``FNO`` with ``n_modes = (2K, 2K, 2K)`` (space-time Navier-Stokes)."""
    return _build("FNO", 3, K, width, in_channels, out_channels, dict(options))


def tfno2d(*, K: int, width: int, in_channels: int, out_channels: int, **options: object) -> nn.Module:
    """neuraloperator's ``TFNO``, dense (``factorization=None`` unless given), with ``n_modes = (2K, 2K)``."""
    return _build("TFNO", 2, K, width, in_channels, out_channels, {"factorization": None, **options})
