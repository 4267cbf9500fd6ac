"""The K rule's exponent, estimated from the user's data (issue "Verdicts you can trust", item 5; beyond the paper).

Under Adam every entry of a spectral weight moves by about the same step, so the change of a Fourier layer's
output after a step is about lr·c(K)·√E(K), where E(K) is the energy its input carries in the modes the layer
keeps. The paper's c(K) = 1/√(d·log K) holds that change fixed when E(K) grows like log K, the scale-invariant
spectrum. This module measures how E grows on the user's data instead, between the study's two K:

    ρ = ln(E(K_hi) / E(K_lo)) / ln(ln K_hi / ln K_lo),

so that the rule (d·log K)^(−ρ/2) (operators.parametrization.data_aware_scale) holds c(K)·√E(K) fixed between
them: ρ = 1 on a scale-invariant spectrum (the paper's rule), ρ → 0 on data whose added modes carry no energy
(smooth data: no K correction), ρ > 1 where the added modes carry more (white noise: E ∝ K^d).

E is read where the rule acts: at the input of every Fourier layer of a model (hooks on its SpectralConv
modules, one forward pass of a batch of training inputs, no gradient), as the mean over samples and channels
of |û|² summed over the kept modes (the 2^(d−1) corners of :class:`operators.spectral.SpectralConv`: |k_i| < K
on every non-last axis, 0 ≤ k_d < K on the last, rfft's k_d > 0 counted twice as Parseval does). The mean
mode is kept by every K, so data dominated by their mean measure ρ near 0. ρ is the mean of the layers' own
exponents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from mutransfer._study import Study
from mutransfer._study.k_exponent import K_EXPONENT_FROM_DATA
from mutransfer._study.models import model_for
from operators.base_shapes import shape_of
from operators.errors import OperatorConfigError
from operators.parametrization import spectral_modules


def kept_mode_energy(h: torch.Tensor, modes: int, dim: int) -> float:
    """The mean (over batch and channels) energy of ``h`` (B, C, N_1, …, N_d) in the modes a K-mode layer keeps.

    With the forward-normalized FFT, a constant field of value a has energy a²; Parseval: summed over every mode,
    the energy is the mean of h² over the grid.
    """
    if h.dim() != dim + 2:
        raise ValueError(f"features of shape {tuple(h.shape)}: expected (B, C) + {dim} grid axes")
    spatial = tuple(range(2, 2 + dim))
    power = torch.fft.rfftn(h.to(torch.float64), dim=spatial, norm="forward").abs().square().mean(dim=(0, 1))
    n_last = h.shape[-1]
    weight = torch.full((power.shape[-1],), 2.0, dtype=power.dtype)
    weight[0] = 1.0
    if n_last % 2 == 0:
        weight[-1] = 1.0  # the Nyquist mode has no mirror
    power = power * weight
    block = power[..., :modes]
    for axis in range(dim - 1):
        n = block.shape[axis]
        if 2 * modes > n:
            raise ValueError(f"K = {modes} needs 2K <= N on every non-last axis, axis {axis} has N = {n}")
        keep = list(range(modes)) + list(range(n - modes, n))
        block = block.index_select(axis, torch.tensor(keep))
    return float(block.sum())


def exponent_between(e_lo: float, e_hi: float, k_lo: int, k_hi: int) -> float:
    """ρ = ln(E(K_hi)/E(K_lo)) / ln(ln K_hi / ln K_lo): the exponent of (d·log K)^(−ρ/2) that keeps c(K)·√E(K)
    equal at K_lo and K_hi (needs 2 ≤ K_lo < K_hi and positive energies)."""
    if not (2 <= k_lo < k_hi):
        raise ValueError(f"K {k_lo} -> {k_hi}: the exponent needs 2 <= K_lo < K_hi")
    if not (e_lo > 0 and e_hi > 0 and math.isfinite(e_lo) and math.isfinite(e_hi)):
        raise ValueError(f"energies {e_lo}, {e_hi}: must be positive and finite (the features are all zero?)")
    return math.log(e_hi / e_lo) / math.log(math.log(k_hi) / math.log(k_lo))


@dataclass(frozen=True)
class KExponentEstimate:
    """ρ measured between K_lo and K_hi on a model's Fourier-layer inputs; ``layer_exponents`` one per layer."""

    exponent: float
    modes: tuple[int, int]
    layer_exponents: tuple[float, ...]
    samples: int

    def as_dict(self) -> dict[str, object]:
        return {
            "exponent": self.exponent,
            "modes": list(self.modes),
            "layer_exponents": list(self.layer_exponents),
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, d: dict) -> KExponentEstimate:
        lo, hi = d["modes"]
        return cls(
            float(d["exponent"]), (int(lo), int(hi)), tuple(float(v) for v in d["layer_exponents"]), int(d["samples"])
        )

    def describe(self) -> str:
        lo, hi = self.modes
        layers = ", ".join(f"{v:.2f}" for v in self.layer_exponents)
        return (
            f"K rule exponent rho = {self.exponent:.2f} from the data (K {lo} -> {hi}, {self.samples} training samples; "
            f"per Fourier layer {layers}; the paper's rule is rho = 1)"
        )


