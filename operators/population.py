"""A population of FNOs of one shape, trained as one model: every weight carries a leading member dimension.

The trials of a search that share the proxy's shape differ only in their hyperparameters. Trained one per
process, a small proxy's step is bound by the number of kernels and the Python around them, not by its
arithmetic (issue "Proxies that pay in time": 1.35 GFLOP/s for the default study's proxy, 12.1 for its target).
Stacked, M members run every layer as one batched kernel: on a 2-core CPU, one thread, a step of 8 default-study
proxies takes 1.64× the time of one proxy's step (9 rounds: 1.52–1.96×), not 8×
(``python benchmarks/population_step.py --rounds 9``, docs/benchmarks.md).

- :class:`PopulationFNO` stacks M :class:`~operators.fno.FNO` of one configuration (their own initial weights):
  input (M, B, N_1, …, N_d, C_in) → output (M, B, N_1, …, N_d, C_out), member m computed with member m's
  weights only. :meth:`PopulationFNO.member` gives member m back as a plain FNO.
- :class:`PopulationAdam` is ``torch.optim.Adam`` for each member at once, each with its own learning rate and
  β1 (the searched values), every parameter at its muP multiplier and weight decay
  (:func:`~operators.parametrization.optimizer_param_groups` of the members' shape).
- :func:`clip_population_spectral_gradients` is :func:`~operators.parametrization.clip_spectral_gradients`
  for every member at once.

A member trained in a population takes the steps the member trained alone takes, to float32 rounding per step
(tests/operators/test_population.py): the loss of a population is the sum of its members' losses, so each
member's gradient is its own. :meth:`PopulationFNO.keep` and :meth:`PopulationAdam.keep` drop members (a stopped
trial) and go on with the others. An LR schedule sets ``PopulationAdam.lr`` (one rate per member) before each
step; neither the rates nor the moments are in its ``state_dict`` (:meth:`PopulationAdam.moments` reads the
latter). mutransfer._training._population trains a search's window this way (``mutransfer sweep --executor
population``); members of different batch sizes train as separate populations.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from operators.contraction import truncated_dft, truncated_idft
from operators.errors import OperatorConfigError
from operators.fno import FNO, grid_coordinates
from operators.parametrization import clamp_gradients, optimizer_param_groups, real_view, spectral_parameters
from operators.spectral import SpectralConv, check_grid
from operators.width_mup import MuLinear


class Stacked(Protocol):
    """What :class:`PopulationAdam` and the population trainer need of a population: :class:`PopulationFNO`, or
    :class:`~operators.population_vmap.VmapPopulation` for any other model."""

    size: int

    @property
    def stacks(self) -> list[tuple[nn.Parameter, str]]: ...

    def template(self) -> tuple[nn.Module, list[tuple[nn.Parameter, nn.Parameter]]]: ...

    def keep(self, members: Sequence[int]) -> None: ...

    def member(self, m: int) -> nn.Module: ...


def stackable(model: nn.Module) -> bool:
    """Whether ``model`` can be a member of a :class:`PopulationFNO` (an FNO of this module's, not a subclass)."""
    return type(model) is FNO


def _stack(tensors: Iterable[torch.Tensor]) -> nn.Parameter:
    """One parameter (M, …) holding copies of the members' tensors (…) along a new leading dimension."""
    return nn.Parameter(torch.stack([t.detach().clone() for t in tensors]))


class PopulationFNO(nn.Module):
    """M FNOs of one configuration as one module; parameter p of member m is ``p[m]``.

    Args:
        members: FNOs built with the same ``config`` (their weights may differ: each trial's own seed).

    Input (M, B, N_1, …, N_d, C_in) → output (M, B, N_1, …, N_d, C_out). Raises a one-line
    :class:`OperatorConfigError` for an empty list or members of different configurations.
    """

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if not members:
            raise OperatorConfigError("population: needs at least one member FNO")
        for i, model in enumerate(members):
            if not stackable(model):
                raise OperatorConfigError(f"population member {i}: is a {type(model).__name__}, not an FNO")
        fnos = [cast(FNO, model) for model in members]
        self._init_from(fnos)

    def _init_from(self, members: list[FNO]) -> None:
        config = members[0].config
        for i, model in enumerate(members):
            if model.config != config:
                differ = sorted(k for k in config if model.config.get(k) != config[k])
                raise OperatorConfigError(
                    f"population member {i}: its {', '.join(differ)} differ from member 0's; "
                    "a population holds members of one configuration (group trials by shape)"
                )
        self.config = dict(config)
        self.size = len(members)
        self.dim, self.modes, self.padding = members[0].dim, members[0].modes, members[0].padding
        # a copy of member 0 outside the module's parameters: what member() fills and template() reads
        self._blank: tuple[FNO] = (copy.deepcopy(members[0]),)
        self.lift_weight = _stack(m.lift.weight for m in members)  # (M, m, C_in + d)
        self.lift_bias = _stack(m.lift.bias for m in members)  # (M, m)
        layers = len(members[0].spectral)
        self.pointwise_weight = nn.ParameterList(
            _stack(cast(torch.Tensor, m.pointwise[i].weight).flatten(1) for m in members) for i in range(layers)
        )  # each (M, m_out, m_in)
        self.pointwise_bias = nn.ParameterList(
            _stack(cast(torch.Tensor, m.pointwise[i].bias) for m in members) for i in range(layers)
        )
        spectral = [[cast(SpectralConv, layer).spectral_weights() for layer in m.spectral] for m in members]
        corners = len(spectral[0][0])
        self.spectral_weight = nn.ParameterList(
            _stack(weights[i][c] for weights in spectral) for i in range(layers) for c in range(corners)
        )  # layer i, corner c at i * corners + c; each (M, m_in, m_out, K, …, K) complex
        self.corners = corners
        readout = cast(MuLinear, members[0].project[0])
        self.readout_multiplier = float(readout.multiplier)
        self.readout_weight = _stack(cast(MuLinear, m.project[0]).weight for m in members)  # (M, P, m)
        self.readout_bias = _stack(cast(MuLinear, m.project[0]).bias for m in members)
        self.last_weight = _stack(cast(nn.Linear, m.project[2]).weight for m in members)  # (M, C_out, P)
        self.last_bias = _stack(cast(nn.Linear, m.project[2]).bias for m in members)
        self._names = self._member_names()

    # ---- the pieces of one layer, for every member ---------------------------------------------
    # Activations lie member- and channel-major, (M, C, B, N_1, …, N_d): a pointwise layer of member m is then one
    # (C_out × C_in) @ (C_in × B·N) product, so a layer of the population is a single bmm over M (not M·B tiny ones).
    @staticmethod
    def _linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """(M, C_in, B, N…) → (M, C_out, B, N…): member m's ``weight[m] @ h[m] + bias[m]``, one bmm."""
        members, c_in = h.shape[:2]
        y = torch.baddbmm(bias.unsqueeze(-1), weight, h.reshape(members, c_in, -1))
        return y.view((members, weight.shape[1]) + tuple(h.shape[2:]))

    def _spectral(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        """K_l for every member: real (M, m, B, N_1, …, N_d) → the same shape."""
        if self.spectral_weight[0].device.type == "cpu":
            return self._spectral_gemm(h, layer)
        return self._spectral_fft(h, layer)

    def _spectral_fft(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        """K_l as SpectralConv computes it on a GPU: rfftn, the kept corners contracted, irfftn."""
        d, k = self.dim, self.modes
        grid = tuple(h.shape[3:])
        axes = tuple(range(-d, 0))
        spectrum = torch.fft.rfftn(_working(h), dim=axes)  # (M, m, B, N_1, …, N_d // 2 + 1)
        out = spectrum.new_zeros((h.shape[0], self.spectral_weight[0].shape[2]) + spectrum.shape[2:])
        for c in range(self.corners):
            negative = [(c >> (d - 2 - j)) & 1 for j in range(d - 1)]  # SpectralConv's corner order
            index = (slice(None),) * 3 + tuple(slice(-k, None) if n else slice(0, k) for n in negative) + (slice(0, k),)
            weight = _complex_for(
                self.spectral_weight[layer * self.corners + c], spectrum.real.dtype
            )  # (M, m_in, m_out, K…)
            # modes as batch: (M, K…, m_out, m_in) @ (M, K…, m_in, B), complex, one batched matmul
            x = spectrum[index].movedim(1, -1).movedim(1, -1)  # (M, K…, m_in, B)
            w = weight.movedim(1, -1).movedim(1, -1).transpose(-1, -2)  # (M, K…, m_out, m_in)
            out[index] = torch.matmul(w, x).movedim(-1, 1).movedim(-1, 1)
        y: torch.Tensor = torch.fft.irfftn(out, s=grid, dim=axes)  # torch.fft is unannotated
        return y.to(h.dtype)

    def _spectral_gemm(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        """K_l on CPU as the FNO computes it there (operators.contraction: the kept rfft modes as real GEMMs, in
        its packed mode order: each non-last axis's corner bit beside its frequency), the product of every member
        and mode as one complex batched matmul, samples as rows: (B × m_in) @ (m_in × m_out) per member and mode.
        (On this project's 2-core machine, one thread, 8 default-study proxies, while making the change: a layer's
        forward and backward in 0.30 ms this way, 0.46 ms as one real GEMM of [[Re W, Im W], [−Im W, Re W]] blocks.)"""
        d, k = self.dim, self.modes
        grid = tuple(h.shape[3:])
        planes = truncated_dft(_working(h), k, d)  # (2, Q, M, m_in, B), Q = 2^(d-1) K^d
        x = torch.view_as_complex(planes.permute(1, 2, 4, 3, 0).contiguous())  # (Q, M, B, m_in)
        corners = [
            _complex_for(self.spectral_weight[layer * self.corners + c], planes.dtype) for c in range(self.corners)
        ]  # each (M, m_in, m_out, K, …, K)
        w = torch.stack(corners) if len(corners) > 1 else corners[0][None]  # (C, M, m_in, m_out, K_1, …, K_d)
        w = w.reshape((2,) * (d - 1) + tuple(w.shape[1:]))  # corner bits most significant first
        order = [axis for j in range(d - 1) for axis in (j, d + 2 + j)] + [2 * d + 1, d - 1, d, d + 1]
        w = w.permute(order).reshape(-1, *w.shape[d - 1 : d + 2])  # (Q, M, m_in, m_out), packed mode order
        y = torch.view_as_real(torch.matmul(x, w))  # (Q, M, B, m_out, 2)
        return truncated_idft(y.permute(4, 0, 1, 3, 2), k, grid).to(h.dtype)  # from (2, Q, M, m_out, B)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(M, B, N_1, …, N_d, C_in) → (M, B, N_1, …, N_d, C_out), member m with its own weights."""
        if x.dim() != self.dim + 3 or x.shape[0] != self.size:
            raise OperatorConfigError(
                f"input has shape {tuple(x.shape)}; a population of {self.size} FNO-{self.dim}D expects "
                f"({self.size}, batch, {', '.join(['N'] * self.dim)}, channels)"
            )
        members, batch = x.shape[:2]
        grid = tuple(x.shape[2:-1])
        check_grid(tuple(n + self.padding for n in grid), self.modes)
        coords = grid_coordinates(grid, device=x.device, dtype=x.dtype).expand(members, batch, *grid, self.dim)
        inputs = torch.cat([x, coords], dim=-1).movedim(-1, 1).contiguous()  # (M, C_in + d, B, N…)
        h = self._linear(inputs, self.lift_weight, self.lift_bias)
        if self.padding:
            h = F.pad(h, [0, self.padding] * self.dim)
        layers = len(self.pointwise_weight)
        for layer in range(layers):
            h = self._spectral(h, layer) + self._linear(h, self.pointwise_weight[layer], self.pointwise_bias[layer])
            if layer < layers - 1:
                h = F.gelu(h)
        if self.padding:
            h = h[(slice(None),) * 3 + (slice(0, -self.padding),) * self.dim].contiguous()
        h = F.gelu(self._linear(h, self.readout_weight * self.readout_multiplier, self.readout_bias))
        return self._linear(h, self.last_weight, self.last_bias).movedim(1, -1).contiguous()

    # ---- members back, and each stacked parameter's member-0 counterpart ----------------------
    @property
    def stacks(self) -> list[tuple[nn.Parameter, str]]:
        """(stacked parameter, the name of its counterpart in one FNO's state_dict)."""
        return self._names

    def _member_names(self) -> list[tuple[nn.Parameter, str]]:
        """(stacked parameter, the name of its counterpart in one FNO's state_dict)."""
        names: list[tuple[nn.Parameter, str]] = [(self.lift_weight, "lift.weight"), (self.lift_bias, "lift.bias")]
        for layer, (w, b) in enumerate(zip(self.pointwise_weight, self.pointwise_bias)):
            names += [(w, f"pointwise.{layer}.weight"), (b, f"pointwise.{layer}.bias")]
        for i, w in enumerate(self.spectral_weight):
            names.append((w, f"spectral.{i // self.corners}.weights.{i % self.corners}"))
        names += [(self.readout_weight, "project.0.weight"), (self.readout_bias, "project.0.bias")]
        names += [(self.last_weight, "project.2.weight"), (self.last_bias, "project.2.bias")]
        return names

    def member(self, m: int) -> FNO:
        """Member ``m`` as a plain FNO (a copy of its current weights, on the population's device and dtype)."""
        if not 0 <= m < self.size:
            raise OperatorConfigError(f"member {m}: the population has members 0 … {self.size - 1}")
        model = copy.deepcopy(self._blank[0])
        params = dict(model.named_parameters())
        with torch.no_grad():
            for stacked, name in self._names:  # .data: the member's device and dtype (complex stays complex)
                params[name].data = stacked[m].detach().clone().reshape(params[name].shape)
        return model

    @torch.no_grad()
    def keep(self, members: Sequence[int]) -> None:
        """Keep only ``members`` (indices, in the order given): every stacked parameter is sliced in place, its
        gradient dropped; :meth:`PopulationAdam.keep` slices the optimizer's state alike. A search stops a
        member (pruned, diverged) this way and goes on with the others."""
        index = member_index(members, self.size)
        for module in self.modules():  # new parameters: autograd keeps each leaf's shape, so none is reshaped
            for name, p in list(module._parameters.items()):
                if p is not None:
                    module._parameters[name] = nn.Parameter(p.detach()[index.to(p.device)].contiguous())
        self._names = self._member_names()
        self.size = len(index)

    def template(self) -> tuple[FNO, list[tuple[nn.Parameter, nn.Parameter]]]:
        """A fresh FNO of the members' configuration, and each stacked parameter with the parameter of that FNO it
        stacks: the per-parameter facts (muP LR multipliers, weight decay) are read from it."""
        one = copy.deepcopy(self._blank[0])
        params = dict(one.named_parameters())
        return one, [(stacked, params[name]) for stacked, name in self._names]


def _working(h: torch.Tensor) -> torch.Tensor:
    """The spectral layers' working precision, as SpectralConv's: float64 stays, anything else is float32."""
    return h if h.dtype == torch.float64 else h.float()


_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def _complex_for(weight: torch.Tensor, real: torch.dtype) -> torch.Tensor:
    """The complex weight at the precision of a ``real`` activation (complex128 for float64, as SpectralConv)."""
    dtype = _COMPLEX[real]
    return weight if weight.dtype == dtype else weight.to(dtype)


def member_index(members: Sequence[int], size: int) -> torch.Tensor:
    """Indices of kept members as a tensor (one-line errors for none, duplicates, or out of range)."""
    index = [int(m) for m in members]
    if not index or len(set(index)) != len(index) or not all(0 <= m < size for m in index):
        raise OperatorConfigError(f"keep {index}: give distinct members among 0 … {size - 1}, at least one")
    return torch.tensor(index, dtype=torch.long)


def _per_member(value: float | Sequence[float] | torch.Tensor, size: int, name: str) -> torch.Tensor:
    """One float64 value per member from one value or M (a one-line error otherwise)."""
    t = torch.as_tensor(value, dtype=torch.float64).flatten()
    if t.numel() == 1:
        t = t.expand(size)
    if t.numel() != size:
        raise OperatorConfigError(f"{name}: {t.numel()} values for a population of {size}; give one per member")
    return t.clone()


class _Moments:
    """Adam's moments of the population's parameters of one device and real dtype, flat: two (M, N) buffers, N the
    real entries of one member's parameters, with each column's muP LR multiplier and weight decay (1, N)."""

    def __init__(self, indices: list[int], params: list[torch.Tensor], facts: list[tuple[float, float]], size: int):
        first = real_view(params[0])
        self.indices = indices
        self.widths = [real_view(p).numel() // size for p in params]
        spread = [torch.full((w,), 0.0, dtype=first.dtype) for w in self.widths]
        self.multiplier = torch.cat([t.fill_(m) for t, (m, _d) in zip(spread, facts)]).to(first.device)[None]
        decay = [d for _m, d in facts]
        self.decay = (
            torch.cat([torch.full((w,), d, dtype=first.dtype) for w, d in zip(self.widths, decay)]).to(first.device)[
                None
            ]
            if any(decay)
            else None
        )
        self.exp_avg = torch.zeros(size, sum(self.widths), dtype=first.dtype, device=first.device)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)

    def keep(self, rows: torch.Tensor) -> None:
        rows = rows.to(self.exp_avg.device)
        self.exp_avg, self.exp_avg_sq = self.exp_avg[rows].contiguous(), self.exp_avg_sq[rows].contiguous()

    def piece(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The moments' columns of the group's parameter at ``position``: copies, (M, width)."""
        start = sum(self.widths[:position])
        columns = slice(start, start + self.widths[position])
        return self.exp_avg[:, columns].clone(), self.exp_avg_sq[:, columns].clone()

    def step(self, params: list[torch.Tensor], step_size: torch.Tensor, one_minus_beta1: torch.Tensor, step: int,
             beta2: float, eps: float) -> None:  # fmt: skip
        """One Adam update of ``params`` (this group's, in order): ``step_size`` (M,) the members' LR over their bias
        correction, ``one_minus_beta1`` (M,)."""
        size, real = self.exp_avg.shape[0], self.exp_avg.dtype
        grad = torch.cat([real_view(cast(torch.Tensor, p.grad)).reshape(size, -1) for p in params], dim=1)  # (M, N)
        if self.decay is not None:
            grad.addcmul_(self.decay, torch.cat([real_view(p).reshape(size, -1) for p in params], dim=1))
        self.exp_avg.lerp_(grad, one_minus_beta1.to(device=grad.device, dtype=real)[:, None])
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = self.exp_avg_sq.sqrt().div_(math.sqrt(1 - beta2**step)).add_(eps)
        rate = step_size.to(device=grad.device, dtype=real)[:, None] * self.multiplier
        update = (self.exp_avg * rate).div_(denom)
        torch._foreach_sub_(
            [real_view(p) for p in params],
            [u.view(real_view(p).shape) for u, p in zip(torch.split(update, self.widths, dim=1), params)],
        )


class PopulationAdam(torch.optim.Optimizer):
    """Adam for every member of a population (:class:`PopulationFNO`, or any :class:`Stacked`): member m at
    ``lr[m]`` and ``beta1[m]``.

    Each parameter moves at its muP multiplier × the member's LR with its weight decay, as
    :func:`~operators.parametrization.optimizer_param_groups` groups one FNO of the population's shape; the
    update is ``torch.optim.Adam``'s (L2 weight decay added to the gradient, bias-corrected moments, complex
    weights as real pairs).

    The moments of the parameters of one device and real dtype lie in two (M, N) buffers, N their real entries per
    member, each column with its parameter's multiplier and weight decay: a step is a dozen whole-buffer operations
    whatever the number of parameters (one gather of the gradients, one scatter of the update), not a dozen per
    parameter. The buffers are made at the first step, on the parameters' devices and dtypes then. The multipliers
    and weight decays are read once, when the optimizer is made (changing a group's ``lr_multiplier`` or
    ``weight_decay`` later has no effect). :meth:`moments` gives one parameter's moments in its own shape and dtype.

    Args:
        population: the stacked model.
        lr: one learning rate per member (or one for all).
        beta1: one β1 per member (or one for all); ``beta2``, ``eps``, ``weight_decay``: shared.
    """

    def __init__(
        self,
        population: Stacked,
        lr: float | Sequence[float] | torch.Tensor,
        beta1: float | Sequence[float] | torch.Tensor = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        size = population.size
        lrs, beta1s = _per_member(lr, size, "lr"), _per_member(beta1, size, "beta1")
        if not bool((lrs > 0).all()):
            raise OperatorConfigError("lr: every member's learning rate must be positive")
        if not bool(((beta1s >= 0) & (beta1s < 1)).all()) or not 0 <= beta2 < 1:
            raise OperatorConfigError("beta1, beta2: must lie in [0, 1)")
        blank, template = population.template()
        facts: dict[int, tuple[float, float]] = {}
        for group in optimizer_param_groups(blank, 1.0, weight_decay):
            for p in cast(list[torch.Tensor], group["params"]):
                facts[id(p)] = (float(cast(float, group["lr_multiplier"])), float(cast(float, group["weight_decay"])))
        params = [
            {"params": [stacked], "lr_multiplier": facts[id(single)][0], "weight_decay": facts[id(single)][1]}
            for stacked, single in template
        ]
        super().__init__(params, dict(beta2=beta2, eps=eps))
        self.lr, self.beta1, self.size = lrs, beta1s, size
        self.population = population
        self.beta2, self.eps = beta2, eps
        self.steps = 0
        self._facts = [facts[id(single)] for _stacked, single in template]  # per parameter, in the groups' order
        self._moments: list[_Moments] = []  # made at the first step

    def _stacked(self) -> list[torch.Tensor]:
        return [cast(torch.Tensor, group["params"][0]) for group in self.param_groups]

    def moments(self, stacked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Adam's first and second moments of ``stacked`` (a parameter of the population), each a copy in its
        shape and dtype (M, …); ``None`` before the first step."""
        found = [i for i, p in enumerate(self._stacked()) if p is stacked]
        if not found:
            raise OperatorConfigError(
                "moments: not a parameter this optimizer steps (after keep(), ask for the new ones)"
            )
        if not self._moments:
            return None
        (index,) = found
        group = next(g for g in self._moments if index in g.indices)
        out = []
        for piece in group.piece(group.indices.index(index)):
            shaped = piece.view(real_view(stacked).shape)
            out.append(torch.view_as_complex(shaped) if stacked.is_complex() else shaped)
        return out[0], out[1]

    @torch.no_grad()
    def keep(self, members: Sequence[int]) -> None:
        """Keep only ``members``' LR, β1 and Adam moments, after :meth:`PopulationFNO.keep` with the same
        ``members``: the optimizer then steps the population's new parameters."""
        index = member_index(members, self.size)
        if self.population.size != len(index):
            raise OperatorConfigError("keep: call PopulationFNO.keep with the same members first")
        self.lr, self.beta1, self.size = self.lr[index], self.beta1[index], len(index)
        for moments in self._moments:
            moments.keep(index)
        for group, (stacked, _name) in zip(self.param_groups, self.population.stacks):
            group["params"] = [stacked]

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        """One Adam update of every member (``torch.optim.Adam``'s, at each member's LR and β1)."""
        stacked = self._stacked()
        missing = [i for i, p in enumerate(stacked) if p.grad is None]
        if missing:
            raise OperatorConfigError(
                f"step: {len(missing)} of the population's parameters have no gradient; "
                "call backward on a loss of the whole population's output first"
            )
        if not self._moments:  # one set of flat buffers per device and real dtype
            kinds: dict[tuple[torch.device, torch.dtype], list[int]] = {}
            for i, p in enumerate(stacked):
                kinds.setdefault((p.device, real_view(p).dtype), []).append(i)
            self._moments = [
                _Moments(ix, [stacked[i] for i in ix], [self._facts[i] for i in ix], self.size) for ix in kinds.values()
            ]
        self.steps += 1
        step_size = self.lr / (1 - self.beta1**self.steps)  # float64, cast to each group's dtype
        for moments in self._moments:
            params = [stacked[i] for i in moments.indices]
            moments.step(params, step_size, 1 - self.beta1, self.steps, self.beta2, self.eps)


def clip_population_spectral_gradients(population: Stacked, clip_value: float | None) -> None:
    """Clamp every member's spectral gradient entries to [-clip, clip] (real and imaginary parts apart), as
    :func:`~operators.parametrization.clip_spectral_gradients` does for one model (an FNO's spectral weights, or
    the parameters a user's model declares spectral). ``None``: no clipping."""
    if clip_value is None:
        return
    if isinstance(population, PopulationFNO):
        clamp_gradients(population.spectral_weight, clip_value)
        return
    one, pairs = population.template()
    spectral = {id(p) for p in spectral_parameters(one)}
    clamp_gradients([stacked for stacked, single in pairs if id(single) in spectral], clip_value)
