"""Algorithm 1 of muTransfer-FNO: proxy hyperparameters at K_proxy → values at K_target.

Under muP the model applies c(K) and b(K) itself, so the *master* LR η0 and the
init scale carry over unchanged, while the *effective* spectral LR and init std
are rescaled by √(log K_proxy / log K_target) (the variance by the plain ratio).
Batch size, Adam β2, weight decay and the clip value transfer unchanged (paper §4.4).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from operators.parametrization import (
    spectral_lr_multiplier,
    transfer_init_variance_factor,
    transfer_lr_factor,
)


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

    def target_values(self) -> dict[str, float]:
        """{name: target value} for every quantity."""
        return {q.name: q.target for q in self.quantities}

    def get(self, name: str) -> RescaledQuantity:
        for q in self.quantities:
            if q.name == name:
                return q
        raise KeyError(name)

    def as_dict(self) -> dict:
        return {
            "dim": self.dim,
            "proxy_modes": self.proxy_modes,
            "target_modes": self.target_modes,
            "proxy_width": self.proxy_width,
            "target_width": self.target_width,
            "quantities": [asdict(q) for q in self.quantities],
        }

    def format_table(self) -> str:
        """A plain-text table of the rescaled quantities."""
        header = f"muTransfer  d={self.dim}"
        if self.proxy_modes is not None:
            header += f"  K_proxy={self.proxy_modes} -> K_target={self.target_modes}"
        if self.proxy_width is not None:
            header += f"  width_proxy={self.proxy_width} -> width_target={self.target_width}"
        rows = [("quantity", "proxy", "factor", "target", "rule")]
        rows += [(q.name, f"{q.proxy:.6g}", f"{q.factor:.6g}", f"{q.target:.6g}", q.rule) for q in self.quantities]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join([header, lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


_UNCHANGED_RULE = "unchanged under muP"


def transfer_hyperparameters(
    dim: int,
    proxy_modes: int,
    target_modes: int,
    lr: float,
    init_std: float | None = None,
    unchanged: dict[str, float] | None = None,
) -> TransferRecord:
    """Rescale muP proxy hyperparameters from K_proxy to K_target (Algorithm 1).

    Args:
        dim: number of truncated dimensions d.
        proxy_modes, target_modes: K_proxy and K_target (both ≥ 2).
        lr: the proxy's master learning rate η0.
        init_std: the proxy's effective spectral init std (optional).
        unchanged: other hyperparameters that carry over as they are
            (batch_size, beta2, weight_decay, clip_value, init_scale …).
    """
    lr_factor = transfer_lr_factor(proxy_modes, target_modes)
    var_factor = transfer_init_variance_factor(proxy_modes, target_modes)
    c_proxy = spectral_lr_multiplier(proxy_modes, dim, "mup")
    rows = [
        RescaledQuantity("master_lr", lr, lr, 1.0, "unchanged: the muP model applies c(K) itself"),
        RescaledQuantity(
            "spectral_lr",
            c_proxy * lr,
            c_proxy * lr * lr_factor,
            lr_factor,
            "x sqrt(log Kp / log Kt)",
        ),
    ]
    if init_std is not None:
        rows += [
            RescaledQuantity("spectral_init_std", init_std, init_std * lr_factor, lr_factor, "x sqrt(log Kp / log Kt)"),
            RescaledQuantity(
                "spectral_init_variance", init_std**2, init_std**2 * var_factor, var_factor, "x log Kp / log Kt"
            ),
        ]
    for name, value in (unchanged or {}).items():
        rows.append(RescaledQuantity(name, value, value, 1.0, _UNCHANGED_RULE))
    return TransferRecord(dim, proxy_modes, target_modes, tuple(rows))


def width_transfer_rows(
    proxy_width: int, target_width: int, lr: float, width_parametrization: str, attention_scaled: bool = False
) -> tuple[RescaledQuantity, ...]:
    """Rows of a width transfer m0 → m (Tensor Programs V, Adam) for a master LR ``lr``.

    Under "mup" the model applies them itself: hidden weights' LR × m0/m,
    readout output × m0/m and, with ``attention_scaled`` (Galerkin/ONO
    attention over d_h features), the d_h-contraction × √(m0/m). Under
    "standard" every row is copied (factor 1).
    """
    from operators.width_mup import hidden_lr_multiplier, output_multiplier

    if width_parametrization != "mup":
        rule = "standard width parametrization: copied (the optimum may drift with width)"
        return (RescaledQuantity("hidden_lr", lr, lr, 1.0, rule),)
    factor = hidden_lr_multiplier(target_width, proxy_width)
    rows = [
        RescaledQuantity("hidden_lr", lr, lr * factor, factor, "x m0/m (width-muP hidden weights)"),
        RescaledQuantity("output_multiplier", 1.0, output_multiplier(target_width, proxy_width), factor, "x m0/m (readout)"),
    ]
    if attention_scaled:
        root = factor**0.5
        rows.append(RescaledQuantity("attention_scale", 1.0, root, root, "x sqrt(m0/m) (1/d_h attention)"))
    return tuple(rows)
