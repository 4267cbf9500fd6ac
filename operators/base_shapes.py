"""muP facts kept on the parameters, for K and width: infer them, rescale the init, set Adam's LRs.

The ``mup`` package's contract (``set_base_shapes`` then ``MuAdam``), extended to a second growing axis,
the Fourier modes K, and to complex weights. A model built at the target's sizes (K, width) is compared,
parameter by parameter, with the same model built at the base (proxy) sizes. The dims whose sizes differ
*grow*, either with the width or with K. What is found for each parameter (:class:`MuShape`) is stored on
the parameter itself, as ``param.mutransfer_shape``, where :class:`Adam` and :func:`param_groups` read it.

Which growing dims are the width's, from two instances: the sizes that grow on PyTorch's dense and norm
layers (``nn.Linear``, ``nn.Conv*``, ``nn.ConvTranspose*``, ``nn.Embedding``, ``nn.LayerNorm``, …) are the
width's sizes. A growing dim of any other parameter whose (base, model) sizes are not among them grows with
K; a spectral weight is laid out (…, in, out, modes…), so once one of its dims grows with K, every growing
dim after its first two width dims does too. Where every growing dim of a non-dense parameter carries the width's sizes
(K and the width grown by the same sizes), the sizes cannot tell: pass ``delta``. With ``delta`` (the model built at the base's K and
the model's width) the split is exact: dims that differ between base and delta grow with the width, dims
that differ between delta and model grow with K.

Roles and rules (Adam; width: Tensor Programs V, Table 3; K: Li, Yoo & Yang 2025, Theorem 3.5), with
m/m0 the width ratio and c(K) = b(K) = (d·log K)^(−ρ/2), d the number of K dims (ρ = 1: the paper):

==========  ===============================================  ===================  ====================================
role        what grows                                       Adam LR ×            init, by set_base_shapes
==========  ===============================================  ===================  ====================================
spectral    at least one dim with K                          c(K)/c(K0)·(m0/m)†   rms = base's rms·b(K)/b(K0)·√(m0/m)†
hidden      two dims with the width                          m0/m                 unchanged (fan-in init)
input       a dense layer's fan-out only                     1                    unchanged
readout     a dense layer's fan-in only                      m0/m                 × √(m0/m)
vector      its one dim larger than 1, with the width        1                    unchanged
fixed       nothing                                          1                    unchanged
==========  ===============================================  ===================  ====================================

† the width factors apply when two of its dims grow with the width. Every multiplier is relative to the
base (mup's convention): at the base's sizes the model trains exactly as its author wrote it, and from the
base to the model the spectral LR moves by c(K)/c(K0) = √(log K0 / log K) for ρ = 1 (Algorithm 1, line 4).
(The project's own FNO puts c(K) on its spectral LR absolutely, so its η is η_here·c(K0); the ratios
between two sizes, which transfer uses, are the same.) The spectral init is anchored at the base's measured
rms, whatever its author's K and width dependence. The readout follows Table 3's form (no forward
multiplier in a user's model): LR 1/fan_in and init variance 1/fan_in².

K of a spectral parameter is read from its K dims: K entries in each (one tensor per corner, as
operators.fno.FNO stores them), or neuraloperator's layout, 2K entries along each full dim and K+1 along
the last (half-spectrum) dim. A 1-D weight is read as holding K entries. Anything else: declare it.

A parameter whose role cannot be inferred is named in a one-line :class:`OperatorConfigError` with the fix:
:func:`operators.declarations.declare` its role before ``set_base_shapes``, or pass ``delta``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from operators.attention_facts import apply_attention_scales
from operators.declarations import declared_of
from operators.errors import OperatorConfigError
from operators.parametrization import check_k_exponent, data_aware_scale, declared_lr_multipliers, spectral_modules
from operators.shape_roles import differ, fan_dims, modes_of, role_of, torch_layer, width_ratio

_SHAPE = "mutransfer_shape"


@dataclass(frozen=True)
class MuShape:
    """The muP facts of one parameter: what grows, its role, and the multipliers they give.

    ``shape``/``base_shape``: the parameter's sizes in the model and in the base. ``k_dims``/``width_dims``:
    the dims that grow with K and with the width. ``modes``/``base_modes``: K of the model and of the base
    (spectral parameters only). ``width_ratio``: m/m0 of its width dims (1.0 without). ``k_exponent``: ρ.
    """

    name: str
    role: str
    shape: tuple[int, ...]
    base_shape: tuple[int, ...]
    k_dims: tuple[int, ...]
    width_dims: tuple[int, ...]
    modes: int | None
    base_modes: int | None
    width_ratio: float
    k_exponent: float
    declared: bool
    #: the LR's K factor in place of :attr:`k_factor`, the init's left as the rule makes it (a deliberately wrong
    #: rule of the rule panel: :func:`set_lr_k_factor`); None: the K rule's
    lr_k_factor: float | None = None

    @property
    def k_factor(self) -> float:
        """c(K)/c(K0) = b(K)/b(K0): the K rule from the base to the model (1 for a parameter without K)."""
        if self.modes is None or self.base_modes is None:
            return 1.0
        d = len(self.k_dims)
        return k_rule(self.modes, d, self.k_exponent) / k_rule(self.base_modes, d, self.k_exponent)

    @property
    def lr_multiplier(self) -> float:
        """The Adam LR multiplier (table in the module docstring)."""
        if self.role == "spectral":
            width = 1.0 / self.width_ratio if len(self.width_dims) == 2 else 1.0
            return (self.k_factor if self.lr_k_factor is None else self.lr_k_factor) * width
        if self.role in ("hidden", "readout"):
            return 1.0 / self.width_ratio
        return 1.0

    @property
    def init_multiplier(self) -> float:
        """How the init's rms moves from the base to the model: the spectral rule's factor (relative to the
        base's rms), √(m0/m) for a readout (relative to its own init), 1 otherwise."""
        if self.role == "spectral":
            width = math.sqrt(1.0 / self.width_ratio) if len(self.width_dims) == 2 else 1.0
            return self.k_factor * width
        if self.role == "readout":
            return math.sqrt(1.0 / self.width_ratio)
        return 1.0


def k_rule(modes: int, k_dims: int, k_exponent: float = 1.0) -> float:
    """c(K) = b(K) = (d·log K)^(−ρ/2) for a weight with ``k_dims`` = d dims that grow with K (K ≥ 2)."""
    if k_dims > 3:
        raise OperatorConfigError(
            f"{k_dims} dims grow with K: a spectral weight truncates 1, 2 or 3 dims; declare its k_dims"
        )
    return data_aware_scale(modes, k_dims, k_exponent)


def set_lr_k_factor(param: torch.Tensor, factor: float) -> None:
    """Give a spectral parameter's LR the K factor ``factor`` (from the base's K to the model's) in place of its K
    rule's, its init unchanged: how the rule panel trains a model with muP facts under a deliberately wrong rule
    (mutransfer._diagnostics.rule_panel). ``factor`` must be positive and finite."""
    fact = shape_of(param)
    if fact is None or fact.role != "spectral":
        raise OperatorConfigError("set_lr_k_factor: a spectral parameter with muP facts (run set_base_shapes first)")
    if not (factor > 0 and math.isfinite(factor)):
        raise OperatorConfigError(f"set_lr_k_factor: factor {factor} must be positive and finite")
    setattr(param, _SHAPE, replace(fact, lr_k_factor=float(factor)))


def shape_of(param: torch.Tensor) -> MuShape | None:
    """The facts :func:`set_base_shapes` put on ``param`` (None before it ran)."""
    found = getattr(param, _SHAPE, None)
    return found if isinstance(found, MuShape) else None


# --------------------------------------------------------------------------- inference


def _parameters(model: nn.Module, label: str) -> dict[str, tuple[nn.Parameter, nn.Module, str]]:
    if not isinstance(model, nn.Module):
        raise OperatorConfigError(f"set_base_shapes: {label} is a {type(model).__name__}, not an nn.Module")
    found: dict[str, tuple[nn.Parameter, nn.Module, str]] = {}
    for name, p in model.named_parameters():
        owner_name, _, leaf = name.rpartition(".")
        found[name] = (p, model.get_submodule(owner_name), leaf)
    return found


def _match(
    name: str, p: torch.Tensor, other: dict[str, tuple[nn.Parameter, nn.Module, str]], label: str
) -> torch.Tensor:
    if name not in other:
        raise OperatorConfigError(
            f"set_base_shapes: the {label} has no parameter {name!r}; build it with the same factory and options"
        )
    q = other[name][0]
    if q.dim() != p.dim():
        raise OperatorConfigError(
            f"set_base_shapes: {name!r} is {tuple(p.shape)} in the model and {tuple(q.shape)} in the {label};"
            " build both with the same factory and options"
        )
    return q


def _width_sizes(
    model: dict[str, tuple[nn.Parameter, nn.Module, str]], base: dict[str, tuple[nn.Parameter, nn.Module, str]]
) -> set[tuple[int, int]]:
    """The (base, model) sizes that grow on PyTorch's dense and norm layers: the width's sizes."""
    sizes: set[tuple[int, int]] = set()
    for name, (p, owner, _) in model.items():
        if torch_layer(owner):
            shape, base_shape = tuple(p.shape), tuple(base[name][0].shape)
            sizes.update((base_shape[i], shape[i]) for i in differ(base_shape, shape))
    return sizes


def infer_shapes(
    model: nn.Module, base: nn.Module, *, delta: nn.Module | None = None, k_exponent: float = 1.0
) -> dict[str, MuShape]:
    """The facts of every parameter of ``model`` against ``base`` (and ``delta``), changing nothing.

    Args:
        model: the model at the target's sizes (K, width).
        base: the same architecture at the base (proxy) sizes.
        delta: optional, the same architecture at the base's K and the model's width: makes the K/width
            split exact where the sizes alone cannot tell them apart.
        k_exponent: ρ of the K rule (1: the paper's 1/√(d·log K)).

    Returns:
        parameter name → :class:`MuShape`, in the model's order.
    """
    rho = check_k_exponent(k_exponent)
    ours, theirs = _parameters(model, "model"), _parameters(base, "base")
    for name, (p, _, _) in ours.items():
        _match(name, p, theirs, "base")
    extra = sorted(set(theirs) - set(ours))
    if extra:
        raise OperatorConfigError(
            f"set_base_shapes: the base has parameters the model lacks ({extra[0]!r}, …); build both with the same factory"
        )
    middle = None if delta is None else _parameters(delta, "delta")
    width_sizes = _width_sizes(ours, theirs)
    if middle is None:
        width_changed = bool(width_sizes)
    else:
        width_changed = any(
            differ(tuple(theirs[n][0].shape), tuple(_match(n, p, middle, "delta").shape))
            for n, (p, _, _) in ours.items()
        )
    facts: dict[str, MuShape] = {}
    for name, (p, owner, leaf) in ours.items():
        shape, base_shape = tuple(p.shape), tuple(theirs[name][0].shape)
        fans = fan_dims(owner, leaf)
        declared = declared_of(p)
        if middle is not None:
            mid = tuple(_match(name, p, middle, "delta").shape)
            w, k = differ(base_shape, mid), differ(mid, shape)
            both = set(w) & set(k)
            if both:
                raise OperatorConfigError(
                    f"set_base_shapes: dim {min(both)} of {name!r} changes with both K and the width, as a factorized "
                    "weight's (Tucker/CP factors) does, which follows neither rule; use a dense spectral weight "
                    "(neuraloperator: factorization=None), or declare its role (mup.declare)"
                )
        else:
            growing = differ(base_shape, shape)
            w = tuple(i for i in growing if torch_layer(owner) or (base_shape[i], shape[i]) in width_sizes)
            if len(w) < len(growing):  # a spectral weight (…, in, out, modes…): after its two channel dims, a
                w = w[:2]  # growing dim whose sizes happen to be some layer's width sizes is still a mode dim
            k = tuple(i for i in growing if i not in w)
        if declared is None:
            role = role_of(name, shape, k, w, fans, width_changed)
        else:
            role = declared.role
            if declared.k_dims is None and role != "spectral":
                w, k = tuple(sorted(w + k)), ()
            k = k if declared.k_dims is None else declared.k_dims
            w = tuple(i for i in w if i not in k) if declared.width_dims is None else declared.width_dims
            if role == "spectral" and not k:
                raise OperatorConfigError(
                    f"set_base_shapes: {name!r} is declared spectral but none of its dims grows with K; declare its k_dims"
                )
        modes = base_modes = None
        if role == "spectral":
            base_declared = declared_of(theirs[name][0])
            if declared is not None and declared.modes is not None:
                if base_declared is None or base_declared.modes is None:
                    raise OperatorConfigError(
                        f"set_base_shapes: {name!r} declares modes in the model but not in the base; "
                        "declare it in every model the factory builds"
                    )
                modes, base_modes = declared.modes, base_declared.modes
            else:
                modes = modes_of(name, tuple(shape[i] for i in k), "model")
                base_modes = modes_of(name, tuple(base_shape[i] for i in k), "base")
        facts[name] = MuShape(
            name=name,
            role=role,
            shape=shape,
            base_shape=base_shape,
            k_dims=k,
            width_dims=w,
            modes=modes,
            base_modes=base_modes,
            width_ratio=width_ratio(shape, base_shape, w, fans),
            k_exponent=rho,
            declared=declared is not None,
        )
    return facts


def _applies_mup(model: nn.Module) -> bool:
    """True for a model whose own modules scale LRs (operators' spectral and width-muP layers)."""
    return bool(declared_lr_multipliers(model)) or any(m.lr_multiplier != 1.0 for m in spectral_modules(model))


def _rms(t: torch.Tensor) -> float:
    return float(t.detach().abs().double().pow(2).mean().sqrt()) if t.numel() else 0.0


def set_base_shapes(
    model: nn.Module,
    base: nn.Module,
    *,
    delta: nn.Module | None = None,
    k_exponent: float = 1.0,
    rescale_params: bool = True,
) -> nn.Module:
    """Put the muP facts on ``model``'s parameters and rescale their init (mup's ``set_base_shapes``, with K).

    Args:
        model: the model at the target's sizes, as its author initialised it.
        base: the same architecture at the base (proxy) sizes; its init anchors the spectral rule.
        delta: optional, the architecture at the base's K and the model's width (exact K/width split).
        k_exponent: ρ of the K rule (1: the paper).
        rescale_params: rescale the init of spectral and readout parameters (module docstring).

    Each attention declared by ``mup.declare_attention`` gets muP's 1/d_h scale (operators.attention_facts),
    whatever ``rescale_params``: it is part of the forward, not of the init.

    Returns:
        ``model`` (changed in place). Then make its optimizer with :class:`Adam`.

    Example::

        model, base = build(K=24, width=64), build(K=6, width=16)
        set_base_shapes(model, base)
        opt = Adam(model.parameters(), lr=3e-3)
    """
    if _applies_mup(model):
        raise OperatorConfigError(
            "set_base_shapes: the model applies muP itself (built with parametrization or width_parametrization"
            " 'mup'); build it and its base in the standard parametrization"
        )
    facts = infer_shapes(model, base, delta=delta, k_exponent=k_exponent)
    params = dict(model.named_parameters())
    base_params = dict(base.named_parameters())
    if rescale_params:
        again = [n for n in facts if shape_of(params[n]) is not None]
        if again:
            raise OperatorConfigError(
                f"set_base_shapes: {again[0]!r} already has its muP facts; rescaling twice would compound: "
                "build a fresh model, or pass rescale_params=False"
            )
    apply_attention_scales(model, base)
    with torch.no_grad():
        for name, fact in facts.items():
            p = params[name]
            if rescale_params and fact.role == "spectral":
                now, anchor = _rms(p), _rms(base_params[name])
                if now > 0:
                    p.mul_(anchor * fact.init_multiplier / now)
            elif rescale_params and fact.role == "readout":
                p.mul_(fact.init_multiplier)
            setattr(p, _SHAPE, fact)
    return model
