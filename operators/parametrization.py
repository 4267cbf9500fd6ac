"""abc-parametrization of the FNO spectral weights: standard (SP) and muP.

One pure function per scaling rule (Li, Yoo & Yang 2025, Definition 3.1 and
Theorem 3.5). With R = a(K)·r, r ~ N(0, b(K)²) entry-wise and Adam LR c(K)·η0:

- ``standard``: a = 1, b = Θ(1), c = 1.
- ``mup``:      a = 1, b(K) = c(K) = 1/√(d·log K).

Only the spectral weights R are touched; pointwise, lifting and projection
weights and all biases keep their usual init and the master LR η0.

The operator side also provides what any trainer needs to get muP right by
construction: :func:`optimizer_param_groups` (spectral weights at c(K)·η0, and
any parameter a module declares through ``mutransfer_lr_multipliers()`` at its
own multiplier — how width-muP, :mod:`operators.width_mup`, plugs in) and
:func:`clip_spectral_gradients` (element-wise clipping, Assumption 3.4).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol, cast

import torch
from torch import nn

from operators.errors import OperatorConfigError

PARAMETRIZATIONS = ("standard", "mup")


def check_parametrization(parametrization: str) -> str:
    """Return ``parametrization`` if it is known, else raise a one-line error."""
    if parametrization not in PARAMETRIZATIONS:
        raise OperatorConfigError(
            f"parametrization {parametrization!r} is unknown; use one of: {', '.join(PARAMETRIZATIONS)}"
        )
    return parametrization


#: the numbers of truncated dimensions operators.fno.FNO supports
FNO_DIMS = (1, 2, 3)


def check_modes(modes: int | None, dim: int, parametrization: str) -> None:
    """Validate K and d for a parametrization (muP needs K ≥ 2: log 1 = 0)."""
    check_parametrization(parametrization)
    if isinstance(dim, bool) or dim not in FNO_DIMS:
        raise OperatorConfigError(f"dim {dim!r}: the FNO truncates 1, 2 or 3 dimensions; use --dim 1, 2 or 3")
    if not isinstance(modes, int) or modes < 1:
        raise OperatorConfigError(f"modes {modes!r}: the number of Fourier modes K must be a positive integer")
    if parametrization == "mup" and modes < 2:
        raise OperatorConfigError(
            f"modes {modes}: muP scales by 1/sqrt(d*log K), undefined at K = 1; use K >= 2 or --parametrization standard"
        )


def mup_scale(modes: int, dim: int) -> float:
    """The muP factor 1/√(d·log K) shared by b(K) and c(K). Needs K ≥ 2."""
    check_modes(modes, dim, "mup")
    return 1.0 / math.sqrt(dim * math.log(modes))


#: the largest K-rule exponent a model accepts (white noise in 3D over K 2 → 64 measures about 6)
MAX_K_EXPONENT = 8.0


def check_k_exponent(k_exponent: float) -> float:
    """Return ``k_exponent`` as a float if it is a finite number in [0, MAX_K_EXPONENT], else a one-line error."""
    if isinstance(k_exponent, bool) or not isinstance(k_exponent, (int, float)):
        raise OperatorConfigError(f"k_exponent {k_exponent!r}: must be a number (1 is the paper's muP rule)")
    if not (math.isfinite(k_exponent) and 0.0 <= k_exponent <= MAX_K_EXPONENT):
        raise OperatorConfigError(
            f"k_exponent {k_exponent}: must be in [0, {MAX_K_EXPONENT:g}] (1 is the paper's muP rule, 0 no K correction)"
        )
    return float(k_exponent)


def data_aware_scale(modes: int, dim: int, k_exponent: float) -> float:
    """The K rule with exponent ρ: (d·log K)^(−ρ/2), shared by b(K) and c(K) (beyond the paper).

    ρ = 1 is :func:`mup_scale` (the paper, exact for a scale-invariant spectrum, whose energy in the kept
    modes grows like log K); ρ = 0 keeps no K correction (data whose energy the added modes do not carry);
    ρ = 2 corrects twice as much (in log). mutransfer estimates ρ from the energy the kept modes of the
    user's data carry (mutransfer._diagnostics.k_exponent). Needs K ≥ 2.
    """
    check_modes(modes, dim, "mup")
    return float((dim * math.log(modes)) ** (-0.5 * check_k_exponent(k_exponent)))


def spectral_init_multiplier(modes: int, dim: int, parametrization: str, k_exponent: float = 1.0) -> float:
    """b(K) relative to the base init std: (d·log K)^(−ρ/2) under muP (ρ = ``k_exponent``; 1: the paper's
    1/√(d·log K)), 1 under SP."""
    check_modes(modes, dim, parametrization)
    return data_aware_scale(modes, dim, k_exponent) if parametrization == "mup" else 1.0


def spectral_lr_multiplier(modes: int, dim: int, parametrization: str, k_exponent: float = 1.0) -> float:
    """c(K): the spectral weights' Adam LR is c(K)·η0; (d·log K)^(−ρ/2) under muP (ρ = ``k_exponent``; 1: the
    paper's 1/√(d·log K)), 1 under SP."""
    check_modes(modes, dim, parametrization)
    return data_aware_scale(modes, dim, k_exponent) if parametrization == "mup" else 1.0


