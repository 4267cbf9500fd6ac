"""Coordinate check: does the size of an update at a fixed LR stay flat as K grows?

What decides whether a learning rate transfers from K_proxy to K_target is how far
a few optimizer steps at that LR move the network. For each parametrization, K and
seed the check builds the FNO, records on a fixed batch of the training data

- the network's output f_0(x), and for every Fourier layer ℓ its input h_ℓ (the init
  network's input to that layer, padding included), its spectral part S_ℓ,0(h_ℓ) and
  its whole output S_ℓ,0(h_ℓ) + W_ℓ,0(h_ℓ) (before the GELU),

takes ``steps`` Adam steps at ``lr`` (the parametrization's LR multipliers applied,
:func:`operators.parametrization.optimizer_param_groups`) on that data, and measures
the RMS change (absolute, in the units of the data / hidden channels):

- ``output``: RMS(f_t(x) − f_0(x)) over batch, grid and channels;
- ``fourier_ℓ``: RMS((S_ℓ,t + W_ℓ,t)(h_ℓ) − (S_ℓ,0 + W_ℓ,0)(h_ℓ)) on the FIXED input h_ℓ,
  so only layer ℓ's own update counts;
- ``spectral_ℓ``: RMS(S_ℓ,t(h_ℓ) − S_ℓ,0(h_ℓ)), the spectral weights' update alone;
- ``probe_arithmetic_ℓ`` (never gated): RMS(S_ℓ,0 p) at init for a scale-invariant
  probe p (power ∝ |k|^-d, whose energy in the kept modes grows like log K^d). It checks
  the arithmetic of b(K) only: flat under muP by construction, √(d·log K) under SP.

Each value is also kept relative to the size of what changed (RMS(f_0), RMS of the
layer's or spectral part's init output; 1 for the probe).

Verdict per curve (``tolerance`` τ on the log-log slope, default 0.1): per seed the
least-squares slope of ln(value) against ln K; their mean with a 95 % Student-t
CI [lo, hi] over seeds (:func:`mutransfer._diagnostics.statistics.mean_ci`):

- ``no-signal``: some (K, seed) value has relative change < ``MIN_RELATIVE`` (1e-6),
  is exactly zero or not finite (``lr`` 0, frozen weights): nothing was measured;
- ``flat``: −τ ≤ lo and hi ≤ τ (the whole CI inside ±τ);
- ``grows``: mean > τ and lo > 0;  ``shrinks``: mean < −τ and hi < 0;
- ``unresolved``: one seed (no interval: ``--seeds`` ≥ 2 for any other verdict), or
  anything else (the CI is wider than ±τ allows and reaches across
  a bound, e.g. it covers 0 but also slopes beyond τ: more seeds are needed).

Gated curves: ``output`` and every ``fourier_ℓ`` (``GATED_KINDS``). A parametrization
passes only if all its gated curves are ``flat``; its verdict is ``pass``, else
``no-signal`` if a gated curve had no signal, else ``flagged``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

from mutransfer._diagnostics.rule_panel import Rule, apply_rule
from mutransfer._diagnostics.statistics import Estimate, fit_slope, mean_ci
from mutransfer._training.losses import relative_l2
from mutransfer._training.memory import check_before_building
from mutransfer.errors import UserInputError
from operators.family import ModelSpec, get_family
from operators.fno import FNO
from operators.parametrization import clip_spectral_gradients, optimizer_param_groups

FLAT, GROWS, SHRINKS, UNRESOLVED, NO_SIGNAL = "flat", "grows", "shrinks", "unresolved", "no-signal"
#: smallest relative change that counts as a measured update
MIN_RELATIVE = 1e-6
KINDS = ("output", "fourier", "spectral", "probe_arithmetic")
GATED_KINDS = ("output", "fourier")


def classify_slopes(slopes, tolerance: float, smallest_relative: float = 1.0) -> tuple[str, Estimate | None]:
    """(verdict, mean slope with its t CI) for per-seed log-log slopes; the rule of the module docstring.

    ``smallest_relative``: the smallest relative change over all (K, seed) of the curve.
    """
    if not smallest_relative >= MIN_RELATIVE or slopes is None or not all(math.isfinite(s) for s in slopes):
        return NO_SIGNAL, None
    est = mean_ci(slopes)
    if not est.bounded:  # one seed: no interval, no verdict beyond "unresolved"
        return UNRESOLVED, est
    if -tolerance <= est.lo and est.hi <= tolerance:
        return FLAT, est
    if est.mean > tolerance and est.lo > 0:
        return GROWS, est
    if est.mean < -tolerance and est.hi < 0:
        return SHRINKS, est
    return UNRESOLVED, est


def classify_curve(scales, values_per_seed, relative_per_seed, tolerance: float):
    """(per-seed log-log slopes over ``scales`` or None, verdict, Estimate or None) for one measured curve.

    ``values_per_seed[seed][i]``: the size at ``scales[i]`` (K or width); ``relative_per_seed`` the same
    relative to its reference, whose smallest entry decides ``no-signal``.
    """
    smallest = min((r for seed in relative_per_seed for r in seed), default=0.0)
    slopes = None
    if all(v > 0 and math.isfinite(v) for seed in values_per_seed for v in seed):
        x = np.log(np.asarray(scales, float))
        slopes = [fit_slope(x, np.log(seed)) for seed in values_per_seed]
    verdict, estimate = classify_slopes(slopes, tolerance, smallest)
    return slopes, verdict, estimate


class SeedCurve:
    """What a per-seed curve shares (mixed into a dataclass with ``values_per_seed``, ``relative_per_seed``,
    ``tolerance``, ``seed_slopes``, ``verdict``, ``estimate``): its verdict by :func:`classify_curve` over
    :attr:`scales`, and the means over seeds."""

    @property
    def scales(self) -> list[int]:
        raise NotImplementedError

    def __post_init__(self):
        self.seed_slopes, self.verdict, self.estimate = classify_curve(
            self.scales, self.values_per_seed, self.relative_per_seed, self.tolerance
        )

    @property
    def values(self) -> list[float]:
        """Mean over seeds per scale."""
        return [float(np.mean(col)) for col in zip(*self.values_per_seed)]


@dataclass
class Curve(SeedCurve):
    """One measured size across K for one parametrization: values[seed][k_index] and the verdict."""

    parametrization: str
    name: str  # "output", "fourier_2", "spectral_2", "probe_arithmetic_2"
    kind: str
    modes: list[int]
    values_per_seed: list[list[float]]  # absolute RMS (change), per seed, per K
    relative_per_seed: list[list[float]]  # the same divided by the RMS of the init quantity
    tolerance: float
    seed_slopes: list[float] | None = None
    estimate: Estimate | None = None
    verdict: str = NO_SIGNAL

    @property
    def scales(self) -> list[int]:
        return self.modes

    @property
    def gated(self) -> bool:
        return self.kind in GATED_KINDS

    @property
    def relative(self) -> list[float]:
        return [float(np.mean(col)) for col in zip(*self.relative_per_seed)]

    @property
    def slope(self) -> float | None:
        return None if self.estimate is None else self.estimate.mean

    @property
    def slope_ci(self) -> list[float | None] | None:
        """[lo, hi] of the mean slope (a bound None with one seed: no interval), None without a slope."""
        return None if self.estimate is None else self.estimate.ci

    def describe(self) -> str:
        """``fourier_2 grows, slope +0.310 [+0.270, +0.350] (3 seeds)``, or the smallest relative change when no-signal."""
        if self.verdict == NO_SIGNAL:
            smallest = min((r for seed in self.relative_per_seed for r in seed), default=0.0)
            return (
                f"{self.name} no-signal (smallest relative change {smallest:.1e} < {MIN_RELATIVE:.0e}: "
                "the update is too small to measure)"
            )
        return (
            f"{self.name} {self.verdict}, slope {self.slope:+.3f} {self.estimate.interval('+.3f')} "
            f"({len(self.seed_slopes)} seeds)"
        )

    def as_dict(self) -> dict:
        return {
            "parametrization": self.parametrization,
            "curve": self.name,
            "kind": self.kind,
            "gated": self.gated,
            "verdict": self.verdict,
            "slope": self.slope,
            "slope_ci": self.slope_ci,
            "seed_slopes": self.seed_slopes,
            "modes": self.modes,
            "values": self.values,
            "values_per_seed": self.values_per_seed,
            "relative": self.relative,
            "relative_per_seed": self.relative_per_seed,
        }


@dataclass
class CoordCheckResult:
    """All curves of a coordinate check with the settings that produced them."""

    tolerance: float
    steps: int
    lr: float
    seeds: int
    curves: list[Curve] = field(default_factory=list)

    def parametrizations(self) -> list[str]:
        return list(dict.fromkeys(c.parametrization for c in self.curves))

    def gated(self, parametrization: str) -> list[Curve]:
        gated = [c for c in self.curves if c.parametrization == parametrization and c.gated]
        if not gated:
            raise KeyError(parametrization)
        return gated

    def flagged(self, parametrization: str) -> list[Curve]:
        """Gated curves that are not flat, the most telling first (grows/shrinks by |slope|, then the rest)."""
        rank = {GROWS: 0, SHRINKS: 0, UNRESOLVED: 1, NO_SIGNAL: 2}
        bad = [c for c in self.gated(parametrization) if c.verdict != FLAT]
        return sorted(bad, key=lambda c: (rank[c.verdict], -abs(c.slope or 0.0)))

    def verdict(self, parametrization: str) -> str:
        """``pass`` (every gated curve flat), ``no-signal`` (a gated curve measured nothing) or ``flagged``."""
        bad = self.flagged(parametrization)
        if not bad:
            return "pass"
        return NO_SIGNAL if any(c.verdict == NO_SIGNAL for c in bad) else "flagged"

    def passed(self, parametrization: str) -> bool:
        return self.verdict(parametrization) == "pass"

    def as_dict(self) -> dict:
        params = self.parametrizations()
        return {
            "tolerance": self.tolerance,
            "steps": self.steps,
            "lr": self.lr,
            "seeds": self.seeds,
            "min_relative": MIN_RELATIVE,
            "gated_kinds": list(GATED_KINDS),
            "parametrizations": {
                p: {"verdict": self.verdict(p), "passed": self.passed(p), "flagged": [c.name for c in self.flagged(p)]}
                for p in params
            },
            "passed": {p: self.passed(p) for p in params},
            "curves": [c.as_dict() for c in self.curves],
        }


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


def check_coord_check_inputs(
    data,
    *,
    dim: int,
    modes: list[int],
    width: int,
    layers: int,
    padding: int,
    lr: float,
    steps: int,
    batch_size: int,
    seeds: int,
    tolerance: float,
    projection_channels: int = 128,
) -> list[int]:
    """Everything :func:`coord_check` needs, checked before any model is built; returns the sorted distinct K.

    The largest K must fit the grid and its FNO (at ``batch_size``) the available RAM
    (mutransfer._training.memory.check_before_building).
    """

    modes = sorted(set(int(k) for k in modes))
    if len(modes) < 2:
        raise UserInputError(f"modes {modes}: give at least two values of K to see a trend, e.g. --modes 4 8 16")
    if steps < 1 or seeds < 1 or batch_size < 1:
        raise UserInputError("steps, seeds and batch_size must be positive integers (--steps, --seeds, --batch-size)")
    if not tolerance > 0:
        raise UserInputError(f"tolerance {tolerance}: must be a positive log-log slope, e.g. --tolerance 0.1")
    if not (math.isfinite(lr) and lr >= 0):
        raise UserInputError(f"lr {lr}: must be zero or a positive number, e.g. --lr 1e-3")
    x_all, y_all = data.train_x, data.train_y
    if x_all.shape[0] < batch_size:
        raise UserInputError(f"batch_size {batch_size}: only {x_all.shape[0]} training samples; lower --batch-size")
    fno = dict(
        dim=dim,
        modes=modes[-1],
        width=width,
        layers=layers,
        in_channels=int(x_all.shape[-1]),
        out_channels=int(y_all.shape[-1]),
        projection_channels=projection_channels,
        padding=padding,
    )
    check_before_building(fno, tuple(x_all.shape[1:-1]), batch_size, "cpu", what="coordinate check (--modes)")
    return modes


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
    seeds: int = 3,
    tolerance: float = 0.1,
    projection_channels: int = 128,
    init_scale: float = 1.0,
    rule: Rule | None = None,
) -> CoordCheckResult:
    """Run the check on ``data`` (train_x (n, *grid, c_in) / train_y (n, *grid, c_out), channel-last) for every K.

    ``rule``: a panel rule (mutransfer._diagnostics.rule_panel) whose spectral LR multiplier replaces the
    parametrization's (``parametrizations`` must then be ``(rule.parametrization,)``).
    """
    if rule is not None and tuple(parametrizations) != (rule.parametrization,):
        raise ValueError(f"rule {rule.name}: parametrizations must be ({rule.parametrization!r},)")
    modes = check_coord_check_inputs(
        data,
        dim=dim,
        modes=modes,
        width=width,
        layers=layers,
        padding=padding,
        lr=lr,
        steps=steps,
        batch_size=batch_size,
        seeds=seeds,
        tolerance=tolerance,
        projection_channels=projection_channels,
    )
    x_all, y_all = data.train_x, data.train_y
    grid = tuple(x_all.shape[1:-1])
    settings = dict(
        dim=dim,
        width=width,
        layers=layers,
        padding=padding,
        lr=lr,
        steps=steps,
        batch_size=batch_size,
        clip_value=clip_value,
        projection_channels=projection_channels,
        init_scale=init_scale,
    )
    result = CoordCheckResult(tolerance=tolerance, steps=steps, lr=lr, seeds=seeds)
    for parametrization in parametrizations:
        # runs[seed][k_index] = {curve name: (value, reference)}
        runs = [
            [_one_run(x_all, y_all, grid, k, parametrization, seed, rule=rule, **settings) for k in modes]
            for seed in range(seeds)
        ]
        for name in sorted(runs[0][0], key=_curve_order):
            values = [[run[name][0] for run in per_k] for per_k in runs]
            relative = [[_relative(*run[name]) for run in per_k] for per_k in runs]
            kind = name.rsplit("_", 1)[0] if name != "output" else "output"
            result.curves.append(Curve(parametrization, name, kind, modes, values, relative, tolerance))
    return result


def _curve_order(name: str) -> tuple[int, int]:
    """output first, then fourier_1…L, spectral_1…L, probe_arithmetic_1…L."""
    if name == "output":
        return (0, 0)
    kind, layer = name.rsplit("_", 1)
    return (KINDS.index(kind), int(layer))


def _relative(value: float, reference: float) -> float:
    if value == 0:
        return 0.0
    return value / reference if reference > 0 else math.inf


def _rms(t: torch.Tensor) -> float:
    return t.double().square().mean().sqrt().item()


def _capture(
    model: FNO, x: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """(f(x), per Fourier layer: its input h_ℓ (B, m, *padded grid), S_ℓ(h_ℓ), W_ℓ(h_ℓ)) from one forward pass."""
    seen: dict[tuple[str, int], torch.Tensor] = {}

    def keep(kind, n):
        def hook(module, inputs, output):
            seen[(kind, n)] = output
            if kind == "spectral":
                seen[("input", n)] = inputs[0]

        return hook

    hooks = [m.register_forward_hook(keep("spectral", n)) for n, m in enumerate(model.spectral)]
    hooks += [m.register_forward_hook(keep("pointwise", n)) for n, m in enumerate(model.pointwise)]
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        for h in hooks:
            h.remove()
    n_layers = len(model.spectral)
    return (
        out,
        [seen[("input", n)] for n in range(n_layers)],
        [seen[("spectral", n)] for n in range(n_layers)],
        [seen[("pointwise", n)] for n in range(n_layers)],
    )


def _one_run(
    x_all,
    y_all,
    grid,
    k,
    parametrization,
    seed,
    *,
    dim,
    width,
    layers,
    padding,
    lr,
    steps,
    batch_size,
    clip_value,
    projection_channels=128,
    init_scale=1.0,
    rule: Rule | None = None,
) -> dict[str, tuple[float, float]]:
    """One model at K and seed: {curve name: (RMS change or size, RMS of the reference)}."""
    torch.manual_seed(seed)
    spec = ModelSpec(
        dim=dim,
        input_channels=int(x_all.shape[-1]),
        output_channels=int(y_all.shape[-1]),
        width=width,
        layers=layers,
        modes=k,
        parametrization=parametrization,
        init_scale=init_scale,
        options={"padding": padding, "projection_channels": projection_channels},
    )
    model = cast(FNO, get_family("fno").build(spec))  # the check measures the FNO family's layers (module docstring)
    if rule is not None:
        apply_rule(model, rule)
    model.check_input(grid)
    generator = torch.Generator().manual_seed(10_000 + seed)
    probe = scale_invariant_probe(4, width, tuple(n + padding for n in grid), generator)
    batch = x_all[:batch_size]
    f0, inputs, spectral0, pointwise0 = _capture(model, batch)
    out: dict[str, tuple[float, float]] = {}
    with torch.no_grad():
        for n, spectral in enumerate(model.spectral):
            out[f"probe_arithmetic_{n + 1}"] = (_rms(spectral(probe)), 1.0)
    if lr > 0:  # lr 0: no step is taken, every change is exactly zero (no-signal)
        optimizer = torch.optim.Adam(optimizer_param_groups(model, lr))
        order = torch.randperm(x_all.shape[0], generator=generator)
        for step in range(steps):
            idx = order[(step * batch_size) % x_all.shape[0] :][:batch_size]
            optimizer.zero_grad()
            relative_l2(model(x_all[idx]), y_all[idx]).backward()
            clip_spectral_gradients(model, clip_value)
            optimizer.step()
    with torch.no_grad():
        out["output"] = (_rms(model(batch) - f0), _rms(f0))
        for n, (spectral, pointwise) in enumerate(zip(model.spectral, model.pointwise)):
            s_t, w_t = spectral(inputs[n]), pointwise(inputs[n])
            before = spectral0[n] + pointwise0[n]
            out[f"fourier_{n + 1}"] = (_rms(s_t + w_t - before), _rms(before))
            out[f"spectral_{n + 1}"] = (_rms(s_t - spectral0[n]), _rms(spectral0[n]))
    if not all(math.isfinite(v) for pair in out.values() for v in pair):
        raise UserInputError(f"coordinate check diverged at K={k} ({parametrization}); lower --lr")
    return out
