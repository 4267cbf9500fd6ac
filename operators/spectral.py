"""Spectral convolution (the FNO kernel integral operator) in 1, 2 or 3 dimensions.

K convention: ``modes`` = K modes kept per sign along each truncated dimension
(the original FNO's ``modes1/2/3``). The last dimension uses an rfft, so a
d-dimensional layer keeps 2^(d-1) corner blocks, each a complex weight of shape
(m_in, m_out, K, …, K): 2^(d-1)·m_in·m_out·K^d complex entries per layer.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from operators.errors import OperatorConfigError
from operators.parametrization import check_modes, init_spectral_weight_, spectral_lr_multiplier
from operators.width_mup import spectral_width_init_std, spectral_width_lr_multiplier

_EINSUM = {1: "bix,iox->box", 2: "bixy,ioxy->boxy", 3: "bixyz,ioxyz->boxyz"}


def check_grid(grid_shape: tuple[int, ...], modes: int) -> None:
    """Raise if K modes do not fit the grid: 2K ≤ N on non-last dims, K ≤ N/2+1 on the last."""
    *leading, last = grid_shape
    for axis, n in enumerate(leading):
        if 2 * modes > n:
            raise OperatorConfigError(
                f"modes {modes} too large for grid size {n} on axis {axis}: need 2*K <= N; use K <= {n // 2} or a finer grid"
            )
    if modes > last // 2 + 1:
        raise OperatorConfigError(
            f"modes {modes} too large for grid size {last} on the last axis: need K <= N/2+1; use K <= {last // 2 + 1} or a finer grid"
        )


class SpectralConv(nn.Module):
    """Kernel integral (K v)(x) = F⁻¹[R · T_K(F v)](x) on a periodic grid.

    Input and output: (B, C, N_1, …, N_d), channel-first, real.

    ``base_width`` (default None: K-parametrization only) switches on width-muP
    with width m = in_channels: LR multiplier c(K)·m0/m and Gaussian init of
    std σ_K(m0)·b(K)·√(m0/m) (operators.width_mup).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        modes: int,
        dim: int,
        parametrization: str = "standard",
        init_scale: float = 1.0,
        base_width: int | None = None,
    ):
        super().__init__()
        check_modes(modes, dim, parametrization)
        if dim not in _EINSUM:
            raise OperatorConfigError(f"dim {dim}: FNO supports 1, 2 or 3 truncated dimensions")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.modes, self.dim, self.parametrization = modes, dim, parametrization
        self.base_width = base_width
        shape = (in_channels, out_channels) + (modes,) * dim
        if base_width is None:
            self.lr_multiplier = spectral_lr_multiplier(modes, dim, parametrization)

            def init(w: torch.Tensor) -> torch.Tensor:
                return init_spectral_weight_(w, modes=modes, dim=dim, parametrization=parametrization, init_scale=init_scale)

        else:
            # width-muP (operators.width_mup): the fan-in m_in is the width m.
            if init_scale <= 0:
                raise OperatorConfigError(f"init_scale {init_scale}: must be positive (1.0 is the default)")
            self.lr_multiplier = spectral_width_lr_multiplier(in_channels, base_width, modes, dim, parametrization)
            std = spectral_width_init_std(in_channels, base_width, modes, dim, parametrization, init_scale)

            def init(w: torch.Tensor) -> torch.Tensor:
                torch.view_as_real(w).normal_(0.0, std)
                return w

        with torch.no_grad():
            self.weights = nn.ParameterList(
                nn.Parameter(init(torch.empty(shape, dtype=torch.cfloat))) for _ in range(2 ** (dim - 1))
            )
        # Corner i keeps the positive (":K") or negative ("-K:") frequencies of each non-last dim.
        self._corners = list(itertools.product((False, True), repeat=dim - 1))

    def spectral_weights(self) -> list[nn.Parameter]:
        """The 2^(d-1) complex corner tensors R, each (m_in, m_out, K, …, K)."""
        return list(self.weights)

    def _corner_slices(self, negative_flags: tuple[bool, ...]) -> tuple[slice, ...]:
        k = self.modes
        leading = tuple(slice(-k, None) if neg else slice(0, k) for neg in negative_flags)
        return (slice(None), slice(None)) + leading + (slice(0, k),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = tuple(x.shape[2:])
        check_grid(grid, self.modes)
        axes = tuple(range(-self.dim, 0))
        x_ft = torch.fft.rfftn(x, dim=axes)
        out_shape = (x.shape[0], self.out_channels) + grid[:-1] + (grid[-1] // 2 + 1,)
        out_ft = torch.zeros(out_shape, dtype=x_ft.dtype, device=x.device)
        equation = _EINSUM[self.dim]
        for weight, flags in zip(self.weights, self._corners):
            index = self._corner_slices(flags)
            # A contiguous corner: autograd then saves K^d modes, not the whole spectrum.
            out_ft[index] = torch.einsum(equation, x_ft[index].contiguous(), weight)
        return torch.fft.irfftn(out_ft, s=grid, dim=axes)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, modes={self.modes}, dim={self.dim}, "
            f"parametrization={self.parametrization}, lr_multiplier={self.lr_multiplier:.4f}"
            + ("" if self.base_width is None else f", base_width={self.base_width}")
        )