def transfer_lr_factor(proxy_modes: int, target_modes: int) -> float:
    """Algorithm 1, line 4: spectral LR at K* = LR at K_proxy × √(log K_proxy / log K*)."""
    _check_transfer_modes(proxy_modes, target_modes)
    return math.sqrt(math.log(proxy_modes) / math.log(target_modes))


def transfer_init_variance_factor(proxy_modes: int, target_modes: int) -> float:
    """Algorithm 1, line 5: spectral init variance at K* = variance at K_proxy × log K_proxy / log K*."""
    _check_transfer_modes(proxy_modes, target_modes)
    return math.log(proxy_modes) / math.log(target_modes)


def _check_transfer_modes(proxy_modes: int, target_modes: int) -> None:
    for name, k in (("proxy modes", proxy_modes), ("target modes", target_modes)):
        if not isinstance(k, int) or k < 2:
            raise OperatorConfigError(f"{name} {k!r}: muTransfer rescales by log K, so K must be an integer >= 2")


def base_spectral_init_std(in_channels: int, out_channels: int, parametrization: str) -> float:
    """Base std (before b(K)) of the real and imaginary parts of each spectral entry.

    SP follows the original FNO code: scale·U[0,1) with scale = 1/(m_in·m_out),
    whose std is scale/√12. muP draws N(0, σ²) with σ = 1/m_in before the
    1/√(d·log K) factor, so each output mode sums m_in terms of size O(1/√m_in).
    """
    check_parametrization(parametrization)
    if parametrization == "standard":
        return 1.0 / (in_channels * out_channels * math.sqrt(12.0))
    return 1.0 / in_channels


def init_spectral_weight_(
    weight: torch.Tensor,
    *,
    modes: int,
    dim: int,
    parametrization: str,
    init_scale: float = 1.0,
    k_exponent: float = 1.0,
) -> torch.Tensor:
    """Initialise a complex spectral weight (m_in, m_out, K, …, K) in place.

    SP: real and imaginary parts ~ init_scale · U[0,1) / (m_in·m_out).
    muP: real and imaginary parts ~ N(0, σ²), σ = init_scale · (1/m_in) · (d·log K)^(−ρ/2), ρ = ``k_exponent``
    (1: the paper's 1/√(d·log K)).
    """
    if init_scale <= 0:
        raise OperatorConfigError(f"init_scale {init_scale}: must be positive (1.0 is the default)")
    in_channels, out_channels = weight.shape[0], weight.shape[1]
    real = torch.view_as_real(weight)
    with torch.no_grad():
        if parametrization == "standard":
            real.uniform_(0.0, 1.0).mul_(init_scale / (in_channels * out_channels))
        else:
            std = init_scale * base_spectral_init_std(in_channels, out_channels, "mup")
            real.normal_(0.0, std * spectral_init_multiplier(modes, dim, "mup", k_exponent))
    return weight


