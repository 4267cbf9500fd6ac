"""Point-set operators behind the one-tensor interface the trainer uses.

The trainer, the sweep and the landscape feed every model one input tensor
``x`` and compare its output with ``y`` by relative L2. Two adapters put the
point-set operators (Galerkin Transformer, ONO, GNOT) behind that interface:

- :class:`GridPointSet`: a grid problem presented as a point set. Input
  (B, N_1, …, N_d, C_in) → output (B, N_1, …, N_d, C_out); the points are the
  grid nodes with coordinates in [0, 1]^d (as FNO's lifting sees them).
- :class:`PackedPointSet`: an irregular mesh, one *packed* tensor per batch.
  Input (B, P, d + C_in + 1) = [coordinates | features | mask] with mask 1.0 at
  real points and 0.0 at padding (samples have different numbers of points;
  P is the largest) → output (B, P, C_out), zero at padded points. With
  targets also zero at padded points, relative L2 over the packed tensor is
  exactly the relative L2 over each sample's real points.

Both rebuild from ``.config`` (``type(m)(**m.config)``) like every operator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypedDict, cast

import torch
from torch import nn

from operators.errors import OperatorConfigError
from operators.family import OPERATORS, point_set_families
from operators.fno import grid_coordinates
from operators.width_mup import WidthSpec


class Normalization(TypedDict):
    """Per-channel standardisation: means and stds of the input features and of the outputs."""

    in_mean: list[float]
    in_std: list[float]
    out_mean: list[float]
    out_std: list[float]


def build_point_operator(operator: str, operator_config: dict[str, object]) -> nn.Module:
    """The registered point-set operator ``operator`` built from ``operator_config``, with one-line errors."""
    family = OPERATORS.get(operator)
    if family is None or not family.takes("points"):
        raise OperatorConfigError(f"operator {operator!r} is unknown; use one of: {', '.join(point_set_families())}")
    return family.make(operator_config)


def pack_points(coords: torch.Tensor, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """[coords (B, P, d) | features (B, P, C) | mask (B, P)] → (B, P, d + C + 1); padded rows zeroed."""
    if mask is None:
        mask = torch.ones(coords.shape[:2], dtype=torch.bool, device=coords.device)
    keep = mask.unsqueeze(-1)
    zero = torch.zeros((), dtype=coords.dtype, device=coords.device)
    coords = torch.where(keep, coords, zero)
    features = torch.where(keep, features.to(coords.dtype), zero)
    return torch.cat([coords, features, mask.unsqueeze(-1).to(coords.dtype)], dim=-1)


def unpack_points(x: torch.Tensor, coord_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, P, d + C + 1) → coords (B, P, d), features (B, P, C), mask (B, P) bool."""
    if x.dim() != 3 or x.shape[-1] < coord_dim + 1:
        raise OperatorConfigError(
            f"packed point set has shape {tuple(x.shape)}; expected (batch, points, {coord_dim} coords + channels + 1 mask)"
        )
    return x[..., :coord_dim], x[..., coord_dim:-1], x[..., -1] > 0.5


