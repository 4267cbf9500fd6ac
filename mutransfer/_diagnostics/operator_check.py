"""The conformance kit of a user's operator factory (``mutransfer check-operator``, docs/byo.md).

Given a factory ``build(*, K, width, in_channels, out_channels, **options)`` (operators.factory), it checks, on a
small grid problem's data (Burgers in 1-D, Darcy in 2-D, Navier-Stokes in space-time in 3-D: w0 broadcast along
16 times of w(x, y, t) on 32², generated here, a few seconds):

1. **builds**: the factory returns an ``nn.Module`` at the base, the largest K and the largest width;
2. **roles**: the muP facts of the largest model against the base (operators.base_shapes), printed one row per
   parameter; a parameter whose role the shapes cannot tell fails here with its fix;
3. **count**: the parameters the planner counts without memory (the meta device) equal the built model's;
4. **round trip**: the weights saved as mutransfer saves a target (tensors only, ``weights_only`` loading) load
   into a fresh build, which then gives the same output;
5. **coordinate checks**, over the width and over K: the RMS change, after one Adam step at a fixed LR, of the
   outputs of the layers that hold the hidden weights (over the width) and the spectral weights (over K; divided
   by the K rule's c(K)/c(K0), so that it is flat when the rule reaches those layers as declared, and on the input
   with its modes from K0 up removed, so that the larger K adds no data: :func:`below_modes`), per seed against
   the size; the log-log slope's mean and 95 % t-interval over seeds give the verdict (flat / grows / shrinks /
   unresolved, tolerance τ on the slope; mutransfer._diagnostics.coord_check). Under the muP facts (``mup.Adam``)
   both curves must be **flat**. Two controls on the same model must **grow**: the multipliers switched off
   (torch's Adam, the author's init: standard parametrization) over the width, and a deliberately wrong K rule
   (spectral LR × (K/K0)²) over K. A control that does not grow means the check cannot see the rule on this model
   at these sizes, and the kit fails.

Over K the check verifies the wiring (the rule reaches the spectral layers), not that the rule is the right one:
at these sizes one step does not separate the paper's rule from none (docs/mup.md, measured).

The kit passes when 1–4 hold, both muP curves are flat and both controls are not.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from mutransfer._diagnostics.coord_check import FLAT, GROWS, classify_curve
from mutransfer._problems import get_problem
from mutransfer._training.checkpoint import weights_of
from mutransfer.errors import UserInputError
from operators.base_shapes import set_base_shapes, shape_of
from operators.errors import OperatorConfigError
from operators.factory import call, count_parameters
from operators.mu_adam import describe, param_groups
from operators.parametrization import clamp_gradients

#: the problems the kit generates, by dimension: (problem, generated resolution, stride to the grid used)
PROBLEMS = {1: ("burgers", 1024, 16), 2: ("darcy", 33, 1), 3: ("navier_stokes", 32, 1)}
#: 3-D (Navier-Stokes in space-time): the input w0 broadcast along time, the output's 64 times strided by this
TIME_STRIDE = 4
#: the values of K the check spans, by dimension (2K must fit the grid: 64 points in 1-D, 33² in 2-D, 32² × 16 in 3-D)
MODES = {1: (4, 8, 16), 2: (4, 8, 16), 3: (4, 6, 8)}
#: the slope tolerance τ of a flat curve (log-log, over the size)
TOLERANCE = 0.35
#: the deliberately wrong K rule: the spectral LR × (K/K0) ** WRONG_POWER instead of c(K)/c(K0)
WRONG_POWER = 2.0


@dataclass(frozen=True)
class Curve:
    """One coordinate check: the output's RMS change (mean over seeds) per size, and its verdict."""

    axis: str
    rule: str
    layers: str
    sizes: tuple[int, ...]
    moves: tuple[float, ...]
    verdict: str
    slope: float | None
    low: float | None
    high: float | None
    #: the layers whose update grows fastest with the size, (module name, log-log slope of its mean over seeds),
    #: steepest first: where to look when the curve is not flat
    fastest: tuple[tuple[str, float], ...] = ()

    def describe(self) -> str:
        shown = ", ".join(f"{s}: {m:.3g}" for s, m in zip(self.sizes, self.moves, strict=True))
        ci = "" if self.slope is None else f", slope {self.slope:+.2f} [{self.low:+.2f}, {self.high:+.2f}]"
        return f"{self.axis:5s} {self.rule:6s} {self.layers:8s} {self.verdict:10s} ({shown}{ci})"