class SpectralModule(Protocol):
    """What a spectral layer provides (operators.spectral.SpectralConv): its complex weights and c(K)."""

    lr_multiplier: float

    def spectral_weights(self) -> list[nn.Parameter]: ...


def spectral_modules(model: nn.Module) -> list[SpectralModule]:
    """All spectral layers inside ``model`` (works through wrappers such as DDP).

    Protocol (what operators.spectral.SpectralConv provides): a module with
    ``spectral_weights()`` (its complex weights R) and ``lr_multiplier`` (c(K)).
    """
    return [
        cast(SpectralModule, m)  # the filter below is the protocol check
        for m in model.modules()
        if callable(getattr(m, "spectral_weights", None)) and hasattr(m, "lr_multiplier")
    ]


def spectral_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The spectral weights R of every Fourier layer (complex tensors), and every parameter whose muP facts
    (operators.base_shapes) say it is spectral (a user's model)."""
    found = {id(p): p for module in spectral_modules(model) for p in module.spectral_weights()}
    for p in model.parameters():
        fact = _facts(p)
        if fact is not None and fact.role == "spectral":
            found.setdefault(id(p), p)
    return list(found.values())


class _Facts(Protocol):
    """What operators.base_shapes.MuShape offers the optimizer groups (read here without importing it)."""

    @property
    def role(self) -> str: ...

    @property
    def lr_multiplier(self) -> float: ...


def _facts(p: torch.Tensor) -> _Facts | None:
    """The muP facts ``operators.base_shapes.set_base_shapes`` put on ``p`` (None without)."""
    fact = getattr(p, "mutransfer_shape", None)
    if fact is None or not hasattr(fact, "role") or not hasattr(fact, "lr_multiplier"):
        return None
    return cast(_Facts, fact)


def declared_lr_multipliers(model: nn.Module) -> dict[int, tuple[nn.Parameter, str, float]]:
    """Per-parameter LR multipliers declared by the modules of ``model``.

    Protocol: a module may define ``mutransfer_lr_multipliers()`` yielding
    ``(parameter, group_name, multiplier)`` for parameters whose Adam LR is
    ``multiplier × lr`` (e.g. width-muP hidden weights, operators.width_mup).
    A parameter declared twice must get the same group and multiplier.
    Returns id(parameter) → (parameter, group_name, multiplier).
    """
    declared: dict[int, tuple[nn.Parameter, str, float]] = {}
    for module in model.modules():
        declare = getattr(module, "mutransfer_lr_multipliers", None)
        if declare is None:
            continue
        for p, name, mult in declare():
            mult = float(mult)
            if not mult > 0:
                raise OperatorConfigError(f"lr multiplier {mult} declared for group {name!r}: must be positive")
            previous = declared.get(id(p))
            if previous is not None and previous[1:] != (name, mult):
                raise OperatorConfigError(
                    f"a parameter is declared in group {previous[1]!r} x{previous[2]} and {name!r} x{mult}; declare it once"
                )
            declared[id(p)] = (p, name, mult)
    return declared


def optimizer_param_groups(model: nn.Module, lr: float, weight_decay: float = 0.0) -> list[dict[str, object]]:
    """Adam parameter groups: spectral weights at c(K)·lr, declared parameters at their multiplier·lr, the rest at lr.

    A parameter with muP facts (operators.base_shapes.set_base_shapes, a user's model) is grouped by them:
    a spectral one with the spectral groups, any other at its multiplier under its role's name.

    Each group has "params", "lr", "weight_decay", "name" and "lr_multiplier".
    Order: "spectral" groups (one per multiplier, so layers with different K
    get separate groups), then groups declared through the
    ``mutransfer_lr_multipliers()`` protocol (one per (name, multiplier), e.g.
    "hidden" for width-muP), then "other" (multiplier 1). A model that declares
    nothing (an FNO with the standard width rule) gets exactly the spectral and
    "other" groups.
    """
    if not lr > 0:
        raise OperatorConfigError(f"lr {lr}: the learning rate must be positive")
    spectral_ids: set[int] = set()
    by_multiplier: dict[float, list[nn.Parameter]] = {}
    for module in spectral_modules(model):
        for p in module.spectral_weights():
            if id(p) in spectral_ids:
                continue
            spectral_ids.add(id(p))
            by_multiplier.setdefault(module.lr_multiplier, []).append(p)
    declared: dict[tuple[str, float], list[nn.Parameter]] = {}
    faceted: set[int] = set()
    for p in model.parameters():  # a user's model: the muP facts on its parameters (operators.base_shapes)
        fact = _facts(p)
        if fact is None or id(p) in spectral_ids or not p.requires_grad:
            continue
        faceted.add(id(p))
        if fact.role == "spectral":
            spectral_ids.add(id(p))
            by_multiplier.setdefault(fact.lr_multiplier, []).append(p)
        elif fact.lr_multiplier != 1.0:
            declared.setdefault((fact.role, fact.lr_multiplier), []).append(p)
        else:
            faceted.discard(id(p))  # multiplier 1: with the rest
    for key, (p, name, mult) in declared_lr_multipliers(model).items():
        if key in spectral_ids or key in faceted or not p.requires_grad:
            continue
        declared.setdefault((name, mult), []).append(p)
    declared_ids = {id(p) for params in declared.values() for p in params}
    others = [
        p for p in model.parameters() if id(p) not in spectral_ids and id(p) not in declared_ids and p.requires_grad
    ]
    # dict[str, object], not a TypedDict: torch.optim takes groups as dict[str, Any].
    groups: list[dict[str, object]] = [
        {"params": params, "lr": lr * mult, "weight_decay": weight_decay, "name": "spectral", "lr_multiplier": mult}
        for mult, params in by_multiplier.items()
    ]
    groups += [
        {"params": params, "lr": lr * mult, "weight_decay": weight_decay, "name": name, "lr_multiplier": mult}
        for (name, mult), params in declared.items()
    ]
    if others:
        groups.append({"params": others, "lr": lr, "weight_decay": weight_decay, "name": "other", "lr_multiplier": 1.0})
    return groups


def effective_spectral_lr(
    lr: float, modes: int, dim: int, parametrization: str, width_factor: float = 1.0, k_exponent: float = 1.0
) -> float:
    """Adam LR actually applied to the spectral weights: c(K)·η0 (× the width factor), c(K) with exponent
    ``k_exponent`` (1: the paper's)."""
    return lr * spectral_lr_multiplier(modes, dim, parametrization, k_exponent) * width_factor


def model_spectral_lr(model: nn.Module, lr: float) -> float:
    """The spectral weights' Adam LR at step 0 in ``model``'s optimizer param groups (``lr`` without spectral weights)."""
    for group in optimizer_param_groups(model, lr):
        if group["name"] == "spectral":
            return float(cast(float, group["lr"]))  # optimizer_param_groups sets "lr" to a float
    return float(lr)


def clip_spectral_gradients(model: nn.Module, clip_value: float | None) -> None:
    """Clamp every spectral gradient entry to [-clip, clip] (real and imaginary parts separately).

    Call between backward() and optimizer.step(). ``None`` turns clipping off.
    Other parameters' gradients are not touched.
    """
    clamp_gradients(spectral_parameters(model), clip_value)


def real_view(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as its real (…, 2) view (real and imaginary parts as entries of their own, no copy); a real
    one as it is: how clipping, Adam and the finiteness checks treat complex weights."""
    return torch.view_as_real(t) if t.is_complex() else t


def clamp_gradients(params: Iterable[torch.Tensor], clip_value: float | None) -> None:
    """Clamp every gradient entry of ``params`` to [-clip, clip] (complex ones part by part); ``None``: no clipping.
    What :func:`clip_spectral_gradients` does to a model's spectral weights, for any tensors (a population's)."""
    if clip_value is None:
        return
    if not clip_value > 0:
        raise OperatorConfigError(f"clip_value {clip_value}: must be positive, or unset to turn clipping off")
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            real_view(p.grad).clamp_(-clip_value, clip_value)
