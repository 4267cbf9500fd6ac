"""Coordinate check: are the FNO's spectral layers' sizes flat in K?

For each parametrization, K and seed the check builds the FNO, records sizes,
takes a few Adam steps on real training data, and records them again:

- ``activation`` (per layer: lift, fourier_1…fourier_L, output): mean |x| of the
  layer's output on a real batch, at init and after the steps. Reported, not gated:
  on smooth PDE data the low modes dominate, so these sizes barely depend on K
  under either parametrization (and under muP shrink slowly as 1/√log K).
- ``spectral_init`` (per Fourier layer): mean |K_ℓ p| for a scale-invariant probe p,
  a zero-mean random field with power ∝ |k|^-d. Its energy in the kept modes grows
  as log K^d, which is exactly what the muP factor 1/√(d·log K) compensates
  (Li, Yoo & Yang 2025, Thm 3.5): flat under muP, growing as √(d·log K) under SP.
- ``spectral_update`` (per Fourier layer): mean |(K_ℓ,t − K_ℓ,0) p| for the same probe,
  the size of the spectral-weight update after the steps.

Flatness: the least-squares slope s of log(size) against log K (seeds averaged);
a curve is flat when |s| ≤ tolerance. The gate passes when every gated curve
(``spectral_init`` and ``spectral_update``) of a parametrization is flat.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from mutransfer.errors import UserInputError
from operators.fno import FNO
from operators.parametrization import clip_spectral_gradients, optimizer_param_groups

GATED_KINDS = ("spectral_init", "spectral_update")
KINDS = ("activation",) + GATED_KINDS


def scale_invariant_probe(batch: int, channels: int, grid: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Zero-mean random field with power spectrum ∝ |k|^-d, unit std; shape (batch, channels, *grid)."""
    d = len(grid)
    axes = [torch.fft.fftfreq(n, 1.0 / n) for n in grid[:-1]] + [torch.fft.rfftfreq(grid[-1], 1.0 / grid[-1])]
    radius = torch.sqrt(sum(f**2 for f in torch.meshgrid(*axes, indexing="ij")))
    amplitude = torch.where(radius > 0, radius.clamp(min=1.0) ** (-d / 2.0), torch.zeros_like(radius))
    shape = (batch, channels, *radius.shape)
    noise = torch.complex(torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))
    field = torch.fft.irfftn(noise * amplitude, s=grid, dim=tuple(range(-d, 0)))
    return field / field.std()


def loglog_slope(modes: list[int], values: list[float]) -> float:
    """Least-squares slope of log(value) against log(K)."""
    x, y = np.log(np.asarray(modes, float)), np.log(np.maximum(np.asarray(values, float), 1e-300))
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


@dataclass
class Curve:
    """Sizes of one quantity across K, with its flatness verdict."""

    parametrization: str
    kind: str
    layer: str
    modes: list[int]
    values: list[float]
    slope: float
    flat: bool

    @property
    def gated(self) -> bool:
        return self.kind in GATED_KINDS


@dataclass
class CoordCheckResult:
    """All curves of a coordinate check, the tolerance and the per-parametrization verdict."""

    tolerance: float
    steps: int
    curves: list[Curve] = field(default_factory=list)

    def passed(self, parametrization: str) -> bool:
        """True when every gated curve of ``parametrization`` is flat in K."""
        gated = [c for c in self.curves if c.parametrization == parametrization and c.gated]
        if not gated:
            raise KeyError(parametrization)
        return all(c.flat for c in gated)

    def parametrizations(self) -> list[str]:
        return list(dict.fromkeys(c.parametrization for c in self.curves))

    def as_dict(self) -> dict:
        return {
            "tolerance": self.tolerance,
            "steps": self.steps,
            "passed": {p: self.passed(p) for p in self.parametrizations()},
            "curves": [asdict(c) | {"gated": c.gated} for c in self.curves],
        }