@dataclass(frozen=True)
class OperatorCheck:
    """What :func:`check_operator` found (module docstring)."""

    factory: str
    model_class: str
    problem: str
    roles: str
    planned_params: int
    built_params: int
    round_trip_error: float
    curves: tuple[Curve, ...]

    @property
    def failures(self) -> list[str]:
        """What did not hold, one line each ([] when the kit passes)."""
        found = []
        if self.planned_params != self.built_params:
            found.append(f"the planner counts {self.planned_params} parameters, the model has {self.built_params}")
        if self.round_trip_error != 0.0:
            found.append(f"a saved and reloaded model's output differs by {self.round_trip_error:.3g}")
        for c in self.curves:
            if c.rule == "mup" and c.verdict != FLAT:
                steepest = ", ".join(f"{name} ({slope:+.2f})" for name, slope in c.fastest)
                where = f"; steepest layers: {steepest}" if steepest else ""
                how = "grows" if c.verdict == GROWS else f"is not flat (verdict: {c.verdict})"
                found.append(f"under the muP facts the update {how} with {c.axis} ({c.describe()}){where}")
        for axis, rule, what in (("width", "off", "the multipliers off"), ("K", "wrong", "a wrong K rule")):
            control = next((c for c in self.curves if c.axis == axis and c.rule == rule), None)
            if control is not None and control.verdict != GROWS:
                found.append(
                    f"with {what} the update {control.verdict} in {axis}, not grows: this check cannot see the rule"
                )
        return found

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, object]:
        return {
            "factory": self.factory,
            "model_class": self.model_class,
            "problem": self.problem,
            "planned_params": self.planned_params,
            "built_params": self.built_params,
            "round_trip_error": self.round_trip_error,
            "roles": self.roles.splitlines(),  # mup.describe's table: a row per parameter, then the attentions
            "curves": [c.__dict__ for c in self.curves],
            "failures": self.failures,
            "passed": self.passed,
        }

    def to_text(self) -> str:
        lines = [
            f"check-operator {self.factory} ({self.model_class}) on {self.problem}",
            self.roles,
            f"parameters: planned {self.planned_params}, built {self.built_params}",
            f"save/load round trip: output differs by {self.round_trip_error:.3g}",
            "coordinate checks (RMS change of the layers' outputs after one Adam step, by size):",
            *(f"  {c.describe()}" for c in self.curves),
        ]
        if not any(c.axis == "K" for c in self.curves):
            lines.append("  K: no parameter grows with K (a width-only operator): no K curves")
        lines += ["verdict: PASS"] if self.passed else ["verdict: FAIL", *(f"  - {f}" for f in self.failures)]
        return "\n".join(lines)


def _data(dim: int, samples: int) -> tuple[str, torch.Tensor, torch.Tensor]:
    """A small batch of the dimension's problem: (name, x, y), channel-last (B, *grid, 1), float32."""
    if dim not in PROBLEMS:
        raise UserInputError(
            f"--dim {dim}: check-operator has data for 1-D (burgers), 2-D (darcy) and 3-D (navier_stokes) models"
        )
    name, resolution, stride = PROBLEMS[dim]
    raw = get_problem(name).generator(samples, resolution, seed=0, progress=False)
    space = (slice(None),) + (slice(None, None, stride),) * min(dim, 2)
    x = torch.as_tensor(raw["input"][space], dtype=torch.float32)[..., None]
    if dim == 3:  # space-time: w0 -> w(x, y, t), w0 broadcast along the (strided) time axis
        y = torch.as_tensor(raw["output"][space + (slice(None, None, TIME_STRIDE),)], dtype=torch.float32)[..., None]
        x = x.unsqueeze(3).expand(-1, -1, -1, y.shape[3], -1).contiguous()
    else:
        y = torch.as_tensor(raw["output"][space], dtype=torch.float32)[..., None]
    return name, x, y