def fourier_layer_inputs(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The input of every spectral layer of ``model`` (in call order) for one forward pass of ``x``, no gradient.

    The spectral layers are the modules of the spectral-layer protocol (operators.parametrization), else, on a
    user's model, the nearest module that runs in ``forward`` above each parameter whose muP facts say spectral
    (operators.base_shapes); their first argument must be a tensor laid out (B, C, *grid) on the grid of ``x``
    (B, *grid, C).

    Raises:
        OperatorConfigError (a ValueError): no spectral layer, or a user's spectral layer whose input cannot be read
        as (B, C, *grid) (one line naming it and the fix).
    """
    protocol: list[nn.Module] = [m for m in spectral_modules(model) if isinstance(m, nn.Module)]
    names = {m: name for name, m in model.named_modules()}
    facts = [name for name, p in model.named_parameters() if (f := shape_of(p)) is not None and f.role == "spectral"]
    if protocol:
        candidates = protocol
    else:  # a user's model: every module above a spectral parameter, the root included; which ran, the pass says
        above = {""} | {name.rsplit(".", i)[0] for name in facts for i in range(1, name.count(".") + 1)}
        candidates = [m for m in model.modules() if names[m] in above]
    ran: list[str] = []
    inputs: dict[str, object] = {}

    def keep(module: nn.Module, args: tuple, _out: object) -> None:
        name = names[module]
        if name not in inputs:
            ran.append(name)
            inputs[name] = args[0].detach().clone() if args and isinstance(args[0], torch.Tensor) else None
        return None

    handles = [m.register_forward_hook(keep) for m in candidates]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(x)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    if protocol:
        if not ran:
            raise ValueError(f"{type(model).__name__} has no Fourier layer: the K rule does not apply")
        return [h for h in (inputs[n] for n in ran) if isinstance(h, torch.Tensor)]
    return _spectral_owner_inputs(type(model).__name__, facts, ran, inputs, tuple(x.shape[1:-1]))


def _spectral_owner_inputs(
    model_class: str, facts: list[str], ran: list[str], inputs: dict[str, object], grid: tuple[int, ...]
) -> list[torch.Tensor]:
    """Of the modules that ran (``ran``, in call order), the nearest above each spectral parameter (``facts``); their
    inputs, checked to be (B, C, *grid) tensors."""
    if not facts:
        raise OperatorConfigError(
            f"{model_class} has no Fourier layer and no parameter whose muP facts say spectral: operator.k_exponent "
            "'data' has no layer to read; give operator.k_exponent a number (1 is the paper's rule)"
        )
    owners: set[str] = set()
    for name in facts:
        owner = name.rpartition(".")[0]
        while owner and owner not in inputs:
            owner = owner.rpartition(".")[0]
        owners.add(owner)  # "" is the model itself
    found: list[torch.Tensor] = []
    for name in (n for n in ran if n in owners):
        h = inputs[name]
        shown = f"{model_class}.{name}" if name else model_class
        if not isinstance(h, torch.Tensor) or h.dim() != len(grid) + 2 or tuple(h.shape[2:]) != grid:
            got = f"shape {tuple(h.shape)}" if isinstance(h, torch.Tensor) else f"a {type(h).__name__} first argument"
            raise OperatorConfigError(
                f"operator.k_exponent 'data' reads the input of {shown}, which holds spectral weights, as a "
                f"(B, C, *grid) tensor with grid {grid}; it takes {got}: give operator.k_exponent a number instead "
                "(1 is the paper's rule)"
            )
        found.append(h)
    return found


def estimate_k_exponent(model: nn.Module, x: torch.Tensor, k_lo: int, k_hi: int) -> KExponentEstimate:
    """ρ between ``k_lo`` and ``k_hi`` from the Fourier-layer inputs of ``model`` on training inputs ``x``
    (B, N_1, …, N_d, C), the model's own input layout."""
    features = fourier_layer_inputs(model, x)
    exponents = []
    for h in features:
        dim = h.dim() - 2
        exponents.append(
            exponent_between(kept_mode_energy(h, k_lo, dim), kept_mode_energy(h, k_hi, dim), int(k_lo), int(k_hi))
        )
    return KExponentEstimate(
        exponent=sum(exponents) / len(exponents),
        modes=(int(k_lo), int(k_hi)),
        layer_exponents=tuple(exponents),
        samples=int(x.shape[0]),
    )


#: training samples whose Fourier-layer inputs estimate the K rule's exponent (one forward pass of the proxy)
K_EXPONENT_SAMPLES = 64


def resolve_k_exponent(study: Study, data, stored: dict | None = None) -> KExponentEstimate | None:
    """When ``operator.k_exponent`` is 'data', the K rule's exponent for ``study`` (set on it; None otherwise).

    ``stored``: the estimate a study folder kept (``KExponentEstimate.as_dict``), taken as it is so a resumed
    study builds the models it started with; else it is measured now (mutransfer._diagnostics.k_exponent) on the
    first K_EXPONENT_SAMPLES training inputs of ``data`` (the fit samples: a selection split holds no test rows),
    through the proxy at its own K, between the proxy's and the target's K.
    """
    if study.operator.k_exponent != K_EXPONENT_FROM_DATA:
        return None
    if stored:
        estimate = KExponentEstimate.from_dict(stored)
    else:
        k_lo, k_hi = study.proxy_modes, study.target_modes
        if k_lo is None or k_hi is None:  # the study reader refuses 'data' without a K axis or with equal K
            raise ValueError(f"operator.k_exponent 'data' needs the K axis, the study has K {k_lo} -> {k_hi}")
        x = data.train_x[:K_EXPONENT_SAMPLES]
        probe = study.sized()  # the proxy as the paper builds it (the exponent is what is being measured)
        with torch.random.fork_rng():
            torch.manual_seed(int(study.training.seed))
            model = model_for(probe, data)
        estimate = estimate_k_exponent(model, torch.as_tensor(x), k_lo, k_hi)
    study.k_exponent_estimate = estimate.exponent
    return estimate