def _layer_sizes(model: FNO, x: torch.Tensor) -> dict[str, float]:
    """mean |output| of the lift, of every Fourier layer (spectral + pointwise, before GELU) and of the model."""
    outputs: dict[str, torch.Tensor] = {}

    def keep(name):
        return lambda module, inputs, output: outputs.__setitem__(name, output)

    modules = [("lift", model.lift)]
    modules += [(f"spectral_{n + 1}", m) for n, m in enumerate(model.spectral)]
    modules += [(f"pointwise_{n + 1}", m) for n, m in enumerate(model.pointwise)]
    hooks = [module.register_forward_hook(keep(name)) for name, module in modules]
    try:
        with torch.no_grad():
            final = model(x)
    finally:
        for h in hooks:
            h.remove()
    sizes = {"lift": outputs["lift"].abs().mean().item()}
    for n in range(len(model.spectral)):
        layer_out = outputs[f"spectral_{n + 1}"] + outputs[f"pointwise_{n + 1}"]
        sizes[f"fourier_{n + 1}"] = layer_out.abs().mean().item()
    sizes["output"] = final.abs().mean().item()
    return sizes


def _probe_sizes(model: FNO, probe: torch.Tensor, initial: list[list[torch.Tensor]] | None) -> dict[str, float]:
    """mean |K_ℓ p| per Fourier layer, or mean |(K_ℓ − K_ℓ,0) p| when the initial weights are given."""
    sizes = {}
    with torch.no_grad():
        for n, spectral in enumerate(model.spectral):
            if initial is None:
                out = spectral(probe)
            else:
                saved = [w.detach().clone() for w in spectral.weights]
                for w, w0 in zip(spectral.weights, initial[n]):
                    w.sub_(w0)
                out = spectral(probe)
                for w, s in zip(spectral.weights, saved):
                    w.copy_(s)
            sizes[f"fourier_{n + 1}"] = out.abs().mean().item()
    return sizes


def coord_check(
    data,
    *,
    dim: int,
    modes: list[int],
    parametrizations: tuple[str, ...] = ("standard", "mup"),
    width: int = 32,
    layers: int = 4,
    padding: int = 0,
    lr: float = 1e-3,
    steps: int = 3,
    batch_size: int = 10,
    clip_value: float | None = None,
    seeds: int = 2,
    tolerance: float = 0.1,
) -> CoordCheckResult:
    """Run the coordinate check on ``data`` (train_x/train_y channel-last tensors) for every K in ``modes``."""
    modes = sorted(set(int(k) for k in modes))
    if len(modes) < 2:
        raise UserInputError(f"modes {modes}: give at least two values of K to see a trend, e.g. --modes 4 8 16")
    if steps < 1 or seeds < 1 or batch_size < 1:
        raise UserInputError("steps, seeds and batch_size must be positive integers")
    if not tolerance > 0:
        raise UserInputError(f"tolerance {tolerance}: must be a positive log-log slope, e.g. 0.1")
    x_all, y_all = data.train_x, data.train_y
    if x_all.shape[0] < batch_size:
        raise UserInputError(f"batch_size {batch_size}: only {x_all.shape[0]} training samples; lower --batch-size")
    grid = tuple(x_all.shape[1:-1])
    result = CoordCheckResult(tolerance=tolerance, steps=steps)
    for parametrization in parametrizations:
        per_k: dict[tuple[str, str], list[float]] = {}
        for k in modes:
            sums: dict[tuple[str, str], float] = {}
            for seed in range(seeds):
                for key, value in _one_run(x_all, y_all, grid, dim, k, parametrization, width, layers, padding,
                                           lr, steps, batch_size, clip_value, seed).items():
                    sums[key] = sums.get(key, 0.0) + value / seeds
            for key, value in sums.items():
                per_k.setdefault(key, []).append(value)
        for (kind, layer), values in per_k.items():
            slope = loglog_slope(modes, values)
            result.curves.append(Curve(parametrization, kind, layer, modes, values, slope, abs(slope) <= tolerance))
    return result


