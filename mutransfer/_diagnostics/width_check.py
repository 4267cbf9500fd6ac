"""Width coordinate check: does the size of an Adam update at a fixed LR stay flat as the width grows?

Width-muP (Tensor Programs V) promises that a few Adam steps at one learning rate
move every activation and the output by an amount that does not depend on the width
m. This check measures that for any point-set operator ``build(width) -> model``
called as ``model(coords, features)``:

for every seed s and width m: seed the init with s, build the model, record on one
fixed batch (coords (B, n, d), features (B, n, C_in)) the output f_0 (B, n, C_out)
and, for every probe, a sub-module's inputs and the probed quantity a_0 on them;
take ``steps`` Adam steps at ``lr`` on the relative
L2 loss against ``target`` (the model's own LR multipliers applied,
:func:`operators.parametrization.optimizer_param_groups`); record f_t, a_t. Curves:

- ``output``: RMS(f_t − f_0) over batch, points and channels (units of the target);
- ``<probe>``: RMS(a_t − a_0) with a_t evaluated on the module's FIXED init inputs, so
  only that module's own update counts (the drift of its inputs, whose size under muP
  decays with the width at small widths, is left out). A probe is a sub-module name
  (``"blocks.1.out_ffn.fc2"``: its forward output) or a :class:`Probe` computing any
  tensor from the module and its inputs, e.g. ONO's eigenfunctions ψ
  (:func:`eigenfunction_probes`).

Each value is also kept relative to RMS(f_0) or RMS(a_0). The model stays in
training mode throughout (ONO whitens with the batch's second moment).

Verdict per curve: per seed the least-squares slope of ln(value) against ln(m), the
mean with a 95 % Student-t CI over seeds (none with one seed), and the rule of
:func:`mutransfer._diagnostics.coord_check.classify_slopes` (``flat`` when the whole
CI lies within ±``tolerance``; ``grows``/``shrinks``/``unresolved``/``no-signal``).
Under correct width-muP the output curve is flat; under the standard
parametrization it grows (Adam moves a width-m contraction by Θ(m·η)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from mutransfer._diagnostics.coord_check import MIN_RELATIVE, NO_SIGNAL, SeedCurve
from mutransfer._diagnostics.statistics import Estimate
from mutransfer._training.losses import relative_l2
from mutransfer.errors import UserInputError
from operators.parametrization import optimizer_param_groups


def grid_point_batch(batch: int = 2, resolution: int = 8, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A small smooth regression on a regular grid presented as point sets.

    Returns coords (B, n, 2) in [0, 1]², features a (B, n, 1) (a random sum of
    low-frequency sines, unit-order values) and target u = sin(πx₁)·a + cos(πx₂)
    (B, n, 1), with n = resolution².
    """
    g = torch.Generator().manual_seed(seed)
    axis = torch.linspace(0.0, 1.0, resolution)
    coords = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), dim=-1).reshape(1, -1, 2).expand(batch, -1, -1)
    freq = torch.randint(1, 4, (batch, 3, 2), generator=g).float()
    phase = 2 * math.pi * torch.rand(batch, 3, 1, generator=g)
    amp = torch.randn(batch, 3, 1, generator=g)
    a = (amp * torch.sin(math.pi * freq @ coords.transpose(1, 2) + phase)).sum(1).unsqueeze(-1)
    u = torch.sin(math.pi * coords[..., :1]) * a + torch.cos(math.pi * coords[..., 1:])
    return coords.contiguous(), a, u


@dataclass
class WidthCurve(SeedCurve):
    """One measured change across widths: values[seed][width_index], per-seed slopes and the verdict."""

    name: str
    widths: list[int]
    values_per_seed: list[list[float]]  # absolute RMS change
    relative_per_seed: list[list[float]]  # divided by the RMS at init
    tolerance: float
    seed_slopes: list[float] | None = None
    estimate: Estimate | None = None
    verdict: str = NO_SIGNAL

    @property
    def scales(self) -> list[int]:
        return self.widths

    def describe(self) -> str:
        """``output flat, slope -0.012 [-0.050, +0.020] (3 seeds); RMS change 1.2e-02 … 1.1e-02``."""
        if self.estimate is None:
            return f"{self.name} {self.verdict}"
        e = self.estimate
        return (
            f"{self.name} {self.verdict}, slope {e.mean:+.3f} {e.interval('+.3f')} ({e.n} seeds); "
            f"RMS change " + " ".join(f"{v:.2e}" for v in self.values)
        )

    def as_dict(self) -> dict:
        e = self.estimate
        return {
            "curve": self.name,
            "verdict": self.verdict,
            "widths": self.widths,
            "slope": None if e is None else e.mean,
            "slope_ci": None if e is None else e.ci,
            "seed_slopes": self.seed_slopes,
            "values": self.values,
            "values_per_seed": self.values_per_seed,
            "relative_per_seed": self.relative_per_seed,
        }


@dataclass
class WidthCheckResult:
    """All curves of one width check with the settings that produced them."""

    lr: float
    steps: int
    seeds: int
    tolerance: float
    curves: list[WidthCurve] = field(default_factory=list)

    def curve(self, name: str) -> WidthCurve:
        for c in self.curves:
            if c.name == name:
                return c
        raise KeyError(name)

    def as_dict(self) -> dict:
        return {
            "lr": self.lr,
            "steps": self.steps,
            "seeds": self.seeds,
            "tolerance": self.tolerance,
            "min_relative": MIN_RELATIVE,
            "curves": [c.as_dict() for c in self.curves],
        }