def channel_statistics(values: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of ``values`` (…, C) over every point (only where ``mask`` (…) is True).

    A constant channel gets std 1 so that standardising it is harmless.
    """
    flat = values.reshape(-1, values.shape[-1]).double()
    if mask is not None:
        flat = flat[mask.reshape(-1)]
    mean = flat.mean(dim=0)
    std = flat.std(dim=0, unbiased=False)
    std = torch.where(std > 1e-12 * mean.abs().clamp_min(1.0), std, torch.ones_like(std))
    return [float(v) for v in mean], [float(v) for v in std]


def normalization_from(
    train_x: torch.Tensor, train_y: torch.Tensor, packed_coord_dim: int | None = None
) -> Normalization:
    """Per-channel standardisation of a training set: grid tensors (n, *grid, C), or packed point sets.

    With ``packed_coord_dim`` d the inputs are packed (n, P, d + C_in + 1) and
    only the feature channels at real points count; outputs likewise.
    """
    if packed_coord_dim is None:
        in_mean, in_std = channel_statistics(train_x)
        out_mean, out_std = channel_statistics(train_y)
    else:
        _, features, mask = unpack_points(train_x, packed_coord_dim)
        in_mean, in_std = channel_statistics(features, mask)
        out_mean, out_std = channel_statistics(train_y, mask)
    return {"in_mean": in_mean, "in_std": in_std, "out_mean": out_mean, "out_std": out_std}


def _check_normalization(
    normalization: Mapping[str, object] | None, in_channels: object, out_channels: object
) -> Normalization | None:
    """``normalization`` (a :class:`Normalization`, or a mapping from a stored config) checked against the channels.

    The channel counts come from an operator's untyped ``config`` (an int, or GNOT's list of them).
    """
    if normalization is None:
        return None
    sizes: dict[str, object] = {
        "in_mean": in_channels,
        "in_std": in_channels,
        "out_mean": out_channels,
        "out_std": out_channels,
    }
    if set(normalization) != set(sizes):
        raise OperatorConfigError(f"normalization keys {sorted(normalization)}: expected {sorted(sizes)}")
    out: dict[str, list[float]] = {}
    for key, size in sizes.items():
        # a sequence of numbers; float() rejects anything else
        values = [float(v) for v in cast(Iterable[float], normalization[key])]
        if len(values) != size or (key.endswith("std") and not all(v > 0 for v in values)):
            raise OperatorConfigError(f"normalization {key} {values}: expected {size} values (stds > 0)")
        out[key] = values
    return Normalization(in_mean=out["in_mean"], in_std=out["in_std"], out_mean=out["out_mean"], out_std=out["out_std"])


class _Wrapped(nn.Module):
    """Holds the point-set operator as ``self.operator``; optionally standardises features and outputs.

    ``normalization`` = {"in_mean", "in_std", "out_mean", "out_std"} (per-channel
    lists, from :func:`channel_statistics` of the training set): the operator sees
    (features − in_mean)/in_std and its output is mapped back by ·out_std + out_mean,
    so the model's inputs and outputs stay in physical units (the papers' codes
    standardise the same way).
    """

    def __init__(
        self,
        coord_dim: int,
        operator: str,
        operator_config: Mapping[str, object],
        normalization: Mapping[str, object] | None,
    ):
        if not isinstance(coord_dim, int) or coord_dim < 1:
            raise OperatorConfigError(f"coord_dim {coord_dim!r}: must be a positive integer")
        if operator_config.get("coord_dim") != coord_dim:
            raise OperatorConfigError(
                f"operator_config coord_dim {operator_config.get('coord_dim')!r} must equal the {coord_dim} "
                "coordinates per point of this adapter"
            )
        super().__init__()
        self.coord_dim = coord_dim
        self.operator = build_point_operator(operator, dict(operator_config))
        # Every point-set operator has ``width_spec`` and ``config`` (nn.Module's stubs type attributes as Tensor | Module).
        self.width_spec = cast(WidthSpec, self.operator.width_spec)
        config = cast(dict[str, object], self.operator.config)
        in_channels = config["in_channels"]
        in_channels = in_channels[0] if isinstance(in_channels, list) and len(in_channels) == 1 else in_channels
        self.normalization = _check_normalization(normalization, in_channels, config["out_channels"])
        self.config: dict[str, object] = dict(
            operator=operator, operator_config=dict(config), normalization=self.normalization
        )

    def _encode(self, features: torch.Tensor) -> torch.Tensor:
        if self.normalization is None:
            return features
        mean = features.new_tensor(self.normalization["in_mean"])
        std = features.new_tensor(self.normalization["in_std"])
        return (features - mean) / std

    def _decode(self, out: torch.Tensor) -> torch.Tensor:
        if self.normalization is None:
            return out
        return out * out.new_tensor(self.normalization["out_std"]) + out.new_tensor(self.normalization["out_mean"])


class GridPointSet(_Wrapped):
    """A point-set operator on a d-dimensional grid: (B, *grid, C_in) → (B, *grid, C_out).

    Args:
        dim: grid dimensions d (the operator's ``coord_dim`` must equal d).
        operator: "galerkin", "ono" or "gnot".
        operator_config: the operator's constructor arguments.
        normalization: per-channel standardisation (see :class:`_Wrapped`), or None.
    """

    def __init__(
        self,
        dim: int,
        operator: str,
        operator_config: Mapping[str, object],
        normalization: Mapping[str, object] | None = None,
    ):
        super().__init__(dim, operator, operator_config, normalization)
        self.dim = dim
        self.config = dict(dim=dim, **self.config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != self.dim + 2:
            raise OperatorConfigError(
                f"input has shape {tuple(x.shape)}; expected (batch, {', '.join(['N'] * self.dim)}, channels)"
            )
        batch, grid, channels = x.shape[0], tuple(x.shape[1:-1]), x.shape[-1]
        coords = grid_coordinates(grid, device=x.device, dtype=x.dtype).reshape(1, -1, self.dim).expand(batch, -1, -1)
        out = self._decode(self.operator(coords, self._encode(x.reshape(batch, -1, channels))))
        return out.reshape(batch, *grid, out.shape[-1])


class PackedPointSet(_Wrapped):
    """A point-set operator on packed irregular meshes: (B, P, d + C_in + 1) → (B, P, C_out).

    Args:
        coord_dim: d, coordinates per point.
        operator: "galerkin", "ono" or "gnot".
        operator_config: the operator's constructor arguments.
        normalization: per-channel standardisation of the features and outputs, or None.

    See :func:`pack_points` for the layout; the output is zero at padded points.
    """

    def __init__(
        self,
        coord_dim: int,
        operator: str,
        operator_config: Mapping[str, object],
        normalization: Mapping[str, object] | None = None,
    ):
        super().__init__(coord_dim, operator, operator_config, normalization)
        self.config = dict(coord_dim=coord_dim, **self.config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        coords, features, mask = unpack_points(x, self.coord_dim)
        out = self._decode(self.operator(coords, self._encode(features), mask))
        return torch.where(mask.unsqueeze(-1), out, torch.zeros((), dtype=out.dtype, device=out.device))


def point_set_config(
    operator: str,
    *,
    coord_dim: int,
    input_channels: int,
    output_channels: int,
    packed: bool,
    **operator_options: object,
) -> dict[str, object]:
    """The ``{"operator", "operator_config"}`` part of a point-set adapter's config (nothing built).

    What mutransfer._training.memory.check_before_building plans before allocating.
    """
    config = _operator_config(
        coord_dim=coord_dim,
        input_channels=input_channels,
        output_channels=output_channels,
        packed=packed,
        **operator_options,
    )
    return {"operator": operator, "operator_config": config}


def _operator_config(
    *, coord_dim: int, input_channels: int, output_channels: int, packed: bool, **operator_options: object
) -> dict[str, object]:
    """The operator's constructor arguments (the ``operator_config`` of :func:`point_set_config`)."""
    in_channels = int(input_channels) - (coord_dim + 1 if packed else 0)
    return dict(coord_dim=coord_dim, in_channels=in_channels, out_channels=int(output_channels), **operator_options)