def below_modes(x: torch.Tensor, modes: int) -> torch.Tensor:
    """``x`` (B, *grid, C), channel-last, with every Fourier mode of |k| >= ``modes`` along any grid axis removed.

    The K curves run on it, ``modes`` the base's K: every model of the curve then sees the same input energy, so
    the curve measures how the rule reaches the spectral layers, not how much of the data's spectrum the larger
    K adds. Measured on Navier-Stokes in 3-D, the project's FNO, 8 seeds: K slope +0.21 [+0.17, +0.25] on the raw
    input, +0.01 [+0.01, +0.01] on this one (docs/byo.md, ``benchmarks/check_operator_table.py``)."""
    grid = tuple(range(1, x.dim() - 1))
    spectrum = torch.fft.rfftn(x, dim=grid)
    for axis in grid:
        n = x.shape[axis]
        k = torch.fft.rfftfreq(n, 1.0 / n) if axis == grid[-1] else torch.fft.fftfreq(n, 1.0 / n).abs()
        keep = (k < modes).to(spectrum.dtype).view(*(-1 if a == axis else 1 for a in range(spectrum.dim())))
        spectrum = spectrum * keep
    return torch.fft.irfftn(spectrum, s=tuple(x.shape[a] for a in grid), dim=grid).contiguous()


def _config(
    K: int, width: int, options: dict[str, object], in_channels: int = 1, out_channels: int = 1
) -> dict[str, object]:
    return {"K": K, "width": width, "in_channels": in_channels, "out_channels": out_channels, "options": options}


def _rms(t: torch.Tensor) -> float:
    return float(t.detach().double().pow(2).mean().sqrt())


def watched_layers(model: nn.Module, probe: torch.Tensor | None = None) -> dict[str, str]:
    """The layers whose outputs the coordinate checks measure: module name → "hidden" or "spectral", for the
    nearest module that runs in ``forward`` above each parameter with that role (its muP facts must be set).

    ``probe``: a batch the forward pass runs on to find them (default: zeros on a 64-point grid, one channel)."""
    fired: set[str] = set()
    names = {module: name for name, module in model.named_modules()}
    hooks = [m.register_forward_hook(lambda m, i, o: fired.add(names[m])) for m in model.modules()]
    was_training = model.training
    try:
        if probe is None:
            device = next(iter(model.parameters())).device
            probe = torch.zeros(1, *_PROBE_GRID[: _probe_dim(model)], 1, device=device)
        model.eval()  # a one-sample probe: no batch statistics
        with torch.no_grad():
            model(probe)
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    watched: dict[str, str] = {}
    for name, p in model.named_parameters():
        fact = shape_of(p)
        if fact is None or fact.role not in ("hidden", "spectral"):
            continue
        owner = name.rpartition(".")[0]
        while owner and owner not in fired:
            owner = owner.rpartition(".")[0]
        if owner and watched.get(owner) != "spectral":
            watched[owner] = fact.role
    return watched


def _move(
    build: Callable[[int, int], nn.Module],
    size: tuple[int, int],
    base: tuple[int, int],
    rule: str,
    seed: int,
    data: tuple[torch.Tensor, torch.Tensor],
    watched: dict[str, str],
    lr: float,
    k_exponent: float = 1.0,
    spectral: Spectral | None = None,
) -> dict[str, tuple[float, float]]:
    """Per role ("hidden", "spectral", "output"): (RMS change of the layers' outputs, geometric mean over the
    layers; the same relative to their size) after one Adam step at ``lr`` under ``rule``; and per watched layer,
    under ``f"{LAYER}{role} {name}"``: (its RMS change, its size). ``spectral``: the training's init scale and gradient
    clipping of the spectral weights."""
    K, width = size
    torch.manual_seed(seed)
    model = build(K, width)
    spectral = spectral or Spectral()
    if rule == "off":
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        with torch.random.fork_rng():
            reference = build(*base)
            delta = build(base[0], width) if K != base[0] and width != base[1] else None
        set_base_shapes(model, reference, delta=delta, k_exponent=k_exponent)
        groups = param_groups(model.parameters(), lr)
        if rule == "wrong":
            for g in groups:
                if g["mutransfer_role"] == "spectral":
                    g["lr"] = float(g["lr"]) * (K / base[0]) ** WRONG_POWER  # type: ignore[arg-type]  # a float
        optimizer = torch.optim.Adam(groups, lr=lr)  # type: ignore[arg-type]  # dicts of params and floats
    held = [p for n, p in model.named_parameters() if n in spectral.names]
    with torch.no_grad():
        for p in held:
            p.mul_(spectral.init_scale)
    x, y = data
    modules = dict(model.named_modules())
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        modules[name].register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o.detach()))
        for name in watched
        if name in modules
    ]
    try:
        with torch.no_grad():
            seen["output"] = model(x)
        before = dict(seen)
        pred = model(x)
        ((pred - y).flatten(1).norm(dim=1) / y.flatten(1).norm(dim=1)).mean().backward()
        clamp_gradients(held, spectral.clip_value)
        optimizer.step()
        with torch.no_grad():
            seen["output"] = model(x)
    finally:
        for h in hooks:
            h.remove()
    factors = [f.k_factor for f in map(shape_of, model.parameters()) if f is not None and f.role == "spectral"]
    found: dict[str, tuple[float, float]] = {"k_rule": (_geomean(factors) if factors else 1.0, 1.0)}
    for role in ("hidden", "spectral", "output"):
        layers = [n for n in before if (watched.get(n) if n != "output" else "output") == role]
        if not layers:
            continue
        moves = [max(_rms(seen[n] - before[n]), 1e-30) for n in layers]
        sizes = [max(_rms(before[n]), 1e-30) for n in layers]
        found[role] = (_geomean(moves), _geomean([m / s for m, s in zip(moves, sizes, strict=True)]))
        found.update({f"{LAYER}{role} {n}": (m, s) for n, m, s in zip(layers, moves, sizes, strict=True)})
    return found