def _relative(value: float, reference: float) -> float:
    if value == 0:
        return 0.0
    return value / reference if reference > 0 else math.inf


def _rms(t: torch.Tensor) -> float:
    return t.double().square().mean().sqrt().item()


@dataclass(frozen=True)
class Probe:
    """A quantity re-evaluated on a sub-module's init inputs.

    ``module``: the sub-module's name in the model; ``fn(module, args, kwargs)`` returns
    the tensor to compare (default: ``module(*args, **kwargs)``, its own forward).
    """

    name: str
    module: str
    fn: Callable[[nn.Module, tuple, dict], torch.Tensor] | None = None

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> torch.Tensor:
        return module(*args, **kwargs) if self.fn is None else self.fn(module, args, kwargs)


def _eigenfunctions(module: nn.Module, args: tuple, kwargs: dict) -> torch.Tensor:
    x, _, mask = args  # OrthogonalAttention.forward(x, h, mask)
    return module.eigenfunctions_of(x, mask)


def eigenfunction_probes(model: nn.Module) -> list[Probe]:
    """``psi_ℓ`` probes: ψ (B, n, k) of every module with ``eigenfunctions_of`` (ONO's orthogonal attentions)."""
    names = [name for name, m in model.named_modules() if callable(getattr(m, "eigenfunctions_of", None))]
    return [Probe(f"psi_{i}", name, _eigenfunctions) for i, name in enumerate(names)]


def _detached(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _forward(model: nn.Module, coords, features, probes: Sequence[Probe]):
    """(output, {probe name: (args, kwargs, probed value at init)}) from one no-grad forward pass."""
    inputs: dict[str, tuple] = {}

    def keep(name):
        def hook(module, args, kwargs):
            inputs[name] = (tuple(_detached(a) for a in args), {k: _detached(v) for k, v in kwargs.items()})

        return hook

    modules = {p.module for p in probes}
    unknown = sorted(name for name in modules if name not in dict(model.named_modules()))
    if unknown:
        raise UserInputError(
            f"probe modules {unknown} are not in the model; name sub-modules, e.g. 'blocks.0.orthogonal'"
        )
    hooks = [model.get_submodule(name).register_forward_pre_hook(keep(name), with_kwargs=True) for name in modules]
    try:
        with torch.no_grad():
            out = model(coords, features)
    finally:
        for h in hooks:
            h.remove()
    missing = sorted(modules - inputs.keys())
    if missing:
        raise UserInputError(f"probes {missing} were not called in the forward pass; name modules the model runs")
    seen = {}
    with torch.no_grad():
        for p in probes:
            args, kwargs = inputs[p.module]
            seen[p.name] = (args, kwargs, p(model.get_submodule(p.module), args, kwargs).detach().clone())
    return out, seen


def _one_run(build, width, seed, batch, probes, lr, steps) -> dict[str, tuple[float, float]]:
    """{curve: (RMS change, RMS at init)} for one model of ``width`` initialised with ``seed``."""
    coords, features, target = batch
    torch.manual_seed(seed)
    model = build(width)
    model.train()
    f0, seen = _forward(model, coords, features, probes)
    optimizer = torch.optim.Adam(optimizer_param_groups(model, lr))
    for _ in range(steps):
        optimizer.zero_grad()
        relative_l2(model(coords, features), target).backward()
        optimizer.step()
    with torch.no_grad():
        out = {"output": (_rms(model(coords, features) - f0), _rms(f0))}
        for p in probes:
            args, kwargs, before = seen[p.name]
            after = p(model.get_submodule(p.module), args, kwargs)  # its own update, on its init inputs
            out[p.name] = (_rms(after - before), _rms(before))
    if not all(math.isfinite(v) for pair in out.values() for v in pair):
        raise UserInputError(f"width check diverged at width {width}; lower the lr")
    return out


def width_coord_check(
    build: Callable[[int], nn.Module],
    widths: Sequence[int],
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    *,
    probes: Sequence[str | Probe] = (),
    seeds: int = 3,
    steps: int = 3,
    lr: float = 1e-3,
    tolerance: float = 0.1,
) -> WidthCheckResult:
    """Measure the change after ``steps`` Adam steps at ``lr`` for every width; see the module docstring.

    ``build(width)`` returns a fresh model (its init drawn from the global seed set
    here); ``batch`` is (coords, features, target), default :func:`grid_point_batch`.
    """
    widths = sorted(set(int(m) for m in widths))
    if len(widths) < 2:
        raise UserInputError(f"widths {widths}: give at least two widths to see a trend, e.g. 16 32 64")
    if steps < 1 or seeds < 1:
        raise UserInputError("steps and seeds must be positive integers")
    if not (math.isfinite(lr) and lr > 0):
        raise UserInputError(f"lr {lr}: must be a positive number, e.g. 1e-3")
    batch = grid_point_batch() if batch is None else batch
    probes = [Probe(p, p) if isinstance(p, str) else p for p in probes]
    if len({p.name for p in probes}) < len(probes) or any(p.name == "output" for p in probes):
        raise UserInputError("probe names must be distinct and not 'output'")
    runs = [[_one_run(build, m, seed, batch, probes, lr, steps) for m in widths] for seed in range(seeds)]
    result = WidthCheckResult(lr=lr, steps=steps, seeds=seeds, tolerance=tolerance)
    for name in ["output", *(p.name for p in probes)]:
        values = [[run[name][0] for run in per_seed] for per_seed in runs]
        relative = [[_relative(*run[name]) for run in per_seed] for per_seed in runs]
        result.curves.append(WidthCurve(name, widths, values, relative, tolerance))
    return result
