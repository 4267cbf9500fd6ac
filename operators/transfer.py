"""The transfer of hyperparameters from a proxy to a target: Algorithm 1 of muTransfer-FNO, and width-muP.

One function, :func:`transfer`, rescales a configuration along whatever a
:class:`Scaling` changes — the Fourier modes K (muP in K, Algorithm 1), the width
(Tensor Programs V for Adam), or both — and is what the sweep, the landscape and
the ``mutransfer transfer`` command call. Under muP the models apply c(K), b(K)
and the width multipliers themselves, so the *master* LR η0 and the init scale
carry over unchanged, while the *effective* spectral LR and init std are rescaled
by √(log K_proxy / log K_target) (the variance by the plain ratio), times the
width rules. Batch size, Adam β2, weight decay and the clip value transfer
unchanged (paper §4.4).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import cast

from operators.errors import OperatorConfigError
from operators.parametrization import (
    base_spectral_init_std,
    check_modes,
    effective_spectral_lr,
    spectral_init_multiplier,
    transfer_lr_factor,
)
from operators.width_mup import hidden_lr_multiplier, output_multiplier, spectral_width_init_std


@dataclass(frozen=True)
class RescaledQuantity:
    """One hyperparameter: its proxy value, the factor applied and the target value."""

    name: str
    proxy: float
    target: float
    factor: float
    rule: str


@dataclass(frozen=True)
class TransferRecord:
    """The readable result of a transfer: one row per quantity.

    ``proxy_modes``/``target_modes`` are None for operators without Fourier
    modes; ``proxy_width``/``target_width`` are None when the width is not part
    of the transfer.
    """

    dim: int
    proxy_modes: int | None
    target_modes: int | None
    quantities: tuple[RescaledQuantity, ...]
    proxy_width: int | None = None
    target_width: int | None = None
    notes: tuple[str, ...] = ()
    #: the width both models share when the width is not part of the transfer (the init std rows are at it)
    width: int | None = None

    @property
    def lr_factor(self) -> float:
        """What the effective LR of the rescaled weights is multiplied by (spectral, else hidden; 1 if neither)."""
        for name in ("spectral_lr", "hidden_lr"):
            if any(q.name == name for q in self.quantities):
                return self.get(name).factor
        return 1.0

    @property
    def init_variance_factor(self) -> float:
        """What the spectral init variance is multiplied by (1 without spectral weights)."""
        if any(q.name == "spectral_init_variance" for q in self.quantities):
            return self.get("spectral_init_variance").factor
        return 1.0

    def target_values(self) -> dict[str, float]:
        """{name: target value} for every quantity."""
        return {q.name: q.target for q in self.quantities}

    def get(self, name: str) -> RescaledQuantity:
        for q in self.quantities:
            if q.name == name:
                return q
        raise KeyError(name)

    def as_dict(self) -> dict[str, object]:
        return {
            "dim": self.dim,
            "proxy_modes": self.proxy_modes,
            "target_modes": self.target_modes,
            "proxy_width": self.proxy_width,
            "target_width": self.target_width,
            "quantities": [asdict(q) for q in self.quantities],
            "notes": list(self.notes),
        }

    def format_table(self) -> str:
        """A plain-text table of the rescaled quantities."""
        header = f"muTransfer  d={self.dim}"
        if self.proxy_modes is not None:
            header += f"  K_proxy={self.proxy_modes} -> K_target={self.target_modes}"
        if self.proxy_width is not None:
            header += f"  width_proxy={self.proxy_width} -> width_target={self.target_width}"
        elif self.width is not None:
            header += f"  width={self.width}"
        rows = [("quantity", "proxy", "factor", "target", "rule")]
        rows += [(q.name, f"{q.proxy:.6g}", f"{q.factor:.6g}", f"{q.target:.6g}", q.rule) for q in self.quantities]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join([header, lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


_UNCHANGED_RULE = "unchanged under muP"


@dataclass(frozen=True)
class Scaling:
    """What changes from proxy to target: the Fourier modes K (spectral operators), the width, or both.

    ``proxy_modes``/``target_modes`` None: no spectral weights (attention operators).
    ``parametrization``: the K-parametrization ("mup" or "standard").
    ``proxy_width``/``target_width``: the widths m0 → m (None: unchanged and unknown).
    ``width_parametrization``: "mup" (Tensor Programs V, base width m0) or "standard".
    ``attention_scaled``: the operator's width rule has the 1/d_h attention scale (Galerkin, ONO).
    ``k_exponent``: the exponent ρ of muP's K rule, (d·log K)^(−ρ/2) (1: the paper's 1/√(d·log K)).
    ``proxy_resolution``/``target_resolution``: grid points per space axis the proxy and the target train on
    (None: the same grid).
    ``relative``: the multipliers come from the muP facts on the model's parameters (operators.base_shapes, a
    user's factory): relative to the proxy, which trains at the master LR and its author's init; the readout
    takes Table 3's LR x m0/m and init x sqrt(m0/m) instead of a forward multiplier.
    """

    dim: int
    proxy_modes: int | None = None
    target_modes: int | None = None
    parametrization: str = "mup"
    proxy_width: int | None = None
    target_width: int | None = None
    width_parametrization: str = "standard"
    attention_scaled: bool = False
    k_exponent: float = 1.0
    proxy_resolution: int | None = None
    target_resolution: int | None = None
    relative: bool = False

    @property
    def scales_width(self) -> bool:
        return self.proxy_width is not None and self.target_width is not None and self.proxy_width != self.target_width

    @property
    def scales_resolution(self) -> bool:
        return (
            self.proxy_resolution is not None
            and self.target_resolution is not None
            and self.proxy_resolution != self.target_resolution
        )


def resolution_transfer_factor(proxy_resolution: int, target_resolution: int) -> float:
    """The rule of the grid axis (beyond the paper): every hyperparameter carries over unchanged, factor 1.

    An FNO's spectral weights act on any grid with at least 2K points per axis: the forward FFT's sum over N
    points and the inverse's 1/N cancel, so a band-limited input gives the same kept-mode amplitudes, and the
    same operator, on every grid. The proxy can therefore train on a coarser grid than the target. Whether the
    optimal learning rate moves with the grid (the relative L2 averages over fewer points, and the proxy never
    sees the modes above its grid's Nyquist frequency) is measured, not assumed: docs/results.md.
    """
    for name, n in (("proxy resolution", proxy_resolution), ("target resolution", target_resolution)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise OperatorConfigError(f"{name} {n!r}: grid points per axis, an integer >= 2")
    return 1.0


def effective_spectral_init_std(
    dim: int,
    modes: int,
    width: int,
    parametrization: str,
    *,
    base_width: int | None = None,
    init_scale: float = 1.0,
    k_exponent: float = 1.0,
) -> float:
    """Std of the real/imaginary parts of a spectral entry as the model draws it (operators.spectral).

    ``base_width`` set: width-muP (σ_K(m0)·b(K)·√(m0/m)); else the K-parametrization's std at ``width``.
    """

    if base_width is not None:
        return spectral_width_init_std(width, base_width, modes, dim, parametrization, init_scale, k_exponent)
    return (
        init_scale
        * base_spectral_init_std(width, width, parametrization)
        * spectral_init_multiplier(modes, dim, parametrization, k_exponent)
    )


def transfer(
    scaling: Scaling,
    lr: float,
    *,
    init_scale: float | None = None,
    init_std: float | None = None,
    unchanged: dict[str, float] | None = None,
) -> TransferRecord:
    """Rescale a proxy's hyperparameters to the target described by ``scaling``.

    Args:
        scaling: what changes (modes, width, or both) and under which rules.
        lr: the proxy's master learning rate η0 (carried over: the models apply their multipliers).
        init_scale: the proxy's spectral init scale (the tuned multiplier, carried over); with the widths
            known, the table shows the effective init std it gives at the proxy and at the target.
        init_std: instead of ``init_scale``, the proxy's effective spectral init std.
        unchanged: other hyperparameters that carry over as they are (batch_size, beta2, weight_decay, …).
    """

    s = scaling
    width_mup = s.width_parametrization == "mup" and s.scales_width
    pw, tw = s.proxy_width, s.target_width  # both set when s.scales_width
    width_factor = hidden_lr_multiplier(tw, pw) if width_mup and tw is not None and pw is not None else 1.0
    rows = [RescaledQuantity("master_lr", lr, lr, 1.0, "unchanged: the model applies its multipliers itself")]
    notes = []
    if s.proxy_modes is not None:
        rows += _spectral_rows(s, lr, width_factor, width_mup, init_scale, init_std)
        if s.proxy_modes != s.target_modes:
            notes.append(
                "muP in K: the master LR carries over; the model applies c(K) = 1/sqrt(d log K) to the spectral weights"
                if s.parametrization == "mup" and s.k_exponent == 1.0
                else f"muP in K with the data's exponent rho = {s.k_exponent:.3g}: the master LR carries over; the model "
                "applies c(K) = (d log K)^(-rho/2) to the spectral weights"
                if s.parametrization == "mup"
                else "standard parametrization in K: copied unchanged; the optimum may drift with K"
            )
    if s.scales_width and pw is not None and tw is not None:
        rows += width_transfer_rows(pw, tw, lr, s.width_parametrization, s.attention_scaled, relative=s.relative)
        notes.append(
            f"width-muP (base width {s.proxy_width}): hidden weights train at LR x m0/m, "
            + ("readouts at LR x m0/m with init x sqrt(m0/m)" if s.relative else "readouts are scaled by m0/m")
            if width_mup
            else "standard width parametrization: copied unchanged; the optimum may drift with width"
        )
    if s.scales_resolution and s.proxy_resolution is not None and s.target_resolution is not None:
        factor = resolution_transfer_factor(s.proxy_resolution, s.target_resolution)
        rows.append(
            RescaledQuantity(
                "grid_points_per_axis",
                float(s.proxy_resolution),
                float(s.target_resolution),
                s.target_resolution / s.proxy_resolution,
                f"the data's grid; hyperparameters x {factor:g} (carried over: FNO acts on any grid with >= 2K points)",
            )
        )
        notes.append(
            f"resolution: the proxy trained on {s.proxy_resolution} points per axis, the target on "
            f"{s.target_resolution}: hyperparameters carried over unchanged"
        )
    rule = _UNCHANGED_RULE if s.parametrization == "mup" else "unchanged"
    rows += [RescaledQuantity(name, value, value, 1.0, rule) for name, value in (unchanged or {}).items()]
    return TransferRecord(
        s.dim,
        s.proxy_modes,
        s.target_modes,
        tuple(rows),
        proxy_width=s.proxy_width if s.scales_width else None,
        target_width=s.target_width if s.scales_width else None,
        notes=tuple(notes),
        width=None if s.scales_width else s.proxy_width,
    )


def _spectral_rows(
    s: Scaling, lr: float, width_factor: float, width_mup: bool, init_scale: float | None, init_std: float | None
) -> list[RescaledQuantity]:
    """The spectral LR and init rows: √(log Kp / log Kt) under muP in K, times the width rules."""

    for which, k in (("proxy", s.proxy_modes), ("target", s.target_modes)):
        if s.parametrization == "mup" and isinstance(k, int) and k < 2:
            raise OperatorConfigError(f"{which} modes {k}: muP needs K >= 2 (log 1 = 0); use K >= 2")
        check_modes(k, s.dim, s.parametrization)
    # check_modes above rejected anything but an int
    kp, kt = cast(int, s.proxy_modes), cast(int, s.target_modes)
    rho = s.k_exponent
    proxy_lr = effective_spectral_lr(lr, kp, s.dim, s.parametrization, k_exponent=rho)
    target_lr = effective_spectral_lr(lr, kt, s.dim, s.parametrization, width_factor, k_exponent=rho)
    k_factor = transfer_lr_factor(kp, kt) ** rho if s.parametrization == "mup" else 1.0
    if s.relative:  # the proxy trains its spectral weights at the master LR; the target's move by the rules
        proxy_lr, target_lr = lr, lr * k_factor * width_factor
    paper = "x sqrt(log Kp / log Kt)" if rho == 1.0 else f"x (log Kp / log Kt)^(rho/2), rho = {rho:.3g}"
    k_rule = paper if s.parametrization == "mup" and kp != kt else "unchanged in K"
    if s.parametrization == "standard":
        k_rule = "standard parametrization: unchanged in K"
    w_rule = " x m0/m" if width_mup else ""
    rows = [RescaledQuantity("spectral_lr", proxy_lr, target_lr, k_factor * width_factor, k_rule + w_rule)]
    if init_scale is None and init_std is None:
        return rows
    if s.relative:  # the author's init at the proxy, rescaled from the proxy's measured rms (operators.base_shapes)
        factor = k_factor * (width_factor**0.5)
        rule = k_rule + (" x sqrt(m0/m)" if w_rule else "") + ", of the proxy's measured init rms"
        return rows + [RescaledQuantity("spectral_init_rms", 1.0, factor, factor, rule)]
    w0 = s.proxy_width or 64
    w1 = s.target_width or w0
    base = w0 if width_mup else None
    proxy_std = effective_spectral_init_std(
        s.dim, kp, w0, s.parametrization, base_width=base, init_scale=init_scale or 1.0, k_exponent=rho
    )
    target_std = effective_spectral_init_std(
        s.dim, kt, w1, s.parametrization, base_width=base, init_scale=init_scale or 1.0, k_exponent=rho
    )
    if init_std is not None:  # the proxy's effective std given directly: apply the same ratio
        proxy_std, target_std = init_std, init_std * target_std / proxy_std
    factor = target_std / proxy_std
    rows += [
        RescaledQuantity(
            "spectral_init_std", proxy_std, target_std, factor, k_rule + (" x sqrt(m0/m)" if w_rule else "")
        ),
        RescaledQuantity(
            "spectral_init_variance", proxy_std**2, target_std**2, factor**2, "the square of the std's factor"
        ),
    ]
    return rows


def transfer_hyperparameters(
    dim: int,
    proxy_modes: int,
    target_modes: int,
    lr: float,
    init_std: float | None = None,
    unchanged: dict[str, float] | None = None,
) -> TransferRecord:
    """Algorithm 1 (muP in K only): ``transfer(Scaling(dim, proxy_modes, target_modes), ...)``."""
    return transfer(Scaling(dim, proxy_modes, target_modes), lr, init_std=init_std, unchanged=unchanged)


def width_transfer_rows(
    proxy_width: int,
    target_width: int,
    lr: float,
    width_parametrization: str,
    attention_scaled: bool = False,
    *,
    relative: bool = False,
) -> tuple[RescaledQuantity, ...]:
    """Rows of a width transfer m0 → m (Tensor Programs V, Adam) for a master LR ``lr``.

    Under "mup" the model applies them itself: hidden weights' LR × m0/m,
    readout output × m0/m and, with ``attention_scaled`` (Galerkin/ONO
    attention over d_h features), the d_h-contraction × √(m0/m). Under
    "standard" every row is copied (factor 1).
    """

    if width_parametrization != "mup":
        rule = "standard width parametrization: copied (the optimum may drift with width)"
        return (RescaledQuantity("hidden_lr", lr, lr, 1.0, rule),)
    factor = hidden_lr_multiplier(target_width, proxy_width)
    rows = [RescaledQuantity("hidden_lr", lr, lr * factor, factor, "x m0/m (width-muP hidden weights)")]
    if relative:  # Table 3's readout (muP facts on the parameters: no forward multiplier to set)
        rows += [
            RescaledQuantity("readout_lr", lr, lr * factor, factor, "x m0/m (readout, Table 3)"),
            RescaledQuantity("readout_init_rms", 1.0, factor**0.5, factor**0.5, "x sqrt(m0/m) (readout, Table 3)"),
        ]
    else:
        rows.append(
            RescaledQuantity(
                "output_multiplier", 1.0, output_multiplier(target_width, proxy_width), factor, "x m0/m (readout)"
            )
        )
    if attention_scaled:
        root = factor**0.5
        rows.append(RescaledQuantity("attention_scale", 1.0, root, root, "x sqrt(m0/m) (1/d_h attention)"))
    return tuple(rows)