#: the prefix of a single layer's entry in what :func:`_move` returns
LAYER = "layer "
#: how many of the steepest layers a curve names
STEEPEST = 3


@dataclass(frozen=True)
class Spectral:
    """What a training does to the spectral weights besides the K rule (the study's ``init_scale`` and
    ``clip_value``), and which parameters those are (``names``: the largest model's, by name)."""

    names: frozenset[str] = frozenset()
    init_scale: float = 1.0
    clip_value: float | None = None


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


#: the grid of the probe forward pass that finds which layers run (its sizes only matter for K ≤ N/2)
_PROBE_GRID = (64, 64, 64)


def _probe_dim(model: nn.Module) -> int:
    return int(getattr(model, "_mutransfer_probe_dim", 1))


def _curve(
    axis: str,
    rule: str,
    role: str,
    sizes: list[tuple[int, int]],
    run: Callable[..., dict[str, tuple[float, float]]],
    seeds: int,
) -> Curve:
    scales = [s[1] if axis == "width" else s[0] for s in sizes]
    values = [[run(size, rule, seed) for size in sizes] for seed in range(seeds)]
    role = role if all(role in v for seed in values for v in seed) else "output"
    # over K, the update relative to what the muP K rule asks, c(K)/c(K0): flat when the rule reaches the layers
    rule_of = (lambda v: v["k_rule"][0]) if axis == "K" else (lambda v: 1.0)
    moves = [[v[role][0] / rule_of(v) for v in seed] for seed in values]
    relative = [[v[role][1] for v in seed] for seed in values]
    _, verdict, est = classify_curve(scales, moves, relative, TOLERANCE)
    mean = tuple(sum(m[i] for m in moves) / seeds for i in range(len(sizes)))
    prefix = f"{LAYER}{role} "  # the curve's own layers
    watched = [k for k in values[0][0] if k.startswith(prefix) and all(k in v for seed in values for v in seed)]
    layers = {k: [sum(v[k][0] / rule_of(v) for v in (seed[i] for seed in values)) / seeds for i in range(len(sizes))]
              for k in watched}  # fmt: skip
    span = math.log(scales[-1] / scales[0]) if scales[-1] != scales[0] else 1.0
    slopes = sorted(((k[len(prefix) :], math.log(m[-1] / m[0]) / span) for k, m in layers.items()), key=lambda t: -t[1])
    return Curve(
        axis,
        rule,
        role,
        tuple(scales),
        mean,
        verdict,
        None if est is None else est.mean,
        None if est is None or not math.isfinite(est.lo) else est.lo,
        None if est is None or not math.isfinite(est.hi) else est.hi,
        tuple((name, round(slope, 3)) for name, slope in slopes[:STEEPEST]),
    )