def _one_run(x_all, y_all, grid, dim, k, parametrization, width, layers, padding, lr, steps, batch_size,
             clip_value, seed) -> dict[tuple[str, str], float]:
    torch.manual_seed(seed)
    model = FNO(dim, x_all.shape[-1], y_all.shape[-1], modes=k, width=width, layers=layers,
                parametrization=parametrization, padding=padding)
    model.check_input(grid)
    generator = torch.Generator().manual_seed(10_000 + seed)
    probe = scale_invariant_probe(4, width, tuple(n + padding for n in grid), generator)
    batch = x_all[:batch_size]
    out: dict[tuple[str, str], float] = {}
    for layer, v in _probe_sizes(model, probe, None).items():
        out[("spectral_init", layer)] = v
    initial = [[w.detach().clone() for w in s.weights] for s in model.spectral]
    optimizer = torch.optim.Adam(optimizer_param_groups(model, lr))
    order = torch.randperm(x_all.shape[0], generator=generator)
    for step in range(steps):
        idx = order[(step * batch_size) % x_all.shape[0]:][:batch_size]
        optimizer.zero_grad()
        pred = model(x_all[idx])
        diff = (pred - y_all[idx]).flatten(1).norm(dim=1) / y_all[idx].flatten(1).norm(dim=1).clamp(min=1e-12)
        diff.mean().backward()
        clip_spectral_gradients(model, clip_value)
        optimizer.step()
    for layer, v in _layer_sizes(model, batch).items():
        out[("activation", layer)] = v
    for layer, v in _probe_sizes(model, probe, initial).items():
        out[("spectral_update", layer)] = v
    if not all(math.isfinite(v) for v in out.values()):
        raise UserInputError(f"coordinate check diverged at K={k} ({parametrization}); lower --lr")
    return out


def plot_coord_check(result: CoordCheckResult, path) -> None:
    """Save a grid of log-log plots: rows = quantity, columns = parametrization, one line per layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = result.parametrizations()
    fig, axes = plt.subplots(len(KINDS), len(params), figsize=(4.2 * len(params), 3.2 * len(KINDS)), squeeze=False)
    for col, parametrization in enumerate(params):
        for row, kind in enumerate(KINDS):
            ax = axes[row][col]
            for curve in (c for c in result.curves if c.parametrization == parametrization and c.kind == kind):
                style = "-" if curve.flat else "--"
                ax.loglog(curve.modes, curve.values, style, marker="o", ms=3,
                          label=f"{curve.layer} (s={curve.slope:+.2f})")
            verdict = "" if kind not in GATED_KINDS else (
                "  flat" if all(c.flat for c in result.curves if c.parametrization == parametrization and c.kind == kind)
                else "  NOT flat")
            ax.set_title(f"{parametrization}: {kind}{verdict}", fontsize=9)
            _fixed_axes(ax, [c for c in result.curves if c.parametrization == parametrization and c.kind == kind])
            ax.set_xlabel("K (modes)")
            ax.set_ylabel("mean |x|")
            ax.legend(fontsize=6)
    fig.suptitle(f"coordinate check after {result.steps} Adam steps; flat = |log-log slope| <= {result.tolerance}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _fixed_axes(ax, curves: list[Curve]) -> None:
    """K ticks as plain numbers; a y-window spanning at least 10x so flat curves look flat."""
    from matplotlib.ticker import NullLocator

    modes = curves[0].modes
    ax.set_xscale("log", base=2)
    ax.set_xticks(modes, [str(k) for k in modes])
    ax.xaxis.set_minor_locator(NullLocator())
    values = [v for c in curves for v in c.values if v > 0]
    lo, hi = min(values), max(values)
    centre = math.sqrt(lo * hi)
    ax.set_ylim(min(lo / 1.2, centre / math.sqrt(10)), max(hi * 1.2, centre * math.sqrt(10)))