def check_operator(
    factory: Callable[..., nn.Module],
    *,
    name: str = "",
    dim: int = 1,
    options: dict[str, object] | None = None,
    modes: tuple[int, ...] | None = None,
    widths: tuple[int, ...] = (16, 32, 64),
    seeds: int = 8,
    lr: float = 1e-3,
    samples: int = 8,
    low_pass: bool = True,
) -> OperatorCheck:
    """Run the kit (module docstring) on ``factory``; the base is (``modes[0]``, ``widths[0]``), ``modes`` by default
    :data:`MODES` of ``dim``. ``low_pass=False`` runs the K curves on the raw input (:func:`below_modes` says why
    they do not by default; ``benchmarks/check_operator_table.py --raw-k-input`` measures the difference).

    Returns:
        an :class:`OperatorCheck`: ``.passed``, ``.failures``, ``.to_text()``, ``.as_dict()``.
    Raises:
        OperatorConfigError: the factory fails, returns no module, or a role cannot be read (one line).
        UserInputError: no data for ``dim``.
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 2:
        raise UserInputError(f"seeds {seeds!r} (--seeds): give 2 or more (a slope's interval needs two; 8 by default)")
    label = name or getattr(factory, "__qualname__", "factory")
    options = dict(options or {})
    problem, x, y = _data(dim, samples)
    try:
        return _check(factory, label, options, dim, problem, x, y, modes or MODES[dim], widths, seeds, lr, low_pass)
    except RuntimeError as exc:  # the model's own forward or load failed: one line, not a traceback
        raise OperatorConfigError(
            f"{label}: the model failed on a {dim}-D batch of shape {tuple(x.shape)} (B, *grid, C), "
            f"--dim {dim}: {' '.join(str(exc).split())[:300]}"
        ) from None


def _check(
    factory: Callable[..., nn.Module],
    label: str,
    options: dict[str, object],
    dim: int,
    problem: str,
    x: torch.Tensor,
    y: torch.Tensor,
    modes: tuple[int, ...],
    widths: tuple[int, ...],
    seeds: int,
    lr: float,
    low_pass: bool = True,
) -> OperatorCheck:
    def build(K: int, width: int) -> nn.Module:
        return call(factory, label, _config(K, width, options))

    base = (modes[0], widths[0])

    def largest_with_facts() -> nn.Module:
        model = build(modes[-1], widths[-1])
        with torch.random.fork_rng():
            set_base_shapes(model, build(*base), delta=build(base[0], widths[-1]))
        return model

    largest = largest_with_facts()
    has_k = any(f is not None and f.k_dims for f in map(shape_of, largest.parameters()))
    planned = count_parameters(factory, label, _config(modes[-1], widths[-1], options))
    built = sum(p.numel() for p in largest.parameters())
    buffer = io.BytesIO()
    torch.save(weights_of(largest), buffer)
    buffer.seek(0)
    fresh = largest_with_facts()  # rebuilt as the product rebuilds a trained model (operators.factory)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    largest.eval(), fresh.eval()  # dropout and the like off: the same weights give the same output
    with torch.no_grad():
        error = float((fresh(x) - largest(x)).abs().max())
    largest._mutransfer_probe_dim = dim  # type: ignore[assignment]  # read by watched_layers' probe
    watched = watched_layers(largest)

    def run(size: tuple[int, int], rule: str, seed: int) -> dict[str, tuple[float, float]]:
        return _move(build, size, base, rule, seed, (x, y), watched, lr)

    x_low = below_modes(x, modes[0]) if low_pass else x

    def run_low(size: tuple[int, int], rule: str, seed: int) -> dict[str, tuple[float, float]]:
        return _move(build, size, base, rule, seed, (x_low, y), watched, lr)

    by_width = [(base[0], w) for w in widths]
    by_k = [(k, base[1]) for k in modes]
    curves: tuple[Curve, ...] = (
        _curve("width", "mup", "hidden", by_width, run, seeds),
        _curve("width", "off", "hidden", by_width, run, seeds),
    )
    if has_k:  # a width-only operator (no parameter grows with K) has no K curves
        curves += (
            _curve("K", "mup", "spectral", by_k, run_low, seeds),
            _curve("K", "wrong", "spectral", by_k, run_low, seeds),
        )
    return OperatorCheck(label, type(largest).__name__, problem, describe(largest), planned, built, error, curves)
